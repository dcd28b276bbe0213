//! `palisade demo`: a sample SoR with a sidecar in front of it, ready for `curl`.
//!
//! Everything lives in a fresh temp directory (the SoR's data file, the sidecar's key and
//! config) that is printed at start, so a newcomer can look at what the demo set up.
//!
//! The sidecar enforces leases, fences, receipts and the sample ERP bundle's contracts
//! (`sample_bundle`) on writes; the printed lines get a lease from the sidecar's lease
//! authority and use it. An "agent" key that the sidecar trusts is
//! made too, for trying `palisade lease sign`.

use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;

use crate::cli::sample_sor::SampleSor;
use crate::config::Config;
use crate::server::Server;

pub fn run(port: u16) -> anyhow::Result<()> {
    crate::telemetry::init_logging();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let dir = std::env::temp_dir().join(format!("palisade-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
        let sor_listener = TcpListener::bind("127.0.0.1:0").await?;
        let sor_addr = sor_listener.local_addr()?;
        let sor = SampleSor::open(&dir.join("inventory.json"))?;
        tokio::spawn(sor.serve(sor_listener));

        // The sidecar's key (receipts) and an agent gateway's key (leases), both fresh.
        let sidecar = crate::cli::keys::fresh_key();
        let agent = crate::cli::keys::fresh_key();
        crate::fs::write_private_file(&dir.join("signing.pem"), sidecar.to_pkcs8_pem().as_bytes())?;
        crate::fs::write_private_file(&dir.join("agent.pem"), agent.to_pkcs8_pem().as_bytes())?;
        std::fs::write(
            dir.join("issuers.json"),
            serde_json::json!([{"kid": agent.kid(), "public_key": agent.public_b64(), "name": "demo-agent"}])
                .to_string(),
        )?;
        std::fs::write(
            dir.join("inverse.json"),
            r#"{"method":"PUT","path":"/api/v2/items/1","body":{"sku":"BOLT-M8","qty":1200,"warehouse":"BER-1"}}"#,
        )?;
        // The sample ERP bundle: writes need a lease *and* must meet their input contract.
        crate::cli::sample_bundle::write(&dir.join("bundle"))?;
        // RCNS: the demo's caller (`Authorization: Bearer demo-agent`) may negotiate the
        // bundle's recipe.
        let demo_caller = palisade_policy::caller::authorization_caller(b"Bearer demo-agent");
        std::fs::write(
            dir.join("callers.json"),
            serde_json::json!({"callers": [{"identity": demo_caller,
                "agent_id": "demo-agent", "trust_tier": 1,
                "scopes": ["rcns:negotiate", "erp:stock:reserve", "erp:items:write", "erp:allocations:write"]}]})
            .to_string(),
        )?;
        let d = dir.display();
        let config_text = format!(
            "# written by `palisade demo`\n\
             [listen]\naddr = \"127.0.0.1:{port}\"\ndrain_timeout = \"2s\"\n\
             [admin]\naddr = \"127.0.0.1:0\"\n\
             [upstream]\nurl = \"http://{sor_addr}\"\ntimeout = \"5s\"\n\
             [signing]\nkey = \"{d}/signing.pem\"\n\
             [trust]\nissuers = \"{d}/issuers.json\"\n\
             [store]\npath = \"{d}/state.redb\"\n\
             [rich]\nlockfile = \"{d}/bundle/lock.json\"\ncontracts = \"{d}/bundle/contracts\"\n\
             [rcns]\ncallers = \"{d}/callers.json\"\n"
        );
        let config_path = dir.join("palisade.toml");
        std::fs::write(&config_path, &config_text)?;
        let config = Config::parse(&config_text, &config_path.display().to_string())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let server = Server::bind(config).await?;
        let data = server.data_addr();
        let admin = server.admin_addr();
        // Written once the data plane's address is known: the lease names it.
        std::fs::write(
            dir.join("grant.json"),
            format!(
                r#"{{"sor_target_uri":"http://{data}/api/v2/items/1","recovery_mode":"COMPENSATING_ACTION","t_req_ms":60000,"inverse_payload":{{"method":"PUT","path":"/api/v2/items/1","body":{{"sku":"BOLT-M8","qty":1200,"warehouse":"BER-1"}}}}}}"#
            ),
        )?;
        // The allocation (connector example): the lease names the legacy record the SoR
        // changes; its inverse deletes it.
        std::fs::write(
            dir.join("allocation-grant.json"),
            format!(
                r#"{{"sor_target_uri":"http://{data}/legacy/v1/allocations/7","recovery_mode":"COMPENSATING_ACTION","t_req_ms":60000,"inverse_payload":{{"method":"DELETE","path":"/legacy/v1/allocations/7"}}}}"#
            ),
        )?;
        let exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "palisade".into());
        println!(
            r#"
Palisade demo
  sample inventory SoR  http://{sor_addr}   (data in {d}/inventory.json)
  sidecar data plane    http://{data}
  sidecar admin         http://{admin}      (/healthz /readyz /metrics)
  operators' console    http://{admin}/ui/  (drift events as they happen, fences, the log)
  config, keys, store   {d}

Try, in another shell:

  # Reads pass straight through.
  curl -s http://{data}/api/v2/items/1

  # A write without a lease is refused: 428 ERR_LEASE_REQUIRED, with a signed receipt.
  curl -si -X PUT http://{data}/api/v2/items/1 -H 'content-type: application/json' \
       -d '{{"sku":"BOLT-M8","qty":1150,"warehouse":"BER-1"}}'

  # Ask the sidecar's lease authority for a lease: it picks the next epoch, hashes the
  # record's current state, stages the inverse and binds the lease to this caller.
  LEASE=$(curl -s -X POST http://{data}/.well-known/ptcl/v1/leases -H 'authorization: Bearer demo-agent' \
       -d @{d}/grant.json)
  echo "$LEASE"

  # The write goes through: 200, Agent-Fence-Token: 1, Agent-Commit-Receipt.
  curl -si -X PUT http://{data}/api/v2/items/1 -H 'content-type: application/json' \
       -H 'authorization: Bearer demo-agent' -H "agent-compensation-lease: $LEASE" \
       -d '{{"sku":"BOLT-M8","qty":1150,"warehouse":"BER-1"}}'

  # A write that breaks the operation's input contract (qty must be ≥ 0): 422
  # ERR_CONTRACT_INPUT naming /qty, before the fence is even looked at.
  curl -si -X PUT http://{data}/api/v2/items/1 -H 'content-type: application/json' \
       -H 'authorization: Bearer demo-agent' -H "agent-compensation-lease: $LEASE" \
       -d '{{"sku":"BOLT-M8","qty":-3,"warehouse":"BER-1"}}'

  # The same lease again: 409 ERR_STALE_FENCE_EPOCH (current_epoch 1).
  curl -si -X PUT http://{data}/api/v2/items/1 -H 'content-type: application/json' \
       -H 'authorization: Bearer demo-agent' -H "agent-compensation-lease: $LEASE" \
       -d '{{"sku":"BOLT-M8","qty":1,"warehouse":"BER-1"}}'

  # Undo it within the lease's window: the sidecar sends the staged inverse (qty back to
  # 1200) fenced with the next epoch (Agent-Fence-Token: 2) and returns a compensation receipt.
  LEASE_ID=$(echo "$LEASE" | sed 's/.*"lease_id":"\([^"]*\)".*/\1/')
  curl -si -X POST http://{data}/.well-known/ptcl/v1/leases/$LEASE_ID/compensate -H 'authorization: Bearer demo-agent'
  curl -s http://{data}/api/v2/items/1

  # Allocations: agents write the v2 contract (sku, qty, warehouse, order); the SoR has only
  # a legacy v1 API (ItemCode, Quantity, Location, SalesOrder). A qualified connector in the
  # bundle maps the request and the answer back; the lease names the record the SoR changes.
  LEASE=$(curl -s -X POST http://{data}/.well-known/ptcl/v1/leases -H 'authorization: Bearer demo-agent' \
       -d @{d}/allocation-grant.json)
  curl -si -X PUT http://{data}/api/v2/allocations/7 -H 'content-type: application/json' \
       -H 'authorization: Bearer demo-agent' -H "agent-compensation-lease: $LEASE" \
       -d '{{"sku":"BOLT-M8","qty":40,"warehouse":"BER-1","order":"SO-1042"}}'
  curl -s http://{data}/legacy/v1/allocations/7; echo   # as the SoR stored it

  # The v2 contract is checked before anything is mapped: 422 ERR_CONTRACT_INPUT naming /order.
  curl -si -X PUT http://{data}/api/v2/allocations/7 -H 'content-type: application/json' \
       -H 'authorization: Bearer demo-agent' -H "agent-compensation-lease: $LEASE" \
       -d '{{"sku":"BOLT-M8","qty":40,"warehouse":"BER-1","order":"1042"}}'

  # RCNS: the SoR has no "reserve stock" operation. The agent PROPOSEs one; the sidecar
  # composes it from two bound operations (the bundle's recipe) and answers 263 with a contract.
  curl -si -X PROPOSE http://{data}/ -H 'authorization: Bearer demo-agent' -H 'allow-rcns: true' \
       -H 'authority-scope: rcns:negotiate erp:stock:reserve erp:items:write erp:allocations:write' \
       -d '{{"method":"PROPOSE","parameters":{{"endpoint":{{"method":"RESERVE","path":"/stock-reservations","semantic":{{"intent":"reserve stock"}}}},"persistent":true}}}}' \
       | tee {d}/proposal.txt; echo
  SYN=$(grep -i '^contract-synthesized:' {d}/proposal.txt | cut -d' ' -f2 | tr -d '\r')

  # Invoke it: each step is an enforced write under a lease the sidecar grants; 200.
  curl -si -X RESERVE http://{data}/stock-reservations -H "contract-synthesized: $SYN" \
       -H 'authorization: Bearer demo-agent' -H 'content-type: application/json' \
       -H 'authority-scope: rcns:negotiate erp:stock:reserve erp:items:write erp:allocations:write' \
       -d '{{"sku":"BOLT-M8","qty":25,"warehouse":"BER-1","order":"SO-2001"}}'; echo

  # Order SO-0000 is closed: the SoR refuses the second step (409), the first is undone.
  curl -si -X RESERVE http://{data}/stock-reservations -H "contract-synthesized: $SYN" \
       -H 'authorization: Bearer demo-agent' -H 'content-type: application/json' \
       -H 'authority-scope: rcns:negotiate erp:stock:reserve erp:items:write erp:allocations:write' \
       -d '{{"sku":"BOLT-M8","qty":5,"warehouse":"BER-1","order":"SO-0000"}}'; echo
  curl -s http://{data}/api/v2/items/BOLT-M8; echo   # still 25

  # Agents with their own signing key use `{exe} lease sign` instead (trusted issuer:
  # {d}/agent.pem, listed in {d}/issuers.json).

  curl -s http://{admin}/metrics | grep palisade_refusals_total | grep -v ' 0$'

# The same flow from Python, with the agent library (pip install ./clients/python):
python3 - <<'PY'
import httpx
from palisade_agent import Agent, ContractViolation
vkey = httpx.get("http://{admin}/admin/v1/log/key").text      # the log's key, from the operator
item = {{"sku": "BOLT-M8", "qty": 1150, "warehouse": "BER-1"}}
undo = {{"method": "PUT", "path": "/api/v2/items/1", "body": {{**item, "qty": 1200}}}}
with Agent("http://{data}", authorization="Bearer demo-agent", vkey=vkey) as agent:
    done = agent.write("PUT", "/api/v2/items/1", json=item, inverse=undo)   # lease, fence, receipt
    print("python: written", done.status, "epoch", done.epoch, done.receipt["kind"], "receipt verified")
    try:
        agent.write("PUT", "/api/v2/items/1", json={{**item, "qty": -3}}, inverse=undo)
    except ContractViolation as refused:
        print("python: refused", refused.code, "at", refused.location)
    undone = agent.compensate(done.lease_id)
    print("python: compensated", undone.receipt["kind"], "qty", agent.read("/api/v2/items/1").json()["qty"])
PY

Stop with Ctrl-C, then check the receipt log:    {exe} audit verify --config {d}/palisade.toml
"#
        );
        server.run(crate::server::shutdown_signal()).await?;
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(())
    })
}
