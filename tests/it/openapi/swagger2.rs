//! Swagger 2.0 imported as it is published (issue 59): the Docker Engine API and Harbor's API,
//! two real vendor documents (`testdata/openapi/SOURCE.txt`). Every operation imported,
//! deterministic, the bundle checks; what 2.0 says is carried over (`definitions`, shared
//! `parameters`, `x-nullable`, `collectionFormat`, `consumes`); and the documents' request
//! examples and their one-property mutations meet the contracts through a running sidecar
//! exactly as Python's `jsonschema` judges them.

use super::*;

const SWAGGER: [(&str, usize); 2] = [("docker-engine-v1.56.yaml", 108), ("harbor-v2.0.yaml", 203)];

#[test]
fn every_swagger_2_0_operation_is_imported_deterministically_and_checks() {
    for (doc, operations) in SWAGGER {
        let (_dir, bundle) = imported_twice(doc, operations);
        let bytes = std::fs::read(testdata(doc)).unwrap();
        let want = format!("sha-256:{}", sha256_hex(&bytes));
        for name in bundle.lock()["capabilities"].as_object().unwrap().keys() {
            let p = &bundle.contract(name)["provenance"];
            assert_eq!(p["documentDigest"], want.as_str(), "{name}");
        }
    }
}

/// What Swagger 2.0 says that 3.0 says otherwise, as the contracts hold it: a `Content-type`
/// header parameter left to the media types; Docker's
/// `x-nullable` as a null the schema admits (and `x-nullable: false` as none), a `multi`
/// array query parameter exploded, the base path from `basePath`, a body's schema from
/// `definitions` through a rewritten `$ref`.
#[test]
fn swagger_2_0_constructs_reach_the_contracts() {
    let dir = tempfile::tempdir().unwrap();
    let summary = import(&testdata("docker-engine-v1.56.yaml"), dir.path(), &[]);
    let b = BundleFiles::in_dir(dir.path());
    // A `Content-type` header parameter is what `consumes` says: ignored, as OpenAPI 3.x
    // ignores it, and listed; checking it would refuse what the API takes.
    let build = b.contract("ImageBuild");
    let headers = &build["structural"]["parameters"]["header"];
    assert!(headers.get("Content-type").is_none(), "{headers}");
    assert!(headers.get("X-Registry-Config").is_some(), "{headers}");
    let untranslated = summary["untranslated"].to_string();
    assert!(
        untranslated.contains("Content-type") && untranslated.contains("not checked"),
        "{untranslated}"
    );
    let caps = b.lock()["capabilities"].clone();
    assert_eq!(
        caps["ContainerUpdate"]["operation"],
        "POST /v1.56/containers/{id}/update"
    );
    let update = b.contract("ContainerUpdate");
    let input = &update["structural"]["input"];
    let pids = find(input, "PidsLimit").expect("Resources.PidsLimit, through its $ref");
    assert_eq!(
        pids["type"],
        serde_json::json!(["integer", "null"]),
        "{pids}"
    );
    let history = b.contract("ImageHistory");
    let ids = find(&history["structural"]["output"], "Id").expect("HistoryResponseItem.Id");
    assert_eq!(
        ids["type"], "string",
        "x-nullable: false admits no null: {ids}"
    );
    let attestations = b.contract("ImageAttestations");
    let query = &attestations["structural"]["parameters"]["query"];
    assert_eq!(query["platform"]["explode"], true, "{query}");
    assert_eq!(query["platform"]["schema"]["items"]["type"], "string");
}

/// The schema of the first property named `name` anywhere under `v`.
fn find<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    match v {
        Value::Object(o) => o
            .get("properties")
            .and_then(|p| p.get(name))
            .or_else(|| o.values().find_map(|x| find(x, name))),
        Value::Array(a) => a.iter().find_map(|x| find(x, name)),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swagger_2_0_examples_meet_the_contracts_through_a_running_sidecar() {
    let mut all = Tally::default();
    for (doc, _) in SWAGGER {
        let t = examples_through_a_sidecar(&testdata(doc)).await;
        eprintln!("{doc}: {t:?}");
        all.add(t);
    }
    assert!(all.forwarded >= 4 && all.mutations >= 20, "{all:?}");
}
