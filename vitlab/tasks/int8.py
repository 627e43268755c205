"""A run's model in int8, with its answers measured: `vitlab quantize RUN_DIR`.

    quantize_run(run_dir, backend)   calibrate on the run's validation data (or other data in its format), write
                                     an int8 graph for each graph the evaluation reaches, score both models on the
                                     validation data, and say where int8 costs more than the task allows

The evaluation is the task's own (`evaluate_run` on the validation part), run three ways: on the fp32 model (the
same pass records the calibration inputs: what the model is called with, after the task's own preprocessing), on
the int8 graphs, and, inside that pass, the fp32 model again on each batch, for the agreement of the two
(`Task.int8_agreement`: top-1 for a classifier). Each task states what int8 may cost (`Task.int8_guard`: the
largest drop of each of its figures, and the least agreement); beyond it the answer says so and names what to keep
in fp32.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from pathlib import Path
from typing import Any

from torch import nn

from ..atomic import write_json
from ..runtime.calibration import calibration_recorder
from ..runtime.quantize import DEFAULT_SAMPLES, cpu_int8_isa


def quantize_run(run_dir: str | Path, backend: str = "onnxruntime", calibration: str | None = None,
                 samples: int = DEFAULT_SAMPLES, out: str | Path | None = None, weights: str | None = None,
                 keep_fp32: list[str] | None = None, dynamic: bool = False) -> dict[str, Any]:
    """Quantize a run's model (`weights`; by default the ones it selected, best else last) for `backend` and measure
    what it costs on the validation data; the report is returned and written as JSON beside the graphs
    (`RUN_DIR/runtime/`, or `out`), where `--precision int8` finds them. `calibration`: other data in the run's
    format (as `vitlab eval --data` takes); `samples`: calibration inputs (images, or a restorer's tiles) per graph;
    `keep_fp32`: module paths (fnmatch patterns, 'blocks.11.*') kept in fp32 beside the family's own; `dynamic`: no
    calibration (onnxruntime)."""
    from ..runtime import runtime_model
    from .sources import open_source

    source = open_source(run_dir, weights=weights)
    task, saved, model = source.task, source.saved, source.model
    if task.python_loop:
        raise ValueError(f"a {task.name} run cannot be quantized: {task.python_loop}")
    named = source.run_dir is None
    if named and not calibration:
        raise ValueError(f"--calibration DIR: {source.name} is a model by name, with no data of its own; give images "
                         f"in the format `vitlab eval {source.name} --data` takes (its classes' names)")
    cache_dir, cache_name = source.runtime_cache
    cache_dir = Path(out) if out else cache_dir
    evaluate = _evaluation(task, saved, source.run_dir or source.name)
    measured = {"data": calibration} if named else {}  # a name's figures: on the calibration data, its only data

    recorder = calibration_recorder(model, samples, cache_dir, cache_name, saved.get("data", {}).get("preprocessing"))
    if calibration:
        evaluate(recorder.as_model(), data=calibration)
        reference = evaluate(runtime_model(model, "torch", "fp32").as_model(), **measured)
    else:
        reference = evaluate(recorder.as_model())  # the fp32 figures, and the calibration inputs
    int8, written = recorder.write_int8(backend, {pattern: "asked for (--keep-fp32)" for pattern in keep_fp32 or ()},
                                        dynamic)
    agreement = _Agreement(int8, runtime_model(model, "torch", "fp32"), task)
    quantized = evaluate(agreement.as_model(), **measured)
    report = {
        "run": str(source.run_dir or source.name), "weights": source.weights, "backend": backend, "isa": cpu_int8_isa(),
        "calibration": "dynamic" if dynamic else (calibration or "the run's validation data"),
        "measured_on": calibration if named else "the run's validation data",
        "graphs": written, "fp32": _figures(reference, task.int8_guard), "int8": _figures(quantized, task.int8_guard),
        **agreement.result(),
    }
    report["checks"] = guard(task, report)
    report["warnings"] = [check["says"] for check in report["checks"] if not check["ok"]]
    if report["warnings"]:
        report["advice"] = _advice(written)
    path = cache_dir / f"{cache_name}-int8-{backend}.json"
    write_json(path, report)
    report["report"] = str(path)
    return report


def _evaluation(task: Any, saved: dict[str, Any], run_dir: Path):
    """task.evaluate_run on the validation part, writing no pictures; data=...: other data in the run's format."""
    fields = {field.name for field in dataclasses.fields(task.EvalOptions)}
    quiet = {"plot": False} if "plot" in fields else {}

    def evaluate(model: nn.Module, **data: Any) -> dict[str, Any]:
        if data and "data" not in fields:
            raise ValueError(f"--calibration: `vitlab eval` of a {task.name} run reads no other data; calibrate on "
                             f"the run's own validation data (leave --calibration out)")
        return task.evaluate_run(model, saved, run_dir, split="val", **quiet, **data)

    return evaluate


class _Agreement:
    """The int8 runtime, called in the model's place, with the fp32 model run on each same batch beside it: the
    task's agreement of the two (`Task.int8_agreement`) summed over the calls."""

    def __init__(self, int8: Any, fp32: Any, task: Any) -> None:
        self.int8, self.fp32, self.task = int8, fp32, task
        self.kind, self.method, self.input_names = int8.kind, int8.method, int8.input_names
        self.agreeing, self.count = 0.0, 0

    def __call__(self, *inputs: Any, task: int | str | None = None) -> Any:
        quantized = self.int8(*inputs, task=task)
        measured = self.task.int8_agreement(self.fp32(*inputs, task=task), quantized)
        if measured is not None:
            self.agreeing += float(measured[0])
            self.count += int(measured[1])
        return quantized

    def as_model(self) -> nn.Module:
        from ..runtime.wrapper import runtime_module

        return runtime_module(self.int8.model, self)

    def result(self) -> dict[str, Any]:
        return {"agreement": self.agreeing / self.count, "compared": self.count} if self.count else {}


def _figures(result: dict[str, Any], guarded: dict[str, float]) -> dict[str, float]:
    """The guarded figures of an evaluation, by dotted key ('degradations.sr2.psnr_y'); a `*` in a key matches every
    key at its level."""
    flat = _flatten(result)
    return {key: value for pattern in guarded for key, value in flat.items() if fnmatch.fnmatchcase(key, pattern)}


def _flatten(result: Any, prefix: str = "") -> dict[str, float]:
    if isinstance(result, dict):
        flat: dict[str, float] = {}
        for key, value in result.items():
            flat |= _flatten(value, f"{prefix}{key}.")
        return flat
    if isinstance(result, int | float) and not isinstance(result, bool):
        return {prefix[:-1]: float(result)}
    return {}


def guard(task: Any, report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each guarded figure's change from fp32 to int8 against what the task allows (`Task.int8_guard`), and the
    agreement against `Task.int8_agreement_floor`."""
    checks = []
    for pattern, allowed in task.int8_guard.items():
        for key in sorted(k for k in report["fp32"] if fnmatch.fnmatchcase(k, pattern)):
            change = report["int8"][key] - report["fp32"][key]
            ok = change >= -allowed
            checks.append({"figure": key, "fp32": report["fp32"][key], "int8": report["int8"][key], "change": change,
                           "allowed_drop": allowed, "ok": ok,
                           "says": f"{key} {report['fp32'][key]:.4f} -> {report['int8'][key]:.4f} in int8 "
                                   f"({change:+.4f}; {'within' if ok else 'beyond'} the allowed drop of {allowed})"})
    if "agreement" in report:
        floor, agreement = task.int8_agreement_floor, report["agreement"]
        ok = agreement >= floor
        checks.append({"figure": "agreement", "int8": agreement, "floor": floor, "ok": ok,
                       "says": f"int8 agrees with fp32 on {100 * agreement:.2f} % of {report['compared']} "
                               f"{task.int8_agreement_of} ({'at or above' if ok else 'below'} {100 * floor:.0f} %)"})
    return checks


def _advice(written: list[dict[str, Any]]) -> str:
    kept = sorted({pattern for graph in written for pattern in graph["fp32"]})
    already = f" (kept already: {', '.join(kept)})" if kept else ""
    return ("keep more of the model in fp32: `vitlab quantize RUN_DIR --keep-fp32 PATTERN` with module paths such as "
            f"'head', 'blocks.0.*' or 'blocks.*.mlp.fc2', the first and last layers first{already}; or try the other "
            "backend")


def format_report(report: dict[str, Any]) -> str:
    lines = [f"int8 on {report['backend']} (CPU int8 dot product: {report['isa']}), calibrated on "
             f"{report['calibration']}:"]
    for graph in report["graphs"]:
        kept = f"; kept in fp32: {', '.join(f'{p} ({why})' for p, why in graph['fp32'].items())}" if graph["fp32"] \
            else ""
        lines.append(f"  wrote {graph['path']} ({graph['samples']} calibration inputs{kept})")
    lines += [f"  {check['says']}" for check in report["checks"]]
    if report["warnings"]:
        lines.append(f"warning: int8 costs more than this task allows; {report['advice']}")
    lines.append(f"report: {report['report']}")
    return "\n".join(lines)
