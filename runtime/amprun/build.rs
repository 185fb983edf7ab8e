//! Records the commit amprun is built from (`AMP_COMMIT`, for the run report and the
//! metrics' run object): `git rev-parse --short=12 HEAD`, or `unknown` where there is no
//! git or no repository (a source tarball). Changes not committed are not marked.

use std::path::Path;
use std::process::Command;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let git = |args: &[&str]| {
        let out = Command::new("git").arg("-C").arg(&root).args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).filter(|h| !h.is_empty());
    println!("cargo:rustc-env=AMP_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
    // Run again when HEAD moves: a checkout, or a commit on the branch HEAD names.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let dir = Path::new(&dir);
        let head = git(&["symbolic-ref", "-q", "HEAD"]);
        let files = ["HEAD", "packed-refs"].into_iter().map(String::from).chain(head);
        for file in files.map(|f| dir.join(f)).filter(|f| f.exists()) {
            println!("cargo:rerun-if-changed={}", file.display());
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
