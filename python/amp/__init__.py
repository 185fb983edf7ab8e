"""Amp from Python: compile, train, run and differentiate Amp models, numpy in and out.

Every method runs the same code as the command line: the options of ``Model.train`` are
``amprun train``'s flags with ``_`` for ``-`` (``min_update_frequency=8`` is
``--min-update-frequency 8``), checked by amprun's own parser, and training, inference,
evaluation and gradients are the ``amprun`` library's functions. docs/python.md is the
reference.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Mapping, NoReturn, Optional, Sequence, Tuple, Union

import numpy as np

from . import _amp

__all__ = [
    "AmpError",
    "CompileError",
    "DataError",
    "Diagnostic",
    "Model",
    "RunError",
    "UsageError",
    "compile",
    "load",
]

PathLike = Union[str, "os.PathLike[str]"]
#: What ``data`` may be: a file amprun reads (any of its formats), a data set's name
#: (``"digits"``, ``"sst:train"``), or instances as dicts shaped like the model's input
#: record.
Data = Union[PathLike, Iterable[Mapping[str, Any]]]


class AmpError(Exception):
    """Why an Amp call stopped. ``exit_code`` is the one ``amprun`` exits with."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Diagnostic:
    """One of the compiler's diagnostics, as ``ampc check`` prints it in ``rendered``."""

    code: str
    severity: str
    message: str
    file: str
    line: int
    column: int
    rendered: str


class CompileError(AmpError):
    """The model does not compile; ``diagnostics`` says why (errors first)."""

    def __init__(self, diagnostics: List[Diagnostic], exit_code: int) -> None:
        super().__init__("".join(d.rendered for d in diagnostics).rstrip("\n"), exit_code)
        self.diagnostics = diagnostics


class DataError(AmpError, ValueError):
    """A bad instance. ``index`` is its position among the instances given in memory
    (``None`` for a file, whose ``line`` is given); ``field`` is the field at fault."""

    def __init__(self, message: str, exit_code: int, *, index: Optional[int], field: Optional[str],
                 file: Optional[str], line: Optional[int]) -> None:
        super().__init__(message, exit_code)
        self.index = index
        self.field = field
        self.file = file
        self.line = line


class UsageError(AmpError, ValueError):
    """A bad option or value, or a file that cannot be read or written."""


class RunError(AmpError):
    """The run failed: the model on an instance, a NaN loss, a parameter file that does
    not fit, or a worker."""


# The names in-memory instances go by in amprun's messages (python/src/lib.rs).
_IN_MEMORY = {"data", "valid"}


def _diagnostic(value: Mapping[str, Any]) -> Diagnostic:
    start = value.get("start") or {}
    return Diagnostic(
        code=value.get("code", ""),
        severity=value.get("severity", ""),
        message=value.get("message", ""),
        file=value.get("file", ""),
        line=int(start.get("line", 0)),
        column=int(start.get("column", 0)),
        rendered=value.get("rendered", ""),
    )


def _raise(failure: BaseException) -> NoReturn:
    kind, message, exit_code, detail = failure.args
    detail = json.loads(detail)
    if kind == "compile":
        raise CompileError([_diagnostic(d) for d in detail], exit_code) from None
    if kind == "data":
        file, line = detail.get("file"), detail.get("line")
        index = line - 1 if file in _IN_MEMORY and line is not None else None
        if index is not None:
            message = f"{file}[{index}]: {detail.get('what', message)}"
        raise DataError(message, exit_code, index=index, field=detail.get("field"), file=file,
                        line=line) from None
    if kind == "usage":
        raise UsageError(message, exit_code) from None
    raise RunError(message, exit_code) from None


def _call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return function(*args, **kwargs)
    except _amp.Failure as failure:
        _raise(failure)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _jsonl(instances: Iterable[Mapping[str, Any]], name: str) -> bytes:
    """Instances as JSON Lines, one per line, for amprun's JSON Lines reader."""
    lines = []
    for index, instance in enumerate(instances):
        if not isinstance(instance, Mapping):
            raise DataError(f"{name}[{index}]: an instance is a dict, not {type(instance).__name__}", 1,
                            index=index, field=None, file=name, line=index + 1)
        try:
            lines.append(json.dumps(instance, default=_json_default, allow_nan=False))
        except (TypeError, ValueError) as error:
            raise DataError(f"{name}[{index}]: {error}", 1, index=index, field=None, file=name,
                            line=index + 1) from None
    return "\n".join(lines).encode()


