"""The package against the amprun command line it shares its code with: the same losses,
outputs and gradients to the last bit, and its errors."""

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import amp
from conftest import EXAMPLES, LIST_REDUCE, LIST_VALID, ROOT, amprun, read_jsonl, report_skip, sst_present

# Options both sides are given; one worker, so that both are reproducible bit for bit.
OPTIONS = dict(optimizer="adam", lr=0.003, min_update_frequency=8, workers=1, seed=3)
FLAGS = ["--optimizer", "adam", "--lr", "0.003", "--min-update-frequency", "8", "--workers", "1", "--seed", "3"]


def read_safetensors(path: Path) -> dict:
    """The float32 tensors of a safetensors file (its format: a little-endian u64 header
    length, the JSON header, then the data)."""
    blob = path.read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + length])
    data = blob[8 + length :]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32"
        start, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(data[start:end], dtype="<f4").reshape(entry["shape"])
    return tensors


def epochs_of(metrics: list) -> list:
    """(split, epoch, loss, accuracy) of each epoch's report."""
    return [(m["split"], m.get("epoch"), m["loss"], m.get("accuracy")) for m in metrics if m["split"] in ("train", "valid")]


@pytest.mark.parametrize("in_memory", [False, True], ids=["file", "dicts"])
def test_training_gives_amprun_s_losses(tmp_path, list_file, list_rows, in_memory):
    metrics = tmp_path / "m.jsonl"
    amprun("train", str(LIST_REDUCE), "-D", "hidden=16", "--data", str(list_file), "--valid", str(LIST_VALID),
           "--epochs", "3", "--metrics", str(metrics), *FLAGS)
    expected = epochs_of(read_jsonl(metrics))

    model = amp.compile(LIST_REDUCE, hidden=16)
    data = list_rows if in_memory else list_file
    got = epochs_of(model.train(data, valid=LIST_VALID, epochs=3, **OPTIONS))
    assert len(got) == 6
    # The same numbers to the last digit (JSON carries every bit of the f32 losses).
    assert got == expected


def test_infer_and_grad_equal_amprun_s(tmp_path, list_rows):
    model = amp.compile(LIST_REDUCE, hidden=16)
    model.train(list_rows, epochs=1, **OPTIONS)
    params = tmp_path / "p.safetensors"
    model.save(params)
    instances = read_jsonl(LIST_VALID, 40)
    unlabeled = [{"tokens": row["tokens"]} for row in instances]
    valid = tmp_path / "v.jsonl"
    valid.write_text("".join(json.dumps(row) + "\n" for row in instances))

    lines = amprun("infer", str(LIST_REDUCE), "-D", "hidden=16", "--params", str(params), "--data", str(valid),
                   "--workers", "1").stdout
    expected = np.array([json.loads(line)["output"] for line in lines.splitlines()], dtype=np.float32)
    outputs = model.infer(unlabeled, workers=1)
    assert outputs.dtype == np.float32 and outputs.shape == (40, 10)
    assert np.array_equal(outputs, expected)

    grads_file = tmp_path / "g.safetensors"
    amprun("grad", str(LIST_REDUCE), "-D", "hidden=16", "--params", str(params), "--data", str(valid),
           "--out", str(grads_file), "--workers", "1")
    expected = read_safetensors(grads_file)
    grads = model.grad(instances, workers=1)
    assert sorted(grads) == sorted(expected)
    for name, value in expected.items():
        assert np.array_equal(grads[name], value), name

    summary = model.eval(instances)
    assert summary["instances"] == 40 and 0.0 <= summary["accuracy"] <= 1.0
    assert summary["loss"] > 0.0


