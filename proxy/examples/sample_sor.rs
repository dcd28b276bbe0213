//! The demo's sample SoR on its own, for recording traffic (`benches/traffic/record.sh`).
//!
//!   cargo run --release -p palisade --example sample_sor -- PORT DATA_FILE
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).and_then(|p| p.parse().ok()).expect("PORT");
    let data = std::path::PathBuf::from(args.get(2).expect("DATA_FILE"));
    let sor = palisade::cli::sample_sor::SampleSor::open(&data).expect("data file");
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind");
    eprintln!("sample SoR on 127.0.0.1:{port}");
    sor.serve(listener).await;
}
