//! `--tensorboard DIR`: the run's scalars as a TensorBoard event file, so that
//! `tensorboard --logdir DIR` plots them beside PyTorch runs.
//!
//! The file is TFRecord framing around `tensorflow.Event` protocol buffers: per record
//! the data's length (u64, little-endian), the length's masked CRC-32C (u32), the data,
//! and the data's masked CRC-32C. The first event carries `file_version` `brain.Event:2`;
//! each scalar is an event with `wall_time`, `step` and a `Summary` of one value (`tag`,
//! `simple_value`). The few protobuf fields are written here directly: a generated
//! encoder would bring a build step for five fields.
//!
//! Scalars, at step = the epoch: `train/loss`, `train/accuracy`, `train/instances_per_s`,
//! `train/lr`, `valid/loss`, `valid/accuracy`, `valid/instances_per_s`, and per parameter
//! group `staleness/GROUP/mean`, `staleness/GROUP/max` and, under a bound,
//! `staleness/GROUP/bound`.

use crate::failure::Failure;
use serde_json::Value;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// TFRecord's checksum: CRC-32C (Castagnoli).
const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// An open event file.
pub struct TensorBoard {
    path: PathBuf,
    out: BufWriter<File>,
}

impl TensorBoard {
    /// A new event file in `dir` (made if missing; a resumed run adds a file of its own,
    /// which TensorBoard reads with the others), with its version event written.
    pub fn create(dir: &Path) -> Result<TensorBoard, Failure> {
        std::fs::create_dir_all(dir).map_err(|e| Failure::io("create the folder", dir, &e))?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let path = dir.join(format!("events.out.tfevents.{now}.amprun.{}", std::process::id()));
        crate::setup::check_target("--tensorboard", &path)?;
        let file = File::create(&path).map_err(|e| Failure::io("write", &path, &e))?;
        let mut board = TensorBoard { path, out: BufWriter::new(file) };
        let mut event = event_header(0);
        put_bytes(&mut event, 3, b"brain.Event:2");
        board.record(&event)?;
        Ok(board)
    }

    /// The scalars of a metrics object (`report::Report::to_json` and what train adds);
    /// objects that are not an epoch's report (the plan's) give none.
    pub fn report(&mut self, object: &Value) -> Result<(), Failure> {
        let (Some(split), Some(step)) = (object["split"].as_str(), object["epoch"].as_i64()) else {
            return Ok(());
        };
        if !matches!(split, "train" | "valid") {
            return Ok(());
        }
        for key in ["loss", "accuracy", "instances_per_s", "lr"] {
            if let Some(x) = object[key].as_f64() {
                self.scalar(&format!("{split}/{key}"), step, x as f32)?;
            }
        }
        for group in object["staleness"].as_array().map_or(&[][..], Vec::as_slice) {
            let Some(name) = group["group"].as_str() else { continue };
            for key in ["mean", "max", "bound"] {
                if let Some(x) = group[key].as_f64() {
                    self.scalar(&format!("staleness/{name}/{key}"), step, x as f32)?;
                }
            }
        }
        self.out.flush().map_err(|e| Failure::io("write", &self.path, &e))
    }

    fn scalar(&mut self, tag: &str, step: i64, value: f32) -> Result<(), Failure> {
        let mut summary_value = Vec::new();
        put_bytes(&mut summary_value, 1, tag.as_bytes());
        put_key(&mut summary_value, 2, 5);
        summary_value.extend_from_slice(&value.to_le_bytes());
        let mut summary = Vec::new();
        put_bytes(&mut summary, 1, &summary_value);
        let mut event = event_header(step);
        put_bytes(&mut event, 5, &summary);
        self.record(&event)
    }

    fn record(&mut self, data: &[u8]) -> Result<(), Failure> {
        let length = (data.len() as u64).to_le_bytes();
        let mut framed = Vec::with_capacity(data.len() + 16);
        framed.extend_from_slice(&length);
        framed.extend_from_slice(&masked_crc(&length).to_le_bytes());
        framed.extend_from_slice(data);
        framed.extend_from_slice(&masked_crc(data).to_le_bytes());
        self.out.write_all(&framed).map_err(|e| Failure::io("write", &self.path, &e))
    }
}

/// An event's `wall_time` (field 1, double) and `step` (field 2, int64).
fn event_header(step: i64) -> Vec<u8> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let mut event = Vec::new();
    put_key(&mut event, 1, 1);
    event.extend_from_slice(&now.to_le_bytes());
    put_key(&mut event, 2, 0);
    put_varint(&mut event, step as u64);
    event
}

/// TFRecord's masking of a CRC: rotated right by 15 bits, plus a constant.
fn masked_crc(bytes: &[u8]) -> u32 {
    CRC32C.checksum(bytes).rotate_right(15).wrapping_add(0xa282_ead8)
}

fn put_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push((x as u8) | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

/// A field's key: its number and wire type (0 varint, 1 64-bit, 2 length-delimited, 5
/// 32-bit).
fn put_key(out: &mut Vec<u8>, field: u64, wire: u64) {
    put_varint(out, (field << 3) | wire);
}

fn put_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_key(out, field, 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 3720's test vector (B.4): the CRC-32C of 32 zero bytes is 0x8a9136aa.
    #[test]
    fn the_checksum_is_crc32c() {
        assert_eq!(CRC32C.checksum(&[0; 32]), 0x8a91_36aa);
        assert_eq!(masked_crc(&[0; 32]), 0x8a91_36aau32.rotate_right(15).wrapping_add(0xa282_ead8));
    }

    #[test]
    fn varints_are_little_endian_base_128() {
        let mut out = Vec::new();
        put_varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        out.clear();
        put_varint(&mut out, u64::MAX);
        assert_eq!(out.len(), 10);
    }
}