def _data(data: Data, flag: str, name: str) -> Tuple[List[str], Optional[bytes]]:
    """The flag for ``data`` and, for instances in memory, their JSON Lines."""
    if isinstance(data, (str, os.PathLike)):
        return [flag, os.fspath(data)], None
    if isinstance(data, Mapping):
        raise TypeError(f"`{name}` is a path or an iterable of instances (dicts), not one dict")
    return [flag, name], _jsonl(data, name)


def _flags(options: Mapping[str, Any]) -> List[str]:
    """amprun's flags for keyword options: ``name=value`` is ``--name value`` (``_`` for
    ``-``); True is the bare flag, False and None leave it out; a list repeats the flag; a
    dict gives ``--name KEY=VALUE`` per item."""
    argv: List[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, Mapping):
            for item, setting in value.items():
                argv += [flag, f"{item}={setting}"]
        elif isinstance(value, (list, tuple)):
            for item in value:
                argv += [flag, os.fspath(item) if isinstance(item, os.PathLike) else str(item)]
        else:
            argv += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return argv


def _is_path(source: PathLike) -> bool:
    if isinstance(source, os.PathLike):
        return True
    return "\n" not in source and source.endswith((".amp", ".ampg"))


class Model:
    """A compiled model and its parameters. A model that was never trained or given
    parameters starts training as ``amprun train`` does (``seed``), and has the
    parameters of ``--seed 0`` when asked for them first."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def name(self) -> str:
        """The model's name."""
        return str(self._native.name)

    @property
    def warnings(self) -> List[Diagnostic]:
        """The compiler's warnings."""
        return [_diagnostic(d) for d in json.loads(self._native.warnings)]

    def __repr__(self) -> str:
        return f"<amp.Model {self.name} from {self._native.path}>"

    def train(self, data: Data, valid: Optional[Data] = None, *, epochs: int = 1,
              callback: Optional[Callable[[Dict[str, Any]], Any]] = None, **options: Any) -> List[Dict[str, Any]]:
        """Trains as ``amprun train`` does, from the model's parameters when it has them;
        the model keeps the trained parameters. ``options`` are amprun's flags
        (``optimizer="adam", lr=0.003, min_update_frequency=8, workers=2,
        save="ckpt.safetensors"``...). ``callback`` gets each epoch's training and
        validation metrics as a dict, on the calling thread. Ctrl-C (or an exception from
        the callback) stops training after the epoch in progress, keeping its parameters
        and checkpoint, and is raised then. Returns every metrics object of the run (the
        lines of ``--metrics``)."""
        argv = ["train", self._native.path, "--epochs", str(epochs)]
        flags, train_lines = _data(data, "--data", "data")
        argv += flags
        valid_lines = None
        if valid is not None:
            flags, valid_lines = _data(valid, "--valid", "valid")
            argv += flags
        argv += _flags(options)
        hear = None
        if callback is not None:
            def hear(text: str) -> None:
                report = json.loads(text)
                if report.get("split") in ("train", "valid"):
                    callback(report)
        metrics, _ = _call(self._native.train, argv, train_lines, valid_lines, hear)
        return list(json.loads(metrics))

    def infer(self, instances: Data, **options: Any) -> Union[np.ndarray, List[np.ndarray]]:
        """The model's output for each instance (``amprun infer``), labels optional: a 2-D
        float32 array with a row per instance, or a list of 1-D arrays when the outputs'
        lengths differ."""
        argv = ["infer", self._native.path, "--params", "<memory>"]
        flags, lines = _data(instances, "--data", "data")
        return _call(self._native.infer, argv + flags + _flags(options), lines)

    def eval(self, data: Data, **options: Any) -> Dict[str, Any]:
        """Loss, accuracy (for a classifier), instances and instances/s of the model's
        parameters on ``data`` (``amprun eval``)."""
        argv = ["eval", self._native.path, "--params", "<memory>"]
        flags, lines = _data(data, "--data", "data")
        summary = json.loads(_call(self._native.evaluate, argv + flags + _flags(options), lines))
        summary.pop("split", None)
        return dict(summary)

    def grad(self, instances: Data, **options: Any) -> Dict[str, np.ndarray]:
        """The mean gradient of the loss over the instances, name to array
        (``amprun grad``)."""
        argv = ["grad", self._native.path, "--params", "<memory>", "--out", "<memory>"]
        flags, lines = _data(instances, "--data", "data")
        grads, _loss = _call(self._native.grad, argv + flags + _flags(options), lines)
        return dict(grads)

    def parameters(self) -> Dict[str, np.ndarray]:
        """The parameters, name to a float32 array (PyTorch's ``state_dict`` names and
        shapes): copies, changing them changes nothing until ``load_parameters``."""
        return dict(_call(self._native.parameters))

    def load_parameters(self, parameters: Mapping[str, Any]) -> None:
        """Replaces every parameter; ``parameters`` names each of the model's, in its shape
        (anything ``numpy.asarray`` takes: arrays, lists, CPU tensors)."""
        arrays = {name: np.ascontiguousarray(np.asarray(value), dtype=np.float32)
                  for name, value in parameters.items()}
        _call(self._native.load_parameters, arrays)

    def save(self, path: PathLike) -> None:
        """Writes the parameters to a safetensors file (``amprun eval --params`` reads it;
        so does ``safetensors.torch.load_file``)."""
        _call(self._native.save, os.fspath(path))

    def graph(self) -> str:
        """The lowered dataflow graph in Amp's IR text (``ampc compile --emit ir``)."""
        return str(self._native.graph())

    def rollout(self, pattern: Optional[str] = None, window: int = 1, enumerate: bool = False) -> Dict[str, Any]:
        """For a model compiled from a ``network``: ``ampc rollout --message-format json``'s
        analysis. Under ``pattern`` (``"streaming"``, ``"sequential"`` or edges such as
        ``"a->b=1,b->b=0"``; default the one compiled with) its ``tableau`` (the update
        steps until frame i of each node is known, frames 0 to ``window``) and its
        ``inference_factor``; with ``enumerate=True`` every valid pattern instead."""
        return dict(json.loads(_call(self._native.rollout, pattern, window, enumerate)))

    def plan(self, workers: Optional[int] = None, **options: Any) -> Dict[str, Any]:
        """The placement ``train`` would follow with these options: ``summary`` (the line
        amprun prints), ``copies`` and the ``plan`` (per-node workers, predicted
        utilization and speedup)."""
        argv = ["train", self._native.path, "--data", "data"] + _flags(dict(options, workers=workers))
        return dict(json.loads(_call(self._native.plan, argv)))


