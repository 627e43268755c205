"""Results as markdown tables (speed with ratios, costs, scaling, attention paths) and as files."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable
from pathlib import Path

from .host import provenance
from .workloads import CPU_SETTINGS


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"


def _ratio(row: dict, key: str, ref: str) -> str:
    value = row.get(f"{key}_vs_{ref}")
    if value is None:
        return "—"
    low, high = row[f"{key}_vs_{ref}_range"]
    text = f"{value:.2f} ({low:.2f}–{high:.2f})"
    eager = row.get(f"{key}_vs_{ref}_eager")
    return text + (f"; vs eager {ref}: {eager:.2f}" if eager is not None else "")


def speed_table(rows: list[dict]) -> str:
    """Markdown: one line per workload, metric and contender, with ratios vitlab/timm and vitlab/HF
    (median of the per-round ratios, and their range over the rounds)."""
    lines = ["| model | metric | contender | value | spread | vitlab/timm | vitlab/HF |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    metrics = [k for k in rows[0] if k.endswith("_img_s")] if rows else []
    for workload in dict.fromkeys(r["workload"] for r in rows):
        group = [r for r in rows if r["workload"] == workload]
        keys = list(dict.fromkeys(k for r in group for k in r if k.endswith("_img_s")))
        for key in keys or metrics:
            for row in group:
                if key not in row:
                    continue
                model = row["model"] if row["model"] == workload else f"{workload} ({row['model']})"
                lines.append(f"| {model} | {key.removesuffix('_img_s')} img/s | {row['label']} | {_fmt(row[key])} | "
                             f"{100 * row[f'{key}_spread']:.0f} % | {_ratio(row, key, 'timm')} | "
                             f"{_ratio(row, key, 'hf')} |")
    return "\n".join(lines)


def cost_table(rows: list[dict]) -> str:
    """Markdown: FLOPs, achieved GFLOP/s and share of the matmul peak, peak memory per contender."""
    lines = ["| model | contender | GFLOPs/img | infer GFLOP/s | infer share of peak | train share of peak | "
             "RSS after imports MiB | infer peak MiB | train peak MiB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        if row.get("compiled"):
            continue
        share = (f"{100 * row['infer_share_of_peak']:.0f} %" if "infer_share_of_peak" in row else "—")
        train = (f"{100 * row['train_share_of_peak']:.0f} %" if "train_share_of_peak" in row else "—")
        lines.append(f"| {row['model']} | {row['label']} | {_fmt(row.get('gflops_per_image'))} | "
                     f"{_fmt(row.get('infer_gflop_s'))} | {share} | {train} | {_fmt(row.get('rss_baseline_mib'), 4)} | "
                     f"{_fmt(row.get('infer_peak_mib'), 4)} | {_fmt(row.get('train_peak_mib'), 4)} |")
    return "\n".join(lines)


def scaling_table(rows: list[dict]) -> str:
    lines = ["| model | image | tokens | ms / forward | GFLOPs/img | attention core ms (fused / explicit) | "
             "attention share of time | attention share of FLOPs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['model']} b{r['batch']} | {r['img_size']} | {r['tokens']} | {r['ms_per_forward']:.1f} | "
                     f"{r['gflops_per_image']:.1f} | {r['attn_core_ms_fused']:.1f} / {r['attn_core_ms_explicit']:.1f}"
                     f" | {100 * r['attn_time_share']:.0f} % | {100 * r['attn_flop_share']:.0f} % |")
    return "\n".join(lines)


def attention_table(rows: list[dict]) -> str:
    lines = ["| model | (B, heads, N, head_dim) | mode | fused ms | explicit ms | explicit / fused |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['model']} | {tuple(r['shape'])} | {r['mode']} | {r['fused_ms']:.2f} | "
                     f"{r['explicit_ms']:.2f} | {r['explicit_over_fused']:.2f} |")
    return "\n".join(lines)


def stamped(record: dict | list, beside: str | None = "nothing", device: str | None = None) -> dict:
    """`record` with its provenance: the keys of `provenance(beside=beside)` it lacks (command, commit, beside,
    machine), and in a machine it records itself the keys of `machine()` it lacks (so it has `cpu_capability`).
    A list becomes {"rows": list, **provenance}."""
    record = {"rows": record} if isinstance(record, list) else dict(record)
    own = record.get("machine")
    if device is None:
        device = own.get("device", "cpu") if isinstance(own, dict) else "cpu"
    where = provenance(device, beside)
    if isinstance(own, dict):
        record["machine"] = {**own, **{k: v for k, v in where["machine"].items() if k not in own}}
    return {**record, **{k: v for k, v in where.items() if k not in record}}


def _replace(path: Path, text: str) -> None:
    """`text` into `path` atomically: a temporary file in the same folder, then os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_table(path: Path, markdown: str) -> None:
    """A rendered results table (the .md beside a results file), written atomically like the JSON it renders."""
    _replace(Path(path), markdown)


def write_json(path: Path, record: dict | list, beside: str | None = "nothing", indent: int = 2,
               device: str | None = None, default: Callable | None = None) -> dict:
    """A results file, written atomically and stamped with its provenance (`stamped`); returns what it wrote.
    `default` is json.dumps's, for values JSON has no type for."""
    record = stamped(record, beside, device)
    _replace(Path(path), json.dumps(record, indent=indent, default=default) + "\n")
    return record


def write_results(folder: Path, tag: str, result: dict | list, markdown: str, beside: str | None = "nothing",
                  device: str | None = None) -> dict:
    """A benchmark's results as <folder>/<tag>.json (stamped with its provenance) and <tag>.md, both written
    atomically, and the markdown on stdout; returns the record written."""
    folder = Path(folder)
    record = write_json(folder / f"{tag}.json", result, beside, device=device)
    _replace(folder / f"{tag}.md", markdown)
    print(markdown)
    return record


def report(result: dict) -> str:
    m = result["machine"]
    where = m.get("gpu") or f"{m['cpu']}, {m['cpus']} cores ({m['cpu_capability']})"
    head = (f"Machine: {where}, torch {m['torch']}, timm {m.get('timm', '—')}, transformers "
            f"{m.get('transformers', '—')}; {m['threads']} threads; measured fp32 torch.mm peak "
            f"{m['matmul_peak_gflops']:.0f} GFLOP/s. {result['settings']['rounds']} interleaved rounds; value = median "
            f"over rounds, spread = max/min − 1 over rounds, ratio = median of per-round ratios (range). "
            f"CPU process settings: {CPU_SETTINGS[result['settings'].get('cpu_settings', 'default')]}, the same for "
            f"every library.")
    parts = [head, "", speed_table(result["rows"]), "", cost_table(result["rows"])]
    if result.get("scaling"):
        parts += ["", scaling_table(result["scaling"])]
    if result.get("attention_paths"):
        parts += ["", attention_table(result["attention_paths"])]
    if result.get("notes"):
        parts += [""] + [f"- {note}" for note in result["notes"]]
    return "\n".join(parts) + "\n"
