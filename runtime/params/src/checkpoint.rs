//! Safetensors checkpoints: parameters, optionally the optimizer state, and metadata, in
//! one file written atomically.
//!
//! Layout (all tensors F32, little-endian, row-major, as `safetensors.torch.save_file`
//! writes them):
//! - each parameter under its `state_dict` name (`cell.weight`), with its shape;
//! - with an optimizer state, per parameter `optim/NAME.momentum_buffer` (momentum) or
//!   `optim/NAME.exp_avg` and `optim/NAME.exp_avg_sq` (Adam), PyTorch's state names. The
//!   `/` cannot occur in an Amp parameter name, so these never collide with parameters;
//! - metadata: `format` = `pt` (what PyTorch loaders expect), `amp.checkpoint` = `1`, and
//!   with an optimizer state `amp.optim` = its kind (`sgd`, `momentum`, `adam`) and
//!   `amp.optim.step.NAME` = the tensor's update count; then the caller's own entries
//!   (epoch, position in the data, seed...: whatever resuming needs). Keys `format` and
//!   `amp.*` are reserved.
//!
//! One file, so that parameters and optimizer state are always from the same moment: the
//! file is written to a temporary file in the same directory, synced, and renamed over the
//! old one (then the directory is synced), so a crash at any point leaves either the old
//! checkpoint or the new one, never a mixture or a torn file. Only a regular file is
//! ever replaced (see [`crate::target`]).
//!
//! Reading accepts any file `safetensors` accepts (a PyTorch file included): it checks
//! that every expected parameter is there, F32, with the expected shape, and reports all
//! missing, unexpected, mis-typed and mis-shaped tensors by name at once. Malformed bytes
//! are errors, never panics.

use crate::optim::{OptimState, TensorState};
use crate::{Mismatch, ParamSet, ParamSpec, ParamsError, ShapeMismatch};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

pub use crate::target::write_atomically;

/// Prefix of optimizer-state tensors.
pub const OPTIM_PREFIX: &str = "optim/";
/// Metadata key of the optimizer kind.
pub const OPTIM_KIND_KEY: &str = "amp.optim";
/// Metadata key prefix of per-tensor step counts.
pub const OPTIM_STEP_PREFIX: &str = "amp.optim.step.";
const VERSION_KEY: &str = "amp.checkpoint";

/// What a checkpoint file holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    pub params: ParamSet,
    /// The optimizer state, when the file has one.
    pub optim: Option<OptimState>,
    /// Every metadata entry of the file (the reserved ones included).
    pub metadata: BTreeMap<String, String>,
}

/// A borrowed f32 tensor as safetensors wants it.
struct F32Tensor<'a> {
    shape: Vec<usize>,
    data: &'a [f32],
}

impl View for F32Tensor<'_> {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.data.iter().flat_map(|v| v.to_le_bytes()).collect())
    }

    fn data_len(&self) -> usize {
        self.data.len() * 4
    }
}

/// The bytes of a checkpoint (see the module documentation for the layout).
pub fn to_bytes(
    params: &ParamSet,
    optim: Option<&OptimState>,
    extra: &BTreeMap<String, String>,
) -> Result<Vec<u8>, ParamsError> {
    let mut metadata: HashMap<String, String> = HashMap::new();
    for (key, value) in extra {
        if key == "format" || key.starts_with("amp.") {
            return Err(ParamsError::ReservedMetadata { key: key.clone() });
        }
        metadata.insert(key.clone(), value.clone());
    }
    metadata.insert("format".into(), "pt".into());
    metadata.insert(VERSION_KEY.into(), "1".into());
    let mut tensors: Vec<(String, F32Tensor)> = Vec::new();
    for (spec, data) in params.iter() {
        tensors.push((spec.name.clone(), F32Tensor { shape: spec.shape.clone(), data }));
    }
    if let Some(state) = optim {
        if state.tensors.len() != params.len() {
            let message = format!("{} tensor states for {} parameters", state.tensors.len(), params.len());
            return Err(ParamsError::OptimizerState { message });
        }
        metadata.insert(OPTIM_KIND_KEY.into(), state.kind.clone());
        let names = buffer_names(&state.kind)?;
        for ((spec, _), tensor) in params.iter().zip(&state.tensors) {
            metadata.insert(format!("{OPTIM_STEP_PREFIX}{}", spec.name), tensor.step.to_string());
            for (buffer, data) in names.iter().zip([&tensor.m, &tensor.v]) {
                if data.len() != spec.elements() {
                    let message =
                        format!("`{}`'s {buffer} has {} values, not {}", spec.name, data.len(), spec.elements());
                    return Err(ParamsError::OptimizerState { message });
                }
                let name = format!("{OPTIM_PREFIX}{}.{buffer}", spec.name);
                tensors.push((name, F32Tensor { shape: spec.shape.clone(), data }));
            }
        }
    }
    safetensors::serialize(tensors, Some(metadata)).map_err(|e| ParamsError::Format { message: e.to_string() })
}