def compile(source: PathLike, *, model: Optional[str] = None, network: Optional[str] = None,
            pattern: Optional[str] = None, frames: Optional[int] = None, per_element_maps: bool = False,
            **dims: int) -> Model:
    """Compiles an Amp model: ``source`` is a path (``.amp``, or an ``.ampg`` graph from
    ``ampc compile``) or Amp source text (its imports are read beside the working folder).
    ``dims`` override constants, as ``-D name=value`` does (``hidden=32``). ``model`` picks
    one of several models; ``network`` (with ``pattern`` and ``frames``) a network rolled
    out over frames. Raises ``CompileError`` with the diagnostics."""
    defines = [(name, int(value)) for name, value in dims.items()]
    if _is_path(source):
        path, text = os.fspath(source), None
    else:
        path, text = "<string>.amp", str(source)
    native = _call(_amp.compile, path, text, defines, model, network, pattern, frames, per_element_maps)
    return Model(native)


def load(model: PathLike, parameters: PathLike, **compile_options: Any) -> Model:
    """Compiles ``model`` and loads its parameters from a safetensors file (an amprun
    checkpoint or one written by ``Model.save`` or PyTorch)."""
    compiled = compile(model, **compile_options)
    _call(compiled._native.load_parameter_file, os.fspath(parameters))
    return compiled
