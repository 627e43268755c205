"""Which form of multi-scale deformable attention the runtimes run fastest: the core of Deformable DETR exported to
ONNX in each candidate form and timed on ONNX Runtime and OpenVINO (CPU, fp32), interleaved, beside vitlab's torch
eager core (embedding_bag, the baseline), with ONNX Runtime's own profile of each form (kernel time per op type):

    grid_sample          one GridSample per level (opset 16+, bilinear, zero padding, align_corners=False, values
                         laid out per head), each level's samples weighted and summed: what vitlab exports
    corner gather        every sample's four corner rows gathered (GatherND) from the (B·S·heads, head_dim) value
                         table, weighted and summed (ReduceSum): what vitlab exported up to graph format 3
    corner gather MatMul the same rows, the weights folded into one batched MatMul instead of Mul + ReduceSum
    grid_sample MatMul   the levels' samples concatenated and weighted by one MatMul

Shapes (each the deformable attention of an encoder layer, where every pixel is a query, or a decoder layer's 300
object queries):

    small        deformable_detr_small at batch 4 of 128² (levels 16², 8², 4², 2²; 8 heads of 16)
    r50          deformable_detr_resnet50 at batch 1 of 512² (levels 64², 32², 16², 8²; 8 heads of 32)
    r50 decoder  the same maps, 300 queries

    python benchmarks/deform_attn_forms.py              # the three shapes, 5 rounds, about 6 minutes on 2 cores
    python benchmarks/deform_attn_forms.py --quick      # the small shape, 1 round

Each form is checked against vitlab's reference (`grid_sample` in torch) on every runtime before it is timed; a
row's ms is the median over rounds (each the median of `--calls` calls), rounds rotate which form goes first, and
"× torch" is the per-round ratio to vitlab's torch core on the same inputs. The sampling points lie in and a
little outside each map (zero padding is exercised). Writes benchmarks/results/deform_attn_forms.{json,md}.
One benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"
POINTS = 4
SHAPES = {  # name: (batch, levels, heads, head_dim, queries or None: one per pixel)
    "small": (4, [(16, 16), (8, 8), (4, 4), (2, 2)], 8, 16, None),
    "r50": (1, [(64, 64), (32, 32), (16, 16), (8, 8)], 8, 32, None),
    "r50 decoder": (1, [(64, 64), (32, 32), (16, 16), (8, 8)], 8, 32, 300),
}
FORMS = ("grid_sample", "corner gather", "corner gather MatMul", "grid_sample MatMul")


def inputs(batch: int, levels: list[tuple[int, int]], heads: int, head_dim: int, queries: int | None, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    length = sum(h * w for h, w in levels)
    queries = queries or length
    value = torch.randn(batch, length, heads, head_dim, generator=generator)
    locations = torch.rand(batch, queries, heads, len(levels), POINTS, 2, generator=generator) * 1.2 - 0.1
    weights = torch.rand(batch, queries, heads, len(levels), POINTS, generator=generator).softmax(-1)
    return value, torch.tensor(levels), locations, weights


class Form(torch.nn.Module):
    """One candidate form as a module of (value, spatial_shapes, locations, weights), the level sizes fixed."""

    def __init__(self, form: str, levels: list[tuple[int, int]]) -> None:
        super().__init__()
        self.form, self.levels = form, levels

    def forward(self, value, spatial_shapes, locations, weights):
        from vitlab.layers.deform_attn import _corner_rows_and_weights, _sample_by_grid

        batch, length, heads, head_dim = value.shape
        queries = locations.shape[1]
        if self.form == "grid_sample":
            return _sample_by_grid(value, self.levels, locations, weights)
        if self.form.startswith("corner"):
            rows, corner_weights = _corner_rows_and_weights(value.shape, spatial_shapes, locations, weights)
            table = value.reshape(batch * length * heads, head_dim)
            if self.form == "corner gather":
                out = (table[rows] * corner_weights[..., None]).sum(1)
            else:  # (N, 1, K) @ (N, K, head_dim)
                out = torch.matmul(corner_weights[:, None, :], table[rows])
            return out.view(batch, queries, heads * head_dim)
        grid, samples = 2 * locations - 1, []
        for level, level_value in enumerate(value.split([h * w for h, w in self.levels], dim=1)):
            height, width = self.levels[level]
            maps = level_value.permute(0, 2, 3, 1).reshape(batch * heads, head_dim, height, width)
            points = grid[:, :, :, level].transpose(1, 2).reshape(batch * heads, queries, POINTS, 2)
            samples.append(torch.nn.functional.grid_sample(maps, points, mode="bilinear", padding_mode="zeros",
                                                           align_corners=False))
        sampled = torch.cat(samples, -1).permute(0, 2, 1, 3)  # (B·heads, Q, head_dim, L·P)
        folded = weights.transpose(1, 2).reshape(batch * heads, queries, -1, 1)
        out = torch.matmul(sampled, folded)  # (B·heads, Q, head_dim, 1)
        return out.view(batch, heads, queries, head_dim).transpose(1, 2).reshape(batch, queries, heads * head_dim)


def export(form: str, levels, example, path: Path) -> Path:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Form(form, levels), example, str(path), input_names=["value", "shapes", "locations",
                                                                               "weights"],
                          output_names=["out"], dynamo=True, opset_version=18, verbose=False)
    return path


def sessions(path: Path, threads: int):
    """(onnxruntime session, OpenVINO compiled model) of the graph at `path`."""
    import onnxruntime
    import openvino

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    ort = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    core = openvino.Core()
    ov = core.compile_model(core.read_model(str(path)), "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                                "INFERENCE_PRECISION_HINT": "f32"})
    return ort, ov


def op_profile(path: Path, feeds: dict, threads: int, calls: int = 3) -> dict[str, float]:
    """ONNX Runtime's kernel time per op type, as shares of the total."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.enable_profiling = True
    options.profile_file_prefix = str(path.with_suffix(""))
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    for _ in range(calls):
        session.run(None, feeds)
    events = json.loads(Path(session.end_profiling()).read_text())
    spent: collections.Counter = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            spent[event["args"]["op_name"]] += event["dur"]
    total = sum(spent.values()) or 1
    return {op: round(time / total, 4) for op, time in spent.most_common(6)}


