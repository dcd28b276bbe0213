//! The `palisade` binary: see `palisade::cli`.

fn main() -> std::process::ExitCode {
    palisade::cli::main()
}
