//! Where checkpoints are written: only regular files are ever replaced, the checks made
//! before work, stale temporary files of killed writers, and non-finite parameters.

use amp_ir::ParamInit;
use amp_params::target::{check_target, check_writable};
use amp_params::{load, save, ParamSet, ParamSpec, ParamsError};
use std::collections::BTreeMap;
use std::path::Path;

fn specs() -> Vec<ParamSpec> {
    vec![
        ParamSpec { name: "emb.weight".into(), shape: vec![4, 2], init: ParamInit::Normal },
        ParamSpec { name: "fc.bias".into(), shape: vec![3], init: ParamInit::Uniform { fan_in: 2 } },
    ]
}

fn temp_dir(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("amp-params-{test}-")).tempdir().expect("scratch folder")
}

/// Makes a FIFO with `mkfifo`; `false` (and the test part is skipped) where there is none.
fn mkfifo(path: &Path) -> bool {
    let made = std::process::Command::new("mkfifo").arg(path).status().is_ok_and(|s| s.success());
    if !made {
        report_skip("amp-params target.rs: no mkfifo: the FIFO cases");
    }
    made
}

fn is_target_error(error: &ParamsError, needle: &str) -> bool {
    matches!(error.root(), ParamsError::Target { problem, .. } if problem.contains(needle))
}

#[test]
#[cfg(unix)]
fn a_symlink_is_refused_and_neither_it_nor_its_target_changes() {
    let dir = temp_dir("symlink");
    let dir = dir.path();
    let target = dir.join("elsewhere");
    std::fs::write(&target, b"precious").unwrap();
    let link = dir.join("ckpt.safetensors");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = save(&ParamSet::init(&specs(), 1), &link, &BTreeMap::new()).unwrap_err();
    assert!(is_target_error(&err, "symbolic link"), "{err}");
    assert!(err.to_string().contains("ckpt.safetensors"), "{err}");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link stays a link");
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), 2, "no temporary file left");
}

#[test]
#[cfg(unix)]
fn a_fifo_a_device_and_a_directory_are_refused() {
    let dir = temp_dir("special");
    let dir = dir.path();
    let fifo = dir.join("fifo");
    if mkfifo(&fifo) {
        let err = save(&ParamSet::init(&specs(), 1), &fifo, &BTreeMap::new()).unwrap_err();
        assert!(is_target_error(&err, "FIFO"), "{err}");
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "still a FIFO");
    }
    // Only inspected, never written: the check refuses before anything is done.
    if Path::new("/dev/null").exists() {
        let err = check_target(Path::new("/dev/null")).unwrap_err();
        assert!(is_target_error(&err, "character device"), "{err}");
    }
    let err = check_target(dir).unwrap_err();
    assert!(is_target_error(&err, "directory"), "{err}");
    // Regular files and absent ones are fine.
    let file = dir.join("ckpt.safetensors");
    check_target(&file).unwrap();
    save(&ParamSet::init(&specs(), 1), &file, &BTreeMap::new()).unwrap();
    check_target(&file).unwrap();
}

#[test]
fn a_missing_directory_is_found_before_any_work() {
    let dir = temp_dir("missing");
    let dir = dir.path();
    let err = check_writable(&dir.join("no/such/ckpt.safetensors")).unwrap_err();
    assert!(is_target_error(&err, "does not exist"), "{err}");
    let file = dir.join("plain");
    std::fs::write(&file, b"x").unwrap();
    let err = check_writable(&file.join("ckpt.safetensors")).unwrap_err();
    assert!(is_target_error(&err, "is not a directory"), "{err}");
    check_writable(&dir.join("ckpt.safetensors")).unwrap();
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), 1, "the probe file is removed");
}

#[test]
#[cfg(target_os = "linux")]
fn stale_temporary_files_of_dead_writers_are_removed_and_nothing_else() {
    let dir = temp_dir("stale");
    let dir = dir.path();
    // Above the kernel's largest possible pid_max (2^22): never a live process.
    let dead = 4_999_999;
    let own = std::process::id();
    let stale = [format!(".ckpt.safetensors.{dead}.0.tmp"), format!(".ckpt.safetensors.{dead}.17.tmp")];
    let kept = [
        format!(".ckpt.safetensors.{own}.99.tmp"),
        format!(".ckpt.safetensors.{dead}.x.tmp"),
        format!(".ckpt.safetensors.{dead}.0.tmp.keep"),
        format!(".other.safetensors.{dead}.0.tmp"),
        format!("ckpt.safetensors.{dead}.0.tmp"),
        "notes.txt".to_string(),
    ];
    for name in stale.iter().chain(&kept) {
        std::fs::write(dir.join(name), b"half a checkpoint").unwrap();
    }
    // A directory with the pattern's name is not a file of ours.
    let odd = format!(".ckpt.safetensors.{dead}.5.tmp");
    std::fs::create_dir(dir.join(&odd)).unwrap();
    let path = dir.join("ckpt.safetensors");
    let params = ParamSet::init(&specs(), 2);
    save(&params, &path, &BTreeMap::new()).unwrap();
    assert_eq!(load(&path, &specs()).unwrap(), params);
    for name in &stale {
        assert!(!dir.join(name).exists(), "{name} is removed");
    }
    for name in kept.iter().chain([&odd]) {
        assert!(dir.join(name).exists(), "{name} is kept");
    }
}

#[test]
fn a_temporary_name_that_is_taken_is_passed_over() {
    let dir = temp_dir("taken");
    let dir = dir.path();
    // Left by a dead process that had our PID: never opened (nor removed), and no reason
    // for the save to fail.
    let own = std::process::id();
    for counter in 0..12 {
        std::fs::write(dir.join(format!(".ckpt.safetensors.{own}.{counter}.tmp")), b"old").unwrap();
    }
    let path = dir.join("ckpt.safetensors");
    let params = ParamSet::init(&specs(), 4);
    save(&params, &path, &BTreeMap::new()).unwrap();
    check_writable(&path).unwrap();
    assert_eq!(load(&path, &specs()).unwrap(), params);
    assert_eq!(std::fs::read(dir.join(format!(".ckpt.safetensors.{own}.0.tmp"))).unwrap(), b"old");
}

#[test]
fn non_finite_parameters_are_named() {
    let mut params = ParamSet::init(&specs(), 3);
    params.check_finite().unwrap();
    params.data_mut(1)[2] = f32::INFINITY;
    params.data_mut(1)[0] = f32::NAN;
    let err = params.check_finite().unwrap_err();
    assert!(matches!(err, ParamsError::NonFinite { ref name, index: 0, count: 2, .. } if name == "fc.bias"), "{err}");
    assert_eq!(err.to_string(), "tensor `fc.bias` holds NaN at index 0 (2 non-finite values in all)");
}

/// Reports a test (or a part of one) that could not run here: printed, and appended to
/// the file `$AMP_SKIP_LOG` names (`.ci/run` counts its lines).
fn report_skip(line: &str) {
    println!("skipped: {line}");
    if let Some(log) = std::env::var_os("AMP_SKIP_LOG") {
        use std::io::Write;
        let written =
            std::fs::OpenOptions::new().create(true).append(true).open(log).and_then(|mut f| writeln!(f, "{line}"));
        written.expect("the skip log takes a line");
    }
}
