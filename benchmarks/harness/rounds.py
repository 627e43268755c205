"""The measurement: contenders interleaved over rounds, rotated so that each goes first once, medians over rounds
and per-round ratios to timm and HF; `run_speed` runs every workload and the attention studies."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch

from vitlab.engine.speed import (
    autocast,
    bf16_supported,
    bf16_unsupported_reason,
    flush_denormals,
    freed_memory_kept,
    maybe_compile,
    tune_process,
)
from vitlab.models.registry import get_config

from .attention import attention_paths, scaling
from .clock import timed
from .costs import achieved_share, flops_per_image, matmul_peak_gflops, peak_memory
from .host import machine
from .workloads import (
    CPU_SETTINGS,
    Contender,
    Settings,
    Workload,
    build,
    comparable,
    contenders,
    image_shape,
    train_step,
)


def repeat_count(seconds: float, settings: Settings) -> int:
    """How many timed calls fit the per-row time target, within [min_repeats, repeats]."""
    return max(settings.min_repeats, min(settings.repeats, math.ceil(settings.target_s / max(seconds, 1e-6))))


def measure(workload: Workload, settings: Settings | None = None, progress: Callable[[str], None] = print) -> dict:
    """Interleave the contenders `settings.rounds` times. Returns {"rows": [...], "peak_gflops": [...]}: one row
    per contender with medians over rounds of images/s, per-round spreads and ratios to timm and HF."""
    settings = settings or Settings()
    device = settings.device
    torch.manual_seed(0)
    shape = image_shape(comparable(workload.name))
    num_classes = get_config(workload.name).num_classes
    entries = contenders(workload, settings)
    models, optimizers = {}, {}
    for c in entries:
        eager = models.get(c.label.removesuffix("+compile")) if c.compiled else None
        models[c.label] = maybe_compile(eager if eager is not None else build(c.library, c.model_name).to(device),
                                        c.compiled)
    use_bf16 = settings.bf16 and bf16_supported(device)
    inputs = {b: torch.randn(b, *shape, device=device) for b in (1, workload.infer_batch, workload.train_batch)}
    labels = torch.randint(0, num_classes, (workload.train_batch,), device=device)
    metrics = [(f"infer_b{b}_img_s", b, False) for b in (1, workload.infer_batch)]
    if use_bf16:
        metrics.append((f"infer_b{workload.infer_batch}_bf16_img_s", workload.infer_batch, True))
    samples: dict[tuple[str, str], list[float]] = {}
    calls: dict[tuple[str, str], int] = {}

    def seconds_per_call(label: str, key: str, fn: Callable[[], object]) -> float:
        if (label, key) not in calls:  # first round: a warm-up call (which also compiles), a call that sizes the count
            calls[(label, key)] = repeat_count(timed(fn, 1, warmup=1, device=device), settings)
        return timed(fn, calls[(label, key)], warmup=0, device=device)

    peaks = []
    for round_index in range(settings.rounds):
        peaks.append(matmul_peak_gflops(settings.peak_n, device=device))
        shift = round_index % len(entries)  # rotate who goes first: the first of a round pays for cache warm-up
        for c in entries[shift:] + entries[:shift]:
            model = models[c.label].eval()
            for key, batch, bf16 in metrics:
                x = inputs[batch]
                with torch.inference_mode(), autocast(device, torch.bfloat16 if bf16 else None):
                    seconds = seconds_per_call(c.label, key, lambda m=model, x=x: m(x))
                samples.setdefault((c.label, key), []).append(batch / seconds)
            model.train()
            optimizer = optimizers.setdefault(c.label, torch.optim.AdamW(model.parameters(), lr=1e-4))
            seconds = seconds_per_call(c.label, "train_img_s", lambda m=model, o=optimizer: train_step(
                m, o, inputs[workload.train_batch], labels))
            samples.setdefault((c.label, "train_img_s"), []).append(workload.train_batch / seconds)
        progress(f"  {workload.name}: round {round_index + 1}/{settings.rounds} done")
    rows = summarise(workload, entries, samples, calls, settings)
    for c in entries:
        if not c.compiled:
            flops = flops_per_image(models[c.label].eval(), inputs[1])
            for row in rows:
                if row["model"] == c.model_name and row["library"] == c.library:
                    row["gflops_per_image"] = flops / 1e9
    if settings.memory:
        for row in rows:
            if not row["label"].endswith("+compile"):
                row.update(peak_memory(row["library"], row["model"], workload.infer_batch, workload.train_batch,
                                       device, settings.cpu_settings == "vitlab"))
    if not use_bf16:
        settings.notes.append(f"bf16 autocast not measured: {bf16_unsupported_reason(device)}")
    return {"rows": rows, "peak_gflops": peaks}


def summarise(workload: Workload, entries: list[Contender], samples: dict, calls: dict, settings: Settings) -> list:
    """Median over rounds per metric, the spread of rounds (max/min - 1), and ratios to timm and HF computed
    round by round (each pairs measurements seconds apart) and then taken as a median."""
    rows = []
    for c in entries:
        row = {"label": c.label, "library": c.library, "model": c.model_name, "workload": workload.name,
               "compiled": c.compiled, "infer_batch": workload.infer_batch, "train_batch": workload.train_batch,
               "rounds": settings.rounds}
        for (label, key), values in samples.items():
            if label != c.label:
                continue
            row[key] = statistics.median(values)
            row[f"{key}_spread"] = max(values) / min(values) - 1
            row[f"{key}_calls"] = calls[(label, key)]
            if c.label not in ("vitlab", "vitlab+compile"):
                continue  # ratios only between the same model in each library
            suffix = "+compile" if c.compiled else ""
            # compiled vitlab against compiled timm/HF (the fair ratio), and against eager timm/HF ("_eager")
            for ref, name in [(r + suffix, r) for r in ("timm", "hf")] + (
                    [(r, f"{r}_eager") for r in ("timm", "hf")] if c.compiled else []):
                ref_values = samples.get((ref, key))
                if ref_values:
                    per_round = [v / r for v, r in zip(values, ref_values)]
                    row[f"{key}_vs_{name}"] = statistics.median(per_round)
                    row[f"{key}_vs_{name}_range"] = [min(per_round), max(per_round)]
        rows.append(row)
    return rows


def run_speed(workloads: list[Workload], settings: Settings, scaling_model: str | None = None,
              scaling_sizes: tuple[int, ...] = (224, 384, 512), progress: Callable[[str], None] = print,
              attention: bool = True) -> dict:
    """Every measurement of the speed benchmark (rows, machine, settings, scaling, attention paths) as one JSON-able
    dict; `report` turns it into markdown."""
    rows, peaks = [], []
    start = time.perf_counter()
    if settings.cpu_settings not in CPU_SETTINGS:
        raise ValueError(f"cpu_settings must be one of {', '.join(CPU_SETTINGS)}, got {settings.cpu_settings!r}")
    if settings.cpu_settings == "vitlab":
        tune_process()
    elif freed_memory_kept():
        raise ValueError("cpu_settings='default' asked for, but this process already keeps freed memory (it cannot "
                         "be undone): run the benchmark in a fresh process")
    else:
        flush_denormals(False)
    for workload in workloads:
        progress(f"measuring {workload.name} ({', '.join(c.label for c in contenders(workload, settings))})")
        result = measure(workload, settings, progress)
        rows += result["rows"]
        peaks += result["peak_gflops"]
    peak = statistics.median(peaks) if peaks else matmul_peak_gflops(settings.peak_n, device=settings.device)
    for row in rows:
        row.update(achieved_share(row, peak))
    out = {"machine": {**machine(settings.device), "matmul_peak_gflops": peak, "matmul_peak_samples": peaks},
           "settings": {"repeats": settings.repeats, "min_repeats": settings.min_repeats,
                        "target_s": settings.target_s, "rounds": settings.rounds, "compile": settings.compile,
                        "cpu_settings": settings.cpu_settings},
           "notes": list(dict.fromkeys(settings.notes)), "rows": rows}
    if scaling_model:
        progress(f"scaling {scaling_model} over {scaling_sizes}")
        out["scaling"] = scaling(scaling_model, scaling_sizes, repeats=settings.repeats, rounds=settings.rounds,
                                 device=settings.device)
    if attention:
        progress("attention paths: fused against explicit")
        out["attention_paths"] = attention_paths(workloads, settings.repeats, settings.rounds, settings.device)
    out["seconds"] = time.perf_counter() - start
    return out
