//! Writes the sample ERP bundle (`palisade::cli::sample_bundle`) into a directory:
//!
//!   cargo run -p palisade --example write_erp_bundle -- examples/erp
fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "examples/erp".into());
    let digest = palisade::cli::sample_bundle::write(std::path::Path::new(&dir))?;
    println!("{digest}");
    Ok(())
}
