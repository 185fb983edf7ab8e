fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Generates the parser from src/amp.lalrpop into OUT_DIR.
    lalrpop::Configuration::new().use_cargo_dir_conventions().emit_rerun_directives(true).process()
}
