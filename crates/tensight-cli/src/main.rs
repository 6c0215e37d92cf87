fn main() {
    tensight_cli::run_and_exit(std::env::args_os().collect())
}