def test_parameters_round_trip_and_are_checked(tmp_path):
    model = amp.compile(LIST_REDUCE, hidden=16)
    params = model.parameters()
    assert params["embed.weight"].shape == (14, 16) and params["cell.bias"].dtype == np.float32
    changed = {name: value + 1.0 for name, value in params.items()}
    model.load_parameters(changed)
    assert all(np.array_equal(model.parameters()[n], changed[n]) for n in params)

    path = tmp_path / "p.safetensors"
    model.save(path)
    loaded = amp.load(LIST_REDUCE, path, hidden=16)
    assert all(np.array_equal(loaded.parameters()[n], changed[n]) for n in params)

    wrong = dict(params, **{"cell.bias": np.zeros(3)})
    with pytest.raises(amp.UsageError, match=r"`cell.bias` has the shape \[16\]"):
        model.load_parameters(wrong)
    with pytest.raises(amp.UsageError, match="no parameter `extra`"):
        model.load_parameters(dict(params, extra=np.zeros(2)))
    with pytest.raises(amp.UsageError, match="NaN"):
        model.load_parameters(dict(params, **{"cell.bias": np.full(16, np.nan)}))


def test_a_compile_error_carries_its_code_and_line():
    # The example with a misspelled name on line 13.
    source = LIST_REDUCE.read_text().replace("concat(embed(tok), h)", "concat(embed(tokn), h)")
    with pytest.raises(amp.CompileError) as caught:
        amp.compile(source)
    first = caught.value.diagnostics[0]
    assert (first.severity, first.code, first.line, first.file) == ("error", "E0100", 13, "<string>.amp")
    assert first.column == source.splitlines()[12].index("tokn") + 1
    # Rendered as `ampc check` renders it: the code, the message, the source line.
    assert f"[{first.code}]" in str(caught.value) and first.message in str(caught.value)
    assert caught.value.exit_code == 1


def test_bad_data_names_the_instance_and_the_field(list_rows, tmp_path):
    model = amp.compile(LIST_REDUCE, hidden=16)
    bad = list_rows[:5] + [{"tokens": [1, 2], "label": "x"}] + list_rows[5:10]
    with pytest.raises(amp.DataError) as caught:
        model.train(bad, epochs=1)
    assert (caught.value.index, caught.value.field) == (5, "label")
    assert str(caught.value).startswith("data[5]: field `label`")

    # A token past the vocabulary is found before training.
    with pytest.raises(amp.DataError) as caught:
        model.infer([{"tokens": [1, 99]}])
    assert caught.value.index == 0 and caught.value.field is not None

    with pytest.raises(amp.DataError) as caught:
        model.train([{"tokens": [1]}, 3], epochs=1)
    assert caught.value.index == 1

    # In a file, the error names the file's line.
    path = tmp_path / "bad.jsonl"
    path.write_text('{"tokens": [1], "label": 1}\n{"tokens": [1]}\n')
    with pytest.raises(amp.DataError) as caught:
        model.train(path, epochs=1)
    assert (caught.value.index, caught.value.line, caught.value.field) == (None, 2, "label")


def test_options_are_amprun_s_flags(list_rows):
    model = amp.compile(LIST_REDUCE, hidden=16)
    with pytest.raises(amp.UsageError, match="--no-such-option"):
        model.train(list_rows, no_such_option=3)
    with pytest.raises(amp.UsageError, match="--optimizer"):
        model.train(list_rows, optimizer="nesterov")
    with pytest.raises(amp.UsageError, match="processes"):
        model.train(list_rows, processes=2)
    plan = model.plan(workers=2)
    assert plan["copies"] in (1, 2) and "workers" in plan["summary"]
    assert "ListReduce" in model.graph() or "%" in model.graph()


def test_the_callback_hears_each_epoch_and_can_stop_the_run(list_rows):
    model = amp.compile(LIST_REDUCE, hidden=16)
    heard = []
    model.train(list_rows[:64], valid=list_rows[:16], epochs=2, callback=heard.append, workers=1)
    assert [(m["split"], m["epoch"]) for m in heard] == [("train", 1), ("valid", 1), ("train", 2), ("valid", 2)]

    def stop_after_the_first(report):
        if report["split"] == "train":
            raise RuntimeError("enough")

    before = model.parameters()
    with pytest.raises(RuntimeError, match="enough"):
        model.train(list_rows[:64], epochs=5, callback=stop_after_the_first, workers=1)
    # The epoch that ran is kept.
    assert not np.array_equal(before["cell.weight"], model.parameters()["cell.weight"])