def measure(name: str, rounds: int, calls: int, threads: int, work: Path) -> tuple[list[dict], dict]:
    from benchmarks.harness.clock import timed
    from vitlab.layers.deform_attn import multi_scale_deformable_attention, multi_scale_deformable_attention_reference

    batch, levels, heads, head_dim, queries = SHAPES[name]
    example = inputs(batch, levels, heads, head_dim, queries)
    reference = multi_scale_deformable_attention_reference(*example).numpy()
    feeds = dict(zip(("value", "shapes", "locations", "weights"), (t.numpy() for t in example)))
    calls_of = {("vitlab torch", "torch"): lambda: multi_scale_deformable_attention(*example)}
    errors, profiles = {}, {}
    for form in FORMS:
        path = export(form, levels, example, work / f"{name.replace(' ', '_')}-{form.replace(' ', '_')}.onnx")
        ort, ov = sessions(path, threads)
        ov_inputs = [feeds[port.any_name] for port in ov.inputs]
        for runtime, call in (("onnxruntime", lambda s=ort: s.run(None, feeds)[0]),
                              ("openvino", lambda m=ov, x=ov_inputs: m(x)[m.outputs[0]])):
            errors[(form, runtime)] = float(abs(call() - reference).max())
            calls_of[(form, runtime)] = call
        profiles[form] = op_profile(path, {k: v for k, v in feeds.items() if k in
                                           {i.name for i in ort.get_inputs()}}, threads)
    order = list(calls_of)
    times: dict = {key: [] for key in order}
    ratios: dict = {key: [] for key in order}
    with torch.inference_mode():
        for call in calls_of.values():
            call()  # warm-up
        for r in range(rounds):
            this_round = {}
            for key in order[r % len(order):] + order[:r % len(order)]:
                this_round[key] = timed(calls_of[key], calls, warmup=0)
            baseline = this_round[("vitlab torch", "torch")]
            for key, seconds in this_round.items():
                times[key].append(seconds)
                ratios[key].append(baseline / seconds)
    rows = [{"shape": name, "form": form, "runtime": runtime, "batch": batch, "queries": queries or
             sum(h * w for h, w in levels), "values": sum(h * w for h, w in levels), "heads": heads,
             "head_dim": head_dim, "ms": 1000 * statistics.median(times[(form, runtime)]),
             "x_torch": statistics.median(ratios[(form, runtime)]),
             "max_abs_diff": errors.get((form, runtime), 0.0), "rounds": rounds} for form, runtime in order]
    for row in rows:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    return rows, profiles


