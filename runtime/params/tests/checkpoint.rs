//! Checkpoints: round trips, PyTorch files, mismatch reports, atomic writes, and malformed
//! bytes (errors, never panics).
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use amp_ir::ParamInit;
use amp_params::checkpoint::{from_bytes, to_bytes, write_atomically};
use amp_params::{
    load, load_checkpoint, save, save_checkpoint, OptimConfig, OptimState, Optimizer, ParamSet, ParamSpec, ParamsError,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn specs() -> Vec<ParamSpec> {
    vec![
        ParamSpec { name: "cell.weight".into(), shape: vec![2, 3], init: ParamInit::Uniform { fan_in: 3 } },
        ParamSpec { name: "cell.bias".into(), shape: vec![2], init: ParamInit::Uniform { fan_in: 3 } },
        ParamSpec { name: "embed.weight".into(), shape: vec![3, 2], init: ParamInit::Normal },
    ]
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// A fresh temporary directory, unique per test, removed when the value is dropped.
fn temp_dir(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("amp-params-{test}-")).tempdir().unwrap()
}

fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn round_trip_keeps_values_and_metadata() {
    let dir = temp_dir("round-trip");
    let dir = dir.path();
    let path = dir.join("ckpt.safetensors");
    let params = ParamSet::init(&specs(), 11);
    save(&params, &path, &meta(&[("epoch", "3")])).unwrap();
    assert_eq!(load(&path, &specs()).unwrap(), params);
    let ckpt = load_checkpoint(&path, &specs()).unwrap();
    assert_eq!(ckpt.metadata.get("epoch").map(String::as_str), Some("3"));
    assert_eq!(ckpt.metadata.get("format").map(String::as_str), Some("pt"));
    assert!(ckpt.optim.is_none());
}

#[test]
fn optimizer_state_round_trips_and_resumes_exactly() {
    let specs = specs();
    let mut params = ParamSet::init(&specs, 1);
    let mut grads = ParamSet::init(&specs, 2);
    let mut opt = Optimizer::new(OptimConfig::adam(0.01), &specs);
    opt.step(&mut params, &grads, 1.0);
    let bytes = to_bytes(&params, Some(opt.state()), &BTreeMap::new()).unwrap();
    let ckpt = from_bytes(&bytes, &specs).unwrap();
    assert_eq!(ckpt.optim.as_ref(), Some(opt.state()));
    let dir = temp_dir("optim");
    let dir = dir.path();
    let path = dir.join("ckpt.safetensors");
    save_checkpoint(&path, &params, Some(opt.state()), &meta(&[("step", "1")])).unwrap();
    let from_file = load_checkpoint(&path, &specs).unwrap();
    assert_eq!(from_file.optim.as_ref(), Some(opt.state()));
    assert_eq!(from_file.metadata.get("amp.optim").map(String::as_str), Some("adam"));
    assert_eq!(load(&path, &specs).unwrap(), params, "`load` ignores the optimizer state");
    let mut resumed = Optimizer::restore(OptimConfig::adam(0.01), ckpt.optim.unwrap(), &specs).unwrap();
    let mut resumed_params = ckpt.params;
    grads.data_mut(0)[0] = 5.0;
    opt.step(&mut params, &grads, 1.0);
    resumed.step(&mut resumed_params, &grads, 1.0);
    assert_eq!(params, resumed_params, "bit-identical continuation");
    // Momentum buffers too.
    let opt = Optimizer::new(OptimConfig::momentum(0.1, 0.9), &specs);
    let bytes = to_bytes(&params, Some(opt.state()), &BTreeMap::new()).unwrap();
    assert_eq!(from_bytes(&bytes, &specs).unwrap().optim.as_ref(), Some(opt.state()));
}

#[test]
fn loads_a_file_written_by_python_safetensors() {
    // tests/fixtures/pytorch_state_dict.safetensors: written by the Python `safetensors`
    // package (the serializer `safetensors.torch.save_file` uses) with {"format": "pt"}.
    let params = load(&fixture("pytorch_state_dict.safetensors"), &specs()).unwrap();
    assert_eq!(params.get("cell.weight").unwrap(), &[-1.0, -0.5, 0.0, 0.5, 1.0, 1.5]);
    assert_eq!(params.get("cell.bias").unwrap(), &[0.25, -0.75]);
    assert_eq!(params.get("embed.weight").unwrap(), &[1.5, 2.5, 3.5, -4.5, 1e-3, 1e30]);
}

#[test]
fn mismatches_are_reported_by_name() {
    let path = fixture("f64_bias.safetensors");
    let err = load(&path, &specs()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("cell.bias") && text.contains("F64"), "{text}");
    assert!(text.contains("f64_bias.safetensors"), "names the file: {text}");

    let mut other = specs();
    other[0].shape = vec![3, 2];
    other[2].name = "emb.weight".into();
    other.push(ParamSpec { name: "head.bias".into(), shape: vec![4], init: ParamInit::Normal });
    let err = load(&fixture("pytorch_state_dict.safetensors"), &other).unwrap_err();
    let ParamsError::Mismatch(m) = err.root() else { panic!("{err}") };
    assert_eq!(m.missing, ["emb.weight", "head.bias"]);
    assert_eq!(m.unexpected, ["embed.weight"]);
    assert_eq!(m.misshaped.len(), 1);
    assert_eq!((m.misshaped[0].expected.clone(), m.misshaped[0].found.clone()), (vec![3, 2], vec![2, 3]));
}

#[test]
fn reserved_metadata_keys_are_refused() {
    let params = ParamSet::init(&specs(), 0);
    assert!(matches!(to_bytes(&params, None, &meta(&[("amp.x", "1")])), Err(ParamsError::ReservedMetadata { .. })));
    assert!(matches!(to_bytes(&params, None, &meta(&[("format", "x")])), Err(ParamsError::ReservedMetadata { .. })));
}

#[test]
fn a_failed_write_leaves_the_old_checkpoint() {
    let dir = temp_dir("atomic");
    let dir = dir.path();
    let path = dir.join("ckpt.safetensors");
    let old = ParamSet::init(&specs(), 5);
    save(&old, &path, &BTreeMap::new()).unwrap();
    // Killed halfway: half the bytes written, then the writer fails.
    let new_bytes = to_bytes(&ParamSet::init(&specs(), 6), None, &BTreeMap::new()).unwrap();
    let err = write_atomically(&path, |f| {
        use std::io::Write;
        f.write_all(&new_bytes[..new_bytes.len() / 2])?;
        Err(std::io::Error::other("killed"))
    })
    .unwrap_err();
    assert!(err.to_string().contains("killed"), "{err}");
    assert_eq!(load(&path, &specs()).unwrap(), old);
    let leftovers: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 1, "the temporary file is removed: {leftovers:?}");
    // Renaming onto a directory fails: the directory stays, no temp file remains.
    let blocked = dir.join("blocked");
    std::fs::create_dir(&blocked).unwrap();
    std::fs::write(blocked.join("keep"), b"x").unwrap();
    assert!(save(&old, &blocked, &BTreeMap::new()).is_err());
    assert!(blocked.join("keep").exists());
    // A missing directory is an error naming the path, not a panic.
    let err = save(&old, &dir.join("no/such/dir/ckpt.safetensors"), &BTreeMap::new()).unwrap_err();
    assert!(matches!(err, ParamsError::Io { .. }), "{err}");
}

