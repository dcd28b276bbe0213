//! The embedded store alone, under the write path's transactions: C concurrent writers each
//! do `advance` (fence + lease record + inverse) then `append_receipt`, back to back, for a
//! fixed time. Prints writes/s, transactions, jobs per transaction and CPU per write, so the
//! store's share of an enforced write can be seen without HTTP or crypto around it.
//!
//!   cargo run --release -p palisade --example store_load -- [CONNS] [SECONDS] [DIR]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use palisade::store::embedded::EmbeddedStore;
use palisade::store::WriteIntent;
use palisade::store::{Fences as _, Receipts as _};
use palisade_policy::keys::KeyPair;
use palisade_policy::receipt::{ReceiptBody, ReceiptKind};
use tokio::time::Instant;

/// User + system CPU of this process, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let conns: usize = args.get(1).map_or(16, |v| v.parse().unwrap());
    let seconds: u64 = args.get(2).map_or(5, |v| v.parse().unwrap());
    let dir = match args.get(3) {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::temp_dir(),
    };
    let path = dir.join(format!("store-load-{}.redb", uuid::Uuid::new_v4().simple()));
    let key = Arc::new(
        palisade_policy::log::Signer::new(
            "load.example/palisade",
            Arc::new(KeyPair::from_seed([7; 32])),
        )
        .expect("a test key"),
    );
    let store = Arc::new(EmbeddedStore::open(&path, key).unwrap());
    let counter = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let cpu0 = cpu_seconds();
    let commits0 = store.commits();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (store, counter) = (store.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let lease_id = format!("urn:uuid:{}", uuid::Uuid::new_v4());
                let resource = format!("https://erp.example.com/items/{n}");
                let record = palisade::store::LeaseRecord {
                    lease_digest: Some(format!("sha256:{n:064x}")),
                    path: Some(format!("/items/{n}")),
                    ..palisade::store::LeaseRecord::committed(
                        &lease_id,
                        &resource,
                        1,
                        1_800_000_000_000,
                    )
                };
                let intent = WriteIntent {
                    resource,
                    epoch: 1,
                    lease_id: lease_id.clone(),
                    expires_at_ms: 1_800_000_000_000,
                    lease_record: record,
                    inverse: Some(br#"{"method":"DELETE","path":"/x"}"#.to_vec()),
                    snapshot: None,
                };
                store.advance(intent).await.unwrap();
                let body = ReceiptBody {
                    lease_id: Some(lease_id),
                    method: Some("PUT".into()),
                    upstream_status: Some(200),
                    cas_fence_epoch: Some(1),
                    ..ReceiptBody::new(
                        format!("urn:uuid:{}", uuid::Uuid::new_v4()),
                        ReceiptKind::Commit,
                        "2026-12-02T00:00:00.000Z".into(),
                    )
                };
                store.append_receipt(body).await.unwrap();
                done += 1;
            }
            done
        }));
    }
    let mut writes = 0;
    for t in tasks {
        writes += t.await.unwrap();
    }
    let cpu = cpu_seconds() - cpu0;
    let commits = store.commits() - commits0;
    // The file's size under load, before the clean stop's checkpoint: what a sidecar that
    // never idles holds on its volume.
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    println!(
        "{{\"writes\":{writes},\"writes_per_s\":{:.0},\"transactions\":{commits},\"jobs_per_transaction\":{:.2},\"cpu_us_per_write\":{:.0},\"file_bytes\":{bytes},\"bytes_per_write\":{:.0}}}",
        writes as f64 / seconds as f64,
        (writes * 2) as f64 / commits.max(1) as f64,
        cpu * 1e6 / writes.max(1) as f64,
        bytes as f64 / writes.max(1) as f64,
    );
    drop(store);
    let _ = std::fs::remove_file(&path);
}
