//! The `palisade` binary: see `palisade::cli`.

/// mimalloc rather than glibc's malloc: measured in docs/performance.md (issue 36).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    palisade::cli::main()
}