#[test]
fn a_torn_file_is_an_error() {
    let dir = temp_dir("torn");
    let dir = dir.path();
    let path = dir.join("ckpt.safetensors");
    let bytes = to_bytes(&ParamSet::init(&specs(), 5), None, &BTreeMap::new()).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
    let err = load(&path, &specs()).unwrap_err();
    assert!(matches!(err.root(), ParamsError::Format { .. }), "{err}");
    assert!(load(&dir.join("absent"), &specs()).is_err());
}

#[test]
fn bad_optimizer_state_is_an_error() {
    let specs = specs();
    let params = ParamSet::init(&specs, 0);
    let mut state = OptimState::new(&amp_params::OptimizerKind::ADAM, &specs);
    state.tensors[1].m.pop();
    assert!(to_bytes(&params, Some(&state), &BTreeMap::new()).is_err());
    // A file whose step count is garbage.
    let state = OptimState::new(&amp_params::OptimizerKind::ADAM, &specs);
    let bytes = to_bytes(&params, Some(&state), &BTreeMap::new()).unwrap();
    let needle = b"\"amp.optim.step.cell.bias\":\"0\"";
    let at = bytes.windows(needle.len()).position(|w| w == needle).unwrap();
    let mut bytes = bytes;
    bytes[at + needle.len() - 2] = b'x';
    let err = from_bytes(&bytes, &specs).unwrap_err();
    assert!(matches!(err, ParamsError::OptimizerState { .. }), "{err}");
}

