//! `amprun train --tensorboard DIR` writes TensorBoard event files that hold the same
//! scalars as the `--metrics` file. They are read back by a reader written here from the
//! formats' specifications, independently of amprun's writer: TFRecord framing (length,
//! masked CRC-32C of the length, data, masked CRC-32C of the data) around
//! `tensorflow.Event` protocol buffers (`wall_time` = 1, `step` = 2, `file_version` = 3,
//! `summary` = 5; `Summary.value` = 1; `Summary.Value.tag` = 1, `simple_value` = 2).
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use std::collections::BTreeMap;

/// CRC-32C, bit by bit from its reflected polynomial (0x82F63B78).
fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0x82f6_3b78 } else { crc >> 1 };
        }
    }
    !crc
}

fn masked(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One protobuf field's value.
#[derive(Debug)]
enum Field<'a> {
    Varint(u64),
    Fixed64([u8; 8]),
    Bytes(&'a [u8]),
    Fixed32([u8; 4]),
}

fn varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut x = 0u64;
    for shift in (0..64).step_by(7) {
        let b = bytes[*at];
        *at += 1;
        x |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return x;
        }
    }
    panic!("a varint longer than 10 bytes");
}

/// A message's fields in order: (number, value).
fn fields(bytes: &[u8]) -> Vec<(u64, Field<'_>)> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < bytes.len() {
        let key = varint(bytes, &mut at);
        let value = match key & 7 {
            0 => Field::Varint(varint(bytes, &mut at)),
            1 => {
                at += 8;
                Field::Fixed64(bytes[at - 8..at].try_into().unwrap())
            }
            2 => {
                let n = varint(bytes, &mut at) as usize;
                at += n;
                Field::Bytes(&bytes[at - n..at])
            }
            5 => {
                at += 4;
                Field::Fixed32(bytes[at - 4..at].try_into().unwrap())
            }
            wire => panic!("wire type {wire}"),
        };
        out.push((key >> 3, value));
    }
    out
}

/// The records of a TFRecord file, each checksum checked.
fn records(file: &[u8]) -> Vec<&[u8]> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < file.len() {
        let length = &file[at..at + 8];
        let n = u64::from_le_bytes(length.try_into().unwrap()) as usize;
        let length_crc = u32::from_le_bytes(file[at + 8..at + 12].try_into().unwrap());
        assert_eq!(length_crc, masked(crc32c(length)), "the length's checksum at byte {at}");
        let data = &file[at + 12..at + 12 + n];
        let data_crc = u32::from_le_bytes(file[at + 12 + n..at + 16 + n].try_into().unwrap());
        assert_eq!(data_crc, masked(crc32c(data)), "the data's checksum at byte {at}");
        out.push(data);
        at += 16 + n;
    }
    out
}

/// The file's version string and its scalars: tag -> step -> value.
fn read_events(file: &[u8]) -> (String, BTreeMap<String, BTreeMap<i64, f32>>) {
    let mut version = String::new();
    let mut scalars: BTreeMap<String, BTreeMap<i64, f32>> = BTreeMap::new();
    for record in records(file) {
        let mut step = 0;
        let mut values = Vec::new();
        for (number, field) in fields(record) {
            match (number, field) {
                (1, Field::Fixed64(bits)) => assert!(f64::from_le_bytes(bits) > 1.7e9, "wall_time is Unix seconds"),
                (2, Field::Varint(s)) => step = s as i64,
                (3, Field::Bytes(v)) => version = String::from_utf8(v.to_vec()).unwrap(),
                (5, Field::Bytes(summary)) => {
                    for (n, value) in fields(summary) {
                        let (1, Field::Bytes(value)) = (n, value) else { panic!("Summary field {n}") };
                        let (mut tag, mut x) = (String::new(), None);
                        for field in fields(value) {
                            match field {
                                (1, Field::Bytes(t)) => tag = String::from_utf8(t.to_vec()).unwrap(),
                                (2, Field::Fixed32(v)) => x = Some(f32::from_le_bytes(v)),
                                other => panic!("Summary.Value field {other:?}"),
                            }
                        }
                        values.push((tag, x.expect("a simple_value")));
                    }
                }
                other => panic!("Event field {other:?}"),
            }
        }
        for (tag, x) in values {
            scalars.entry(tag).or_default().insert(step, x);
        }
    }
    (version, scalars)
}

#[test]
fn tensorboard_events_hold_the_metrics_scalars() {
    let dir = scratch("tensorboard");
    let dir = dir.path();
    let flags = ["--limit", "64", "--epochs", "3", "--async", "--max-staleness", "1"];
    train_list_reduce(dir, &[&flags[..], &["--metrics", "m.jsonl", "--tensorboard", "board"]].concat());
    let files: Vec<_> = std::fs::read_dir(dir.join("board")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].file_name().unwrap().to_str().unwrap().starts_with("events.out.tfevents."));
    let (version, scalars) = read_events(&std::fs::read(&files[0]).unwrap());
    assert_eq!(version, "brain.Event:2");
    let metrics = json_lines(&std::fs::read_to_string(dir.join("m.jsonl")).unwrap());
    let mut checked = 0;
    for row in &metrics {
        let (Some(split), Some(epoch)) = (row["split"].as_str(), row["epoch"].as_i64()) else { continue };
        for key in ["loss", "accuracy", "instances_per_s", "lr"] {
            if let Some(x) = row[key].as_f64() {
                let tag = format!("{split}/{key}");
                assert_eq!(scalars[&tag].get(&epoch), Some(&(x as f32)), "{tag} at epoch {epoch}");
                checked += 1;
            }
        }
        for group in row["staleness"].as_array().into_iter().flatten() {
            let name = group["group"].as_str().unwrap();
            assert_eq!(scalars[&format!("staleness/{name}/bound")][&epoch], 1.0);
            assert_eq!(scalars[&format!("staleness/{name}/max")][&epoch], group["max"].as_f64().unwrap() as f32);
        }
    }
    // Three epochs of train (loss, accuracy, rate, lr) and valid (loss, accuracy, rate).
    assert_eq!(checked, 3 * (4 + 3));
    // Every scalar is an epoch's: steps 1 to 3.
    assert!(scalars.values().all(|steps| steps.keys().copied().eq(1..=3)), "{scalars:?}");
}

#[test]
fn a_tensorboard_folder_that_is_a_file_is_refused() {
    let dir = scratch("tensorboard-file");
    let dir = dir.path();
    std::fs::write(dir.join("board"), "precious").unwrap();
    let data = example("data/list_reduce.valid.jsonl");
    let out =
        amprun(dir, &["train", &example("list_reduce.amp"), "--data", &data, "--limit", "8", "--tensorboard", "board"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("board"), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(dir.join("board")).unwrap(), "precious");
}
