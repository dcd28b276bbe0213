fn main() -> std::process::ExitCode {
    palisade::cli::main()
}