fn valid_bytes() -> Vec<u8> {
    let specs = specs();
    let params = ParamSet::init(&specs, 9);
    let state = OptimState::new(&amp_params::OptimizerKind::ADAM, &specs);
    to_bytes(&params, Some(&state), &meta(&[("epoch", "1")])).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn mutated_bytes_never_panic(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        let mut bytes = valid_bytes();
        for (at, value) in edits {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        let _ = from_bytes(&bytes, &specs());
    }

    #[test]
    fn truncated_or_extended_bytes_never_panic(cut in any::<prop::sample::Index>(), tail in prop::collection::vec(any::<u8>(), 0..16)) {
        let mut bytes = valid_bytes();
        let keep = cut.index(bytes.len());
        bytes.truncate(keep);
        bytes.extend(tail);
        let _ = from_bytes(&bytes, &specs());
    }

    #[test]
    fn header_edits_never_panic(at in any::<prop::sample::Index>(), text in "[\\[\\]{}:,\"0-9a-zA-Z_. -]{0,12}") {
        // Splice text into the JSON header, keeping the declared length consistent.
        let bytes = valid_bytes();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let mut header = bytes[8..8 + n].to_vec();
        let i = at.index(header.len());
        header.splice(i..i, text.bytes());
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend(header);
        out.extend(&bytes[8 + n..]);
        let _ = from_bytes(&out, &specs());
    }
}

/// Issue 48, finding 7: `/dev/zero` as `--init` or `--params` was read without end. A
/// checkpoint is read as far as its header says, and no further than the model's
/// parameters and optimizer state can take.
#[test]
fn an_endless_or_oversized_file_is_refused_after_its_header() {
    if Path::new("/dev/zero").exists() {
        let error = load(Path::new("/dev/zero"), &specs()).unwrap_err();
        assert!(error.to_string().contains("not a valid safetensors file"), "{error}");
    }
    let dir = temp_dir("oversized");
    let path = dir.path().join("huge.safetensors");
    // A well-formed header that claims a tensor of a terabyte: refused without reading it.
    let header = r#"{"cell.weight":{"dtype":"F32","shape":[262144,1048576],"data_offsets":[0,1099511627776]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&[0; 64]);
    std::fs::write(&path, &bytes).unwrap();
    let error = load(&path, &specs()).unwrap_err().to_string();
    assert!(error.contains("its tensors take 1099511627776 bytes, more than this model's"), "{error}");
    // A header length past the limit is refused before it is read.
    std::fs::write(&path, u64::MAX.to_le_bytes()).unwrap();
    let error = load(&path, &specs()).unwrap_err().to_string();
    assert!(error.contains("more than 100000000"), "{error}");
    // Trailing bytes after the data are still refused, as before.
    let good = to_bytes(&ParamSet::init(&specs(), 1), None, &BTreeMap::new()).unwrap();
    std::fs::write(&path, [good.clone(), vec![0]].concat()).unwrap();
    assert!(load(&path, &specs()).is_err());
    std::fs::write(&path, good).unwrap();
    assert!(load(&path, &specs()).is_ok());
}