/// The buffer tensor names of an optimizer kind, in the order of `TensorState::{m, v}`.
fn buffer_names(kind: &str) -> Result<&'static [&'static str], ParamsError> {
    match kind {
        "sgd" => Ok(&[]),
        "momentum" => Ok(&["momentum_buffer"]),
        "adam" => Ok(&["exp_avg", "exp_avg_sq"]),
        other => Err(ParamsError::OptimizerState { message: format!("unknown optimizer `{other}`") }),
    }
}

/// Reads a checkpoint from its bytes, checking its parameters against `specs`.
pub fn from_bytes(bytes: &[u8], specs: &[ParamSpec]) -> Result<Checkpoint, ParamsError> {
    let file = SafeTensors::deserialize(bytes).map_err(|e| ParamsError::Format { message: e.to_string() })?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| ParamsError::Format { message: e.to_string() })?;
    let metadata: BTreeMap<String, String> =
        header.metadata().as_ref().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default();
    let mut found: HashMap<String, TensorView> = file.tensors().into_iter().collect();
    let mut params = ParamSet::zeros(specs);
    let mut mismatch = Mismatch::default();
    for (i, spec) in specs.iter().enumerate() {
        let Some(view) = found.remove(&spec.name) else {
            mismatch.missing.push(spec.name.clone());
            continue;
        };
        if let Some(values) = read_f32(&spec.name, &view, &spec.shape, &mut mismatch) {
            params.data_mut(i).copy_from_slice(&values);
        }
    }
    let optim_tensors: HashMap<String, TensorView> =
        found.iter().filter(|(name, _)| name.starts_with(OPTIM_PREFIX)).map(|(n, v)| (n.clone(), v.clone())).collect();
    let mut unexpected: Vec<String> = found.into_keys().filter(|name| !name.starts_with(OPTIM_PREFIX)).collect();
    unexpected.sort();
    mismatch.unexpected = unexpected;
    let optim = match metadata.get(OPTIM_KIND_KEY) {
        Some(kind) => Some(read_optim(kind, specs, &metadata, optim_tensors, &mut mismatch)?),
        None => None,
    };
    if !mismatch.is_empty() {
        return Err(ParamsError::Mismatch(mismatch));
    }
    Ok(Checkpoint { params, optim, metadata })
}

