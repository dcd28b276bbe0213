//! `palisade demo`: a sample SoR with a sidecar in front of it, ready for `curl`.
//!
//! Everything lives in a fresh temp directory (the SoR's data file, the sidecar's key and
//! config) that is printed at start, so a newcomer can look at what the demo set up.
//!
//! This build's sidecar is a transparent proxy: write enforcement (leases, fences, receipts)
//! lands with the enforcement issue, and the demo says so when it starts.

use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::sample_sor::SampleSor;
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

        let config_text = format!(
            "# written by `palisade demo`\n\
             [listen]\naddr = \"127.0.0.1:{port}\"\ndrain_timeout = \"2s\"\n\
             [admin]\naddr = \"127.0.0.1:0\"\n\
             [upstream]\nurl = \"http://{sor_addr}\"\ntimeout = \"5s\"\n\
             [rich]\nunbound_writes = \"allow\"\n"
        );
        let config_path = dir.join("palisade.toml");
        std::fs::write(&config_path, &config_text)?;
        let config = Config::parse(&config_text, &config_path.display().to_string())
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let server = Server::bind(config).await?;
        let data = server.data_addr();
        let admin = server.admin_addr();
        println!(
            r#"
Palisade demo
  sample inventory SoR  http://{sor_addr}   (data in {dir}/inventory.json)
  sidecar data plane    http://{data}
  sidecar admin         http://{admin}      (/healthz /readyz /metrics)
  config                {config}

NOTE: this build runs the sidecar as a transparent pass-through proxy. Lease, fence and
receipt enforcement is not in this build yet; every request below reaches the SoR.

Try:
  curl -s http://{data}/api/v2/items
  curl -s http://{data}/api/v2/items/1
  curl -s -X PUT http://{data}/api/v2/items/1 -H 'content-type: application/json' \
       -d '{{"sku":"BOLT-M8","qty":1150,"warehouse":"BER-1"}}'
  curl -s http://{admin}/metrics | grep palisade_requests_total

Ctrl-C stops the demo.
"#,
            dir = dir.display(),
            config = config_path.display(),
        );
        server.run(crate::shutdown_signal()).await?;
        tokio::time::sleep(Duration::from_millis(10)).await;
        Ok(())
    })
}
