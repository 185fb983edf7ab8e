//! Regenerates the example data sets in `examples/data/` (or the folder given as the first
//! argument): `cargo run -p amp-data --example generate`. Deterministic: the same files on
//! every machine.

use amp_data::generate;
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let out = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/data"), PathBuf::from);
    match generate_into(&out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn generate_into(out: &std::path::Path) -> Result<(), amp_data::DataError> {
    std::fs::create_dir_all(out).map_err(|e| amp_data::DataError::io(&out.display().to_string(), &e))?;
    for (name, schema, values) in generate::example_files() {
        let path = out.join(name);
        amp_data::jsonl::save(&schema, &path, &values)?;
        println!("{}: {} instances", path.display(), values.len());
    }
    Ok(())
}
