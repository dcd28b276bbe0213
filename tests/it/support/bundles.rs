//! RICH bundles written for tests: contracts named by their digest, a lockfile pointing at
//! them.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use palisade_policy::digest::Sha256Digest;
use serde_json::{json, Value};

pub const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// A contract with the six domains; `input` is `structural.input` (or `"unknown"`).
pub fn contract(
    input: Value,
    side_effect: &str,
    reversibility: &str,
    idempotency_key: &str,
) -> Value {
    json!({
        "structural": {"input": input, "output": "unknown"},
        "representation": "unknown", "semantic": "unknown", "error": "unknown",
        "state": "not-applicable",
        "operational": {"sideEffect": side_effect, "reversibility": reversibility,
                        "idempotencyKey": idempotency_key, "modelMediation": "none"}
    })
}

/// As [`contract`], with `structural.output` too.
pub fn contract_with_output(
    input: Value,
    output: Value,
    side_effect: &str,
    reversibility: &str,
) -> Value {
    let mut c = contract(input, side_effect, reversibility, "optional");
    c["structural"]["output"] = output;
    c
}

/// An object schema requiring integer `qty` ≥ 0.
pub fn qty_schema() -> Value {
    json!({"$schema": DIALECT, "type": "object", "required": ["qty"],
           "properties": {"qty": {"type": "integer", "minimum": 0}}})
}

pub struct BundleFiles {
    pub lockfile: PathBuf,
    pub contracts: PathBuf,
    /// `sha-256:` of the lockfile's JCS form.
    pub digest: String,
    pub binding_id: String,
}

impl BundleFiles {
    /// The bundle a command wrote into `dir` (`lock.json`, `contracts/`), e.g. `lock
    /// import-openapi` or `lock pin-mcp`.
    pub fn in_dir(dir: &Path) -> BundleFiles {
        let lock: Value =
            serde_json::from_slice(&std::fs::read(dir.join("lock.json")).unwrap()).unwrap();
        BundleFiles {
            lockfile: dir.join("lock.json"),
            contracts: dir.join("contracts"),
            digest: format!(
                "sha-256:{}",
                palisade_policy::digest::Sha256Digest::of_json(&lock).to_hex()
            ),
            binding_id: lock["bindingId"].as_str().unwrap().to_owned(),
        }
    }

    /// The lockfile as JSON.
    pub fn lock(&self) -> Value {
        serde_json::from_slice(&std::fs::read(&self.lockfile).unwrap()).unwrap()
    }

    /// The file of the contract the capability `name` is bound to.
    pub fn contract_path(&self, name: &str) -> PathBuf {
        let lock = self.lock();
        let digest = lock["capabilities"][name]["contractDigest"]
            .as_str()
            .unwrap_or_else(|| panic!("no capability {name:?}"));
        self.contracts
            .join(format!("{}.json", digest.trim_start_matches("sha-256:")))
    }

    /// The contract the capability `name` is bound to.
    pub fn contract(&self, name: &str) -> Value {
        serde_json::from_slice(&std::fs::read(self.contract_path(name)).unwrap()).unwrap()
    }

    /// The `[rich]` table for these files, with `extra` lines.
    pub fn rich_toml(&self, extra: &str) -> String {
        format!(
            "[rich]\nlockfile = \"{}\"\ncontracts = \"{}\"\n{extra}",
            self.lockfile.display(),
            self.contracts.display()
        )
    }
}

/// `palisade lock check --lockfile LOCKFILE --contracts CONTRACTS`, run.
pub fn lock_check(lockfile: &Path, contracts: &Path) -> std::process::Output {
    std::process::Command::new(super::bin())
        .args(["lock", "check", "--lockfile"])
        .arg(lockfile)
        .arg("--contracts")
        .arg(contracts)
        .output()
        .unwrap()
}

/// Writes `capabilities` (name, `METHOD /path`, contract, optional `runtime`) as a bundle
/// under `dir` (`lock.json`, `contracts/`).
pub fn write_bundle(
    dir: &Path,
    binding_id: &str,
    capabilities: &[(&str, &str, Value, Option<Value>)],
) -> BundleFiles {
    let contracts = dir.join("contracts");
    std::fs::create_dir_all(&contracts).unwrap();
    let mut caps = serde_json::Map::new();
    for (name, operation, contract, runtime) in capabilities {
        let digest = Sha256Digest::of_json(contract);
        std::fs::write(
            contracts.join(format!("{}.json", digest.to_hex())),
            serde_json::to_vec_pretty(contract).unwrap(),
        )
        .unwrap();
        let mut cap = json!({"protocol": "http", "operation": operation,
                             "contractDigest": format!("sha-256:{}", digest.to_hex())});
        if let Some(rt) = runtime {
            cap["runtime"] = rt.clone();
        }
        caps.insert((*name).to_owned(), cap);
    }
    let lock = json!({"richVersion": "0.1", "bindingId": binding_id, "graphClosure": "closed",
                      "capabilities": caps});
    let lockfile = dir.join("lock.json");
    std::fs::write(&lockfile, serde_json::to_vec_pretty(&lock).unwrap()).unwrap();
    BundleFiles {
        lockfile,
        contracts,
        digest: format!("sha-256:{}", Sha256Digest::of_json(&lock).to_hex()),
        binding_id: binding_id.to_owned(),
    }
}

impl BundleFiles {
    /// The same bundle with `deployment.identity` set on every capability (the lockfile and
    /// its digest are rewritten).
    pub fn with_deployment(mut self, identity: &str) -> BundleFiles {
        let mut lock: Value =
            serde_json::from_slice(&std::fs::read(&self.lockfile).unwrap()).unwrap();
        for cap in lock["capabilities"].as_object_mut().unwrap().values_mut() {
            cap["deployment"] = json!({"identity": identity});
        }
        std::fs::write(&self.lockfile, serde_json::to_vec_pretty(&lock).unwrap()).unwrap();
        self.digest = format!("sha-256:{}", Sha256Digest::of_json(&lock).to_hex());
        self
    }
}

/// Writes MCP `capabilities` (name, tool name, contract) as a bundle under `dir`.
pub fn write_mcp_bundle(
    dir: &Path,
    binding_id: &str,
    tools: &[(&str, &str, Value)],
) -> BundleFiles {
    let contracts = dir.join("contracts");
    std::fs::create_dir_all(&contracts).unwrap();
    let mut caps = serde_json::Map::new();
    for (name, tool, contract) in tools {
        let digest = Sha256Digest::of_json(contract);
        std::fs::write(
            contracts.join(format!("{}.json", digest.to_hex())),
            serde_json::to_vec_pretty(contract).unwrap(),
        )
        .unwrap();
        caps.insert(
            (*name).to_owned(),
            json!({"protocol": "mcp", "operation": tool,
                   "contractDigest": format!("sha-256:{}", digest.to_hex())}),
        );
    }
    let lock = json!({"richVersion": "0.1", "bindingId": binding_id, "graphClosure": "closed",
                      "capabilities": caps});
    let lockfile = dir.join("lock.json");
    std::fs::write(&lockfile, serde_json::to_vec_pretty(&lock).unwrap()).unwrap();
    BundleFiles {
        lockfile,
        contracts,
        digest: format!("sha-256:{}", Sha256Digest::of_json(&lock).to_hex()),
        binding_id: binding_id.to_owned(),
    }
}