CHILD = """
import amp, json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
model = amp.compile(sys.argv[2], hidden=16)
try:
    model.train(rows, epochs=100000, save=sys.argv[3], workers=1)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def test_ctrl_c_stops_after_the_epoch_and_keeps_the_checkpoint(tmp_path, list_file):
    checkpoint = tmp_path / "c.safetensors"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(list_file), str(LIST_REDUCE), str(checkpoint)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not checkpoint.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert checkpoint.exists(), child.stderr.read() if child.poll() is not None else "no checkpoint in 300 s"
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, err
    assert out.splitlines()[-1] == "interrupted"
    # The checkpoint is whole and resumable: amprun reads it and continues.
    header = json.loads(checkpoint.read_bytes()[8 : 8 + struct.unpack("<Q", checkpoint.read_bytes()[:8])[0]])
    epoch = int(header["__metadata__"]["epoch"])
    assert epoch >= 1 and header["__metadata__"]["status"] == "complete"
    amprun("train", str(LIST_REDUCE), "-D", "hidden=16", "--data", str(list_file), "--save", str(checkpoint),
           "--resume", "--epochs", str(epoch + 1), "--workers", "1")


def test_the_docs_examples_run(monkeypatch):
    """Every ```python block of docs/python.md, in order, in one namespace, from the
    repository's root."""
    text = (ROOT / "docs" / "python.md").read_text()
    blocks = [part.split("```", 1)[0] for part in text.split("```python\n")[1:]]
    assert len(blocks) >= 3
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/python.md", "exec"), namespace)  # noqa: S102 - our own docs


def test_a_tree_lstm_trains_on_sst(tmp_path):
    """docs/python.md's SST recipe, on 64 trees of each split."""
    if not sst_present():
        report_skip("python test_a_tree_lstm_trains_on_sst: SST is not in the cache (`amprun data get sst`)")
    model = amp.compile(EXAMPLES / "tree_lstm_sst.amp", vocab=8000)
    vocab = tmp_path / "sst.vocab"
    best = tmp_path / "best.safetensors"
    metrics = model.train("sst:train", valid="sst:dev", vocab=vocab, lowercase=True, optimizer="adam", lr=0.002,
                          min_update_frequency=25, epochs=2, limit=64, seed=0, keep_best=best, workers=1)
    assert [m["epoch"] for m in metrics if m["split"] == "valid"] == [1, 2]
    summary = amp.load(EXAMPLES / "tree_lstm_sst.amp", best, vocab=8000).eval(
        "sst:test", vocab=vocab, lowercase=True, limit=64)
    assert summary["instances"] == 64 and 0.0 <= summary["accuracy"] <= 1.0


def test_the_learning_curve_example_runs(tmp_path):
    out = tmp_path / "curve.png"
    done = subprocess.run([sys.executable, str(EXAMPLES / "python" / "learning_curve.py"), "--epochs", "2",
                           "--train", "300", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    # A plot with matplotlib, else the curve's two rows.
    assert out.is_file() or len([line for line in done.stdout.splitlines() if line.startswith("    ")]) == 2


def test_a_network_s_rollout_is_ampc_s():
    source = EXAMPLES / "rollout" / "skip_recurrent.amp"
    model = amp.compile(source, network="SkipRecurrent", pattern="streaming", frames=4)
    ampc = ROOT / "target" / "debug" / "ampc"
    for pattern, window in (("streaming", 3), ("sequential", 5)):
        printed = subprocess.run([str(ampc), "rollout", str(source), "--pattern", pattern, "--window", str(window),
                                  "--message-format", "json"], capture_output=True, text=True, check=True).stdout
        assert model.rollout(pattern=pattern, window=window) == json.loads(printed)
    printed = subprocess.run([str(ampc), "rollout", str(source), "--enumerate", "--message-format", "json"],
                             capture_output=True, text=True, check=True).stdout
    assert model.rollout(enumerate=True) == json.loads(printed)
    assert model.rollout()["valid"] is True

    with pytest.raises(amp.UsageError, match="network"):
        amp.compile(LIST_REDUCE).rollout()
    with pytest.raises(amp.CompileError):
        model.rollout(pattern="nosuch->edge=0")