/// The values of a tensor that must be F32 of `shape`; records the mismatch otherwise.
fn read_f32(name: &str, view: &TensorView, shape: &[usize], mismatch: &mut Mismatch) -> Option<Vec<f32>> {
    if view.dtype() != Dtype::F32 {
        mismatch.wrong_dtype.push((name.to_string(), format!("{:?}", view.dtype())));
        return None;
    }
    if view.shape() != shape {
        let found = view.shape().to_vec();
        mismatch.misshaped.push(ShapeMismatch { name: name.to_string(), expected: shape.to_vec(), found });
        return None;
    }
    let bytes = view.data();
    let expected: usize = shape.iter().product();
    if bytes.len() != expected * 4 {
        // safetensors checks sizes against shapes; this guards against a future change.
        let found = vec![bytes.len() / 4];
        mismatch.misshaped.push(ShapeMismatch { name: name.to_string(), expected: shape.to_vec(), found });
        return None;
    }
    Some(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

fn read_optim(
    kind: &str,
    specs: &[ParamSpec],
    metadata: &BTreeMap<String, String>,
    mut tensors: HashMap<String, TensorView>,
    mismatch: &mut Mismatch,
) -> Result<OptimState, ParamsError> {
    let names = buffer_names(kind)?;
    let mut states = Vec::with_capacity(specs.len());
    for spec in specs {
        let step_key = format!("{OPTIM_STEP_PREFIX}{}", spec.name);
        let step = match metadata.get(&step_key).map(|s| s.parse::<u64>()) {
            Some(Ok(step)) => step,
            Some(Err(_)) => {
                let message = format!("`{step_key}` is not a step count");
                return Err(ParamsError::OptimizerState { message });
            }
            None => return Err(ParamsError::OptimizerState { message: format!("no `{step_key}`") }),
        };
        let mut buffers = [Vec::new(), Vec::new()];
        for (slot, buffer) in buffers.iter_mut().zip(names.iter()) {
            let name = format!("{OPTIM_PREFIX}{}.{buffer}", spec.name);
            match tensors.remove(&name) {
                None => mismatch.missing.push(name),
                Some(view) => {
                    if let Some(values) = read_f32(&name, &view, &spec.shape, mismatch) {
                        *slot = values;
                    }
                }
            }
        }
        let [m, v] = buffers;
        states.push(TensorState { step, m, v });
    }
    let mut unexpected: Vec<String> = tensors.into_keys().collect();
    unexpected.sort();
    mismatch.unexpected.extend(unexpected);
    Ok(OptimState { kind: kind.to_string(), tensors: states })
}

/// Saves parameters (no optimizer state) with the caller's metadata, atomically.
pub fn save(params: &ParamSet, path: &Path, extra: &BTreeMap<String, String>) -> Result<(), ParamsError> {
    save_checkpoint(path, params, None, extra)
}

/// Saves parameters and, when given, the optimizer state, atomically.
pub fn save_checkpoint(
    path: &Path,
    params: &ParamSet,
    optim: Option<&OptimState>,
    extra: &BTreeMap<String, String>,
) -> Result<(), ParamsError> {
    // Refused before the bytes are built: a checkpoint can be large.
    crate::target::check_target(path)?;
    let bytes = to_bytes(params, optim, extra).map_err(|e| e.in_file(path))?;
    write_atomically(path, |file| file.write_all(&bytes))
}

/// Loads the parameters of a checkpoint (optimizer state, if any, is ignored), checking
/// names, dtypes and shapes against `specs`.
pub fn load(path: &Path, specs: &[ParamSpec]) -> Result<ParamSet, ParamsError> {
    load_checkpoint(path, specs).map(|c| c.params)
}

/// Loads a whole checkpoint: parameters, optimizer state and metadata.
pub fn load_checkpoint(path: &Path, specs: &[ParamSpec]) -> Result<Checkpoint, ParamsError> {
    let file =
        std::fs::File::open(path).map_err(|source| ParamsError::Io { path: path.into(), action: "read", source })?;
    let bytes = read_bounded(std::io::BufReader::new(file), specs)
        .map_err(|source| ParamsError::Io { path: path.into(), action: "read", source })?
        .map_err(|e| e.in_file(path))?;
    from_bytes(&bytes, specs).map_err(|e| e.in_file(path))
}

/// The most bytes a safetensors header may have (the `safetensors` crate's own limit).
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The bytes of a safetensors file, read as far as its header says and no further than
/// a checkpoint of `specs` can be: its parameters and two optimizer buffers of each
/// (Adam's), so an endless input (`/dev/zero`) or a header that claims terabytes is
/// refused after reading the header, not after memory runs out. A byte after the data
/// the header describes is kept, so that `from_bytes` refuses the file as it would whole.
fn read_bounded(mut reader: impl std::io::Read, specs: &[ParamSpec]) -> std::io::Result<Result<Vec<u8>, ParamsError>> {
    use std::io::Read;
    let format = |message: String| Ok(Err(ParamsError::Format { message }));
    let mut bytes = Vec::new();
    (&mut reader).take(8).read_to_end(&mut bytes)?;
    let Ok(length) = <[u8; 8]>::try_from(bytes.as_slice()) else { return Ok(Ok(bytes)) };
    let header = u64::from_le_bytes(length);
    if header > MAX_HEADER_BYTES {
        return format(format!("the header is {header} bytes long, more than {MAX_HEADER_BYTES}"));
    }
    (&mut reader).take(header).read_to_end(&mut bytes)?;
    // The end of the data is the largest end offset of a tensor; a header that does not
    // say is left for `from_bytes` to refuse.
    let Some(data) = bytes.get(8..).and_then(data_length) else { return Ok(Ok(bytes)) };
    let elements = specs
        .iter()
        .try_fold(0u64, |n, s| n.checked_add(s.shape.iter().try_fold(1u64, |e, &d| e.checked_mul(d as u64))?));
    let most = elements.and_then(|e| e.checked_mul(3 * 4)).unwrap_or(u64::MAX);
    if data > most {
        return format(format!(
            "its tensors take {data} bytes, more than this model's parameters and optimizer state can ({most})"
        ));
    }
    (&mut reader).take(data.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok(Ok(bytes))
}

/// The bytes of data a safetensors header describes: the largest end offset of its
/// tensors (none: 0), or `None` when it is not a header.
fn data_length(header: &[u8]) -> Option<u64> {
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(header).ok()?;
    header
        .iter()
        .filter(|(name, _)| name.as_str() != "__metadata__")
        .map(|(_, tensor)| tensor.get("data_offsets")?.get(1)?.as_u64())
        .try_fold(0u64, |end, tensor_end| Some(end.max(tensor_end?)))
}