def best_forms(rows: list[dict]) -> dict[str, dict[str, str]]:
    """shape -> runtime -> the form it ran fastest."""
    best: dict[str, dict[str, str]] = {}
    for row in rows:
        if row["runtime"] == "torch":
            continue
        mine = best.setdefault(row["shape"], {})
        current = next((r for r in rows if r["shape"] == row["shape"] and r["runtime"] == row["runtime"]
                        and r["form"] == mine.get(row["runtime"])), None)
        if current is None or row["ms"] < current["ms"]:
            mine[row["runtime"]] = row["form"]
    return best


def table_of(record: dict) -> str:
    from benchmarks.harness import cpu_and_isa

    lines = ["| shape | queries × values | form | runtime | ms | × vitlab torch | max \\|Δ\\| vs reference |",
             "|---|---|---|---|---:|---:|---:|"]
    for r in record["rows"]:
        lines.append(f"| {r['shape']} | {r['batch']} × {r['queries']:,} × {r['values']:,} | {r['form']} | "
                     f"{r['runtime']} | {r['ms']:.2f} | {r['x_torch']:.2f} | {r['max_abs_diff']:.1e} |")
    lines += ["", "Fastest form per runtime: " + "; ".join(
        f"{shape}: " + ", ".join(f"{runtime} {form}" for runtime, form in by.items())
        for shape, by in record["best"].items()), "",
        "ONNX Runtime's profile (share of kernel time, the six largest op types):", "",
        "| shape | form | op types |", "|---|---|---|"]
    for shape, by_form in record["profiles"].items():
        for form, shares in by_form.items():
            lines.append(f"| {shape} | {form} | " + ", ".join(f"{op} {share:.0%}" for op, share in shares.items())
                         + " |")
    host = record["machine"]
    versions = ", ".join(f"{k} {host[k]}" for k in ("torch", "onnxruntime", "openvino") if k in host)
    return "\n".join(lines) + f"\n\n{cpu_and_isa(host)}, {host['threads']} threads, {versions}, fp32\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=5, help="calls per timing (its median is taken)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a smoke run: the small shape, 1 round of 1 call")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--tag", default="deform_attn_forms")
    from benchmarks.harness import add_beside_option, machine, write_results

    add_beside_option(parser)
    args = parser.parse_args(argv)
    shapes, rounds, calls = (["small"], 1, 1) if args.quick else (args.shapes, args.rounds, args.calls)
    torch.set_num_threads(args.threads)
    rows, profiles = [], {}
    with tempfile.TemporaryDirectory(prefix="vitlab-forms-") as work:
        for name in shapes:
            measured, profiles[name] = measure(name, rounds, calls, args.threads, Path(work))
            rows += measured
    import onnxruntime
    import openvino

    host = machine() | {"onnxruntime": onnxruntime.__version__, "openvino": openvino.__version__}
    record = {"machine": host, "rows": rows, "best": best_forms(rows), "profiles": profiles}
    write_results(Path(args.out), args.tag, record, table_of(record), beside=args.beside)
    return record


if __name__ == "__main__":
    main()
