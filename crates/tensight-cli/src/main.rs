fn main() {
    std::process::exit(tensight_cli::run(std::env::args_os().collect()));
}
