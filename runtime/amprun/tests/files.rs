//! The files a run writes: only regular files are replaced or written through (never a
//! FIFO, a device or a symbolic link), each is checked before any work, and temporary
//! files of a killed save are cleaned up by the next.

mod common;

use common::*;
use std::path::Path;

/// Makes a FIFO with `mkfifo`; `false` (and the case is skipped) where there is none.
fn mkfifo(path: &Path) -> bool {
    let made = std::process::Command::new("mkfifo").arg(path).status().is_ok_and(|s| s.success());
    if !made {
        common::skipped("files.rs", "no mkfifo: the FIFO cases");
    }
    made
}

fn train_args<'a>(model: &'a str, data: &'a str) -> Vec<&'a str> {
    vec!["train", model, "-D", "hidden=8", "--data", data, "--limit", "20"]
}

#[test]
#[cfg(unix)]
fn save_and_grad_out_refuse_a_fifo_or_a_symlink_before_any_work() {
    use std::os::unix::fs::FileTypeExt;
    let dir = scratch("special-save");
    let dir = dir.path();
    let model = example("list_reduce.amp");
    let data = example("data/list_reduce.train.jsonl");
    std::fs::write(dir.join("precious"), b"precious").unwrap();
    std::os::unix::fs::symlink(dir.join("precious"), dir.join("link.safetensors")).unwrap();
    let fifo = mkfifo(&dir.join("fifo.safetensors"));
    for target in ["link.safetensors", "fifo.safetensors"] {
        if target.starts_with("fifo") && !fifo {
            continue;
        }
        let mut args = train_args(&model, &data);
        args.extend(["--save", target]);
        let out = amprun(dir, &args);
        assert_eq!(out.status.code(), Some(2), "--save {target}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(&format!("--save: cannot write `{target}`: it is a")), "{err}");
        assert!(!err.contains("epoch 1"), "refused before training: {err}");
    }
    assert!(std::fs::symlink_metadata(dir.join("link.safetensors")).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read(dir.join("precious")).unwrap(), b"precious");
    if fifo {
        assert!(std::fs::symlink_metadata(dir.join("fifo.safetensors")).unwrap().file_type().is_fifo());
        let params = dir.join("p.safetensors");
        let graph = compile_example("list_reduce", &[("hidden", 8)]);
        let set = amp_params::ParamSet::init(&amp_params::ParamSpec::of_graph(&graph), 1);
        amp_params::save(&set, &params, &Default::default()).unwrap();
        let args = ["grad", &model, "-D", "hidden=8", "--params", "p.safetensors", "--data", &data, "--limit", "3"];
        let out = amprun(dir, &[&args[..], &["--out", "fifo.safetensors"][..]].concat());
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("--out: cannot write `fifo.safetensors`: it is a FIFO"), "{}", stderr(&out));
        assert!(std::fs::symlink_metadata(dir.join("fifo.safetensors")).unwrap().file_type().is_fifo());
    }
}

#[test]
#[cfg(unix)]
fn metrics_trace_and_profile_never_write_through_a_symlink() {
    let dir = scratch("special-reports");
    let dir = dir.path();
    let model = example("list_reduce.amp");
    let data = example("data/list_reduce.train.jsonl");
    std::fs::write(dir.join("precious"), b"precious").unwrap();
    std::os::unix::fs::symlink(dir.join("precious"), dir.join("link")).unwrap();
    for flag in ["--metrics", "--trace", "--profile"] {
        let mut args = train_args(&model, &data);
        args.extend([flag, "link"]);
        let out = amprun(dir, &args);
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(&format!("{flag}: cannot write `link`: it is a symbolic link")), "{err}");
        assert_eq!(std::fs::read(dir.join("precious")).unwrap(), b"precious", "{flag} wrote through the link");
    }
}

#[test]
fn a_missing_directory_is_found_before_training() {
    let dir = scratch("missing-dir");
    let dir = dir.path();
    let model = example("list_reduce.amp");
    let data = example("data/list_reduce.train.jsonl");
    for flag in ["--save", "--metrics", "--trace", "--profile"] {
        let mut args = train_args(&model, &data);
        args.extend([flag, "no/such/dir/file"]);
        let out = amprun(dir, &args);
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(&format!("{flag}: cannot write `no/such/dir/file`: the directory")), "{err}");
        assert!(err.contains("does not exist") && !err.contains("epoch 1"), "before training: {err}");
    }
}

#[test]
#[cfg(target_os = "linux")]
fn a_save_removes_the_temporary_files_of_a_killed_save() {
    let dir = scratch("stale-temps");
    let dir = dir.path();
    // Above the kernel's largest possible pid_max (2^22): a process that is gone.
    let stale = ".c.safetensors.4999999.0.tmp";
    let others = [".c.safetensors.4999999.0.tmp.old", ".d.safetensors.4999999.0.tmp", "c.safetensors.4999999.0.tmp"];
    for name in std::iter::once(&stale).chain(&others) {
        std::fs::write(dir.join(name), b"half a checkpoint").unwrap();
    }
    let model = example("list_reduce.amp");
    let data = example("data/list_reduce.train.jsonl");
    let mut args = train_args(&model, &data);
    args.extend(["--save", "c.safetensors"]);
    amprun_ok(dir, &args);
    assert!(!dir.join(stale).exists(), "the stale temporary file is removed");
    for name in others {
        assert!(dir.join(name).exists(), "{name} is not ours and stays");
    }
    let temps: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with(".c.safetensors."))
        .collect();
    assert_eq!(temps, [".c.safetensors.4999999.0.tmp.old"], "no temporary file of this run is left either");
}
