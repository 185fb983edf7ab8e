"""Shared fixtures: the repository's examples and the amprun binary the package is
compared with (``$AMPRUN``, else the repository's debug build)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
LIST_REDUCE = EXAMPLES / "list_reduce.amp"
LIST_TRAIN = EXAMPLES / "data" / "list_reduce.train.jsonl"
LIST_VALID = EXAMPLES / "data" / "list_reduce.valid.jsonl"


def amprun_path() -> Path:
    path = Path(os.environ.get("AMPRUN", ROOT / "target" / "debug" / "amprun"))
    if not path.is_file():
        pytest.fail(f"no amprun at {path}: build it with `cargo build -p amprun`, or set $AMPRUN")
    return path


def amprun(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """Runs amprun; a failure fails the test with its output."""
    done = subprocess.run([str(amprun_path()), *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(f"amprun {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done


def read_jsonl(path: Path, limit: int = 1 << 30) -> list:
    with open(path) as lines:
        return [json.loads(line) for line, _ in zip(lines, range(limit))]


@pytest.fixture(scope="session")
def list_rows() -> list:
    """The first 240 training instances of list-reduce, as dicts."""
    return read_jsonl(LIST_TRAIN, 240)


@pytest.fixture(scope="session")
def list_file(tmp_path_factory, list_rows) -> Path:
    """The same instances as a JSON Lines file."""
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in list_rows))
    return path


def report_skip(line: str) -> None:
    """Skips the test, appending `line` to $AMP_SKIP_LOG (.ci/run counts the skips), as
    the Rust tests' `amp_tests::report_skip` does."""
    log = os.environ.get("AMP_SKIP_LOG")
    if log:
        with open(log, "a") as out:
            out.write(line + "\n")
    pytest.skip(line)


def sst_present() -> bool:
    """Whether SST is in the data cache (`amprun data get sst`)."""
    found = subprocess.run([str(amprun_path()), "data", "path", "sst:train"], capture_output=True, text=True)
    return found.returncode == 0 and Path(found.stdout.strip()).is_file()
