"""Why vitlab's ViT ONNX graph looks as it does: one ViT-S/16 (random weights) exported four ways and timed
interleaved on onnxruntime (CPU), in fp32 and in int8 (static, calibrated on random images as `vitlab quantize`
does), images/s at each batch:

    optimizer            onnxruntime's transformer optimizer as it comes: the residual sum and LayerNorm fused
                         (SkipLayerNormalization), attention written out as the exporter leaves it
    + one-op attention   each self-attention in one MultiHeadAttention node
    + LayerNorm apart    no SkipLayerNormalization: an Add and a LayerNormalization
    vitlab               both (what `vitlab export` and the runtimes write)

and the two LayerNorm forms alone on one block's tokens (B·197 × 384), milliseconds per call; and where vitlab's
graph spends its time at the largest batch, by onnxruntime's own profile (kernel time per op type, fp32 and int8):
the matrix products against everything else.

    python benchmarks/onnx_fusions.py              # ViT-S/16 at batch 32 and 1, about 8 minutes on 2 cores
    python benchmarks/onnx_fusions.py --quick      # a tiny ViT, one round

A row's images/s is the median over rotated rounds, its ratio the median of the per-round ratios to the
optimizer's graph in the same precision; max |Δ| is against the torch model (int8: its error, not the graph's).
Writes benchmarks/results/onnx_fusions.{json,md}. One benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"

VARIANTS = {"optimizer": (True, False), "+ one-op attention": (True, True), "+ LayerNorm apart": (False, False),
            "vitlab": (False, True)}  # name: (SkipLayerNormalization, MultiHeadAttention)


def write_variants(model, work: Path, batch: int) -> dict[str, Path]:
    """The model's ONNX graph in each of VARIANTS, written to `work`."""
    import onnx
    import torch

    from vitlab.runtime.export import _fuse_transformer, _one_op_attention, export_graph
    from vitlab.runtime.graphs import graph_for

    graph = graph_for(model, None, None)
    raw = export_graph(graph, work / "raw.onnx", "onnx", optimize=False)
    paths = {}
    for i, (name, (skip_layer_norm, one_op)) in enumerate(VARIANTS.items()):
        proto = _fuse_transformer(onnx.load(str(raw)), graph.onnx_fusion, skip_layer_norm=skip_layer_norm)
        if one_op:
            proto = _one_op_attention(proto, graph.onnx_fusion["num_heads"], graph)
        ops = [node.op_type for node in proto.graph.node]
        assert ("SkipLayerNormalization" in ops) == skip_layer_norm and ("MultiHeadAttention" in ops) == one_op, name
        paths[name] = work / f"fp32-{i}.onnx"
        onnx.save(proto, str(paths[name]))
    return paths | {"graph": graph, "example": torch.randn(batch, 3, *model.patch_embed.img_size)}


def int8_variants(fp32: dict, work: Path, samples) -> dict[str, Path]:
    from vitlab.runtime.quantize import quantize_graph

    out = {}
    for i, name in enumerate(VARIANTS):
        out[name] = work / f"int8-{i}.onnx"
        quantize_graph(fp32["graph"], out[name], "onnxruntime", samples, fp32_onnx=fp32[name])
    return out


def time_rounds(calls_of: dict, batch: int, rounds: int, seconds: float) -> dict[str, list[float]]:
    """images/s of each call (a function of nothing that runs one batch) in each round, the order rotated from
    round to round."""
    names = list(calls_of)
    for name in names:
        calls_of[name]()
    per_round = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            calls, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds or calls < 1:
                calls_of[name]()
                calls += 1
            per_round[name].append(calls * batch / (time.perf_counter() - start))
    return per_round


def layer_norm_forms(batch: int, dim: int, tokens: int, calls: int) -> dict:
    """SkipLayerNormalization against Add + LayerNormalization on the same (B, N, D) tensors, ms per call."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from vitlab.runtime.backends import usable_cores

    def session(fused: bool):
        a, b = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, tokens, dim]) for n in "ab")
        y, s = (helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "ys")
        weights = [numpy_helper.from_array(np.ones(dim, np.float32), "gamma"),
                   numpy_helper.from_array(np.zeros(dim, np.float32), "beta")]
        nodes = ([helper.make_node("SkipLayerNormalization", ["a", "b", "gamma", "beta"], ["y", "", "", "s"],
                                   domain="com.microsoft", epsilon=1e-6)] if fused else
                 [helper.make_node("Add", ["a", "b"], ["s"]),
                  helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-6)])
        model = helper.make_model(helper.make_graph(nodes, "norm", [a, b], [y, s], weights),
                                  opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = usable_cores(), 1
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])

    rng = np.random.default_rng(0)
    feed = {n: rng.standard_normal((batch, tokens, dim), dtype=np.float32) for n in "ab"}
    sessions = {"SkipLayerNormalization": session(True), "Add + LayerNormalization": session(False)}
    outputs = {name: s.run(None, feed) for name, s in sessions.items()}
    ms = {name: [] for name in sessions}
    for _ in range(3):
        for name, s in sessions.items():
            start = time.perf_counter()
            for _ in range(calls):
                s.run(None, feed)
            ms[name].append((time.perf_counter() - start) / calls * 1e3)
    difference = max(float(np.abs(p - q).max()) for p, q in zip(*outputs.values()))
    return {"shape": [batch, tokens, dim], "ms": {name: statistics.median(v) for name, v in ms.items()},
            "max_abs_diff": difference}


def op_profile(path: Path, x, calls: int = 3) -> dict[str, float]:
    """Milliseconds per call spent in each op type, from onnxruntime's profile of `calls` calls (after a warm one)."""
    import collections
    import json

    import onnxruntime as ort

    from vitlab.runtime.backends import usable_cores

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = usable_cores(), 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    with tempfile.TemporaryDirectory(prefix="vitlab-profile-") as folder:
        options.enable_profiling, options.profile_file_prefix = True, str(Path(folder) / "profile")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: x}
        session.run(None, feed)
        for _ in range(calls):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
    by_op: collections.Counter = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            by_op[event["args"]["op_name"]] += event["dur"]
    # the warm call is in the profile too: calls + 1
    return {op: us / 1e3 / (calls + 1) for op, us in by_op.most_common()}


PRODUCTS = ("MatMul", "Gemm", "FusedMatMul", "MatMulIntegerToFloat", "QGemm", "Conv", "QLinearConv")


def markdown(record: dict) -> str:
    m = record["machine"]
    lines = [f"# A ViT's ONNX graph on onnxruntime, four ways ({m['cpu']}, {m.get('cpu_capability')}, "
             f"{m['threads']} threads)", "",
             f"onnxruntime {record['onnxruntime']}; {record['rounds']} rotated rounds of ≈{record['seconds']} s per "
             "row; × = median per-round ratio to `optimizer` in the same precision.", "",
             "| model | batch | precision | graph | images/s | × optimizer | max \\|Δ\\| vs torch |",
             "|---|---:|---|---|---:|---:|---:|"]
    for r in record["rows"]:
        lines.append(f"| {r['model']} | {r['batch']} | {r['precision']} | {r['graph']} | {r['images_per_s']:.2f} | "
                     f"{r['ratio']:.2f} | {r['max_abs_diff']:.1e} |")
    n = record["layer_norm"]
    lines += ["", f"One block's residual sum and LayerNorm on {' × '.join(map(str, n['shape']))} floats "
              f"(outputs equal to {n['max_abs_diff']:.0e}):", "", "| form | ms per call |", "|---|---:|"]
    lines += [f"| {name} | {ms:.2f} |" for name, ms in n["ms"].items()]
    profile = record["profile"]
    lines += ["", f"Where vitlab's graph spends a call at batch {profile['batch']} (onnxruntime's profile, kernel ms "
              "per call; products: MatMul, Gemm, Conv in either precision):", "",
              "| op type | fp32 ms | int8 ms |", "|---|---:|---:|"]
    ops = sorted(set(profile["fp32"]) | set(profile["int8"]),
                 key=lambda op: -max(profile["fp32"].get(op, 0), profile["int8"].get(op, 0)))
    for op in ops:
        if max(profile["fp32"].get(op, 0), profile["int8"].get(op, 0)) >= 1:
            lines.append(f"| {op} | {profile['fp32'].get(op, 0):.1f} | {profile['int8'].get(op, 0):.1f} |")
    for part in ("products", "the rest"):
        lines.append(f"| **{part}** | {profile['totals']['fp32'][part]:.1f} | {profile['totals']['int8'][part]:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tiny ViT at batch 2, one round")
    parser.add_argument("--batches", type=int, nargs="+", default=[32, 1])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="timed seconds per row per round")
    parser.add_argument("--tag", default="onnx_fusions")
    parser.add_argument("--out", type=Path, default=RESULTS)
    from benchmarks.harness.host import add_beside_option, machine

    add_beside_option(parser)
    args = parser.parse_args(argv)
    import importlib.metadata

    import numpy as np
    import torch

    import vitlab
    from benchmarks.harness.reporting import write_results
    from vitlab.engine.speed import tune_process
    from vitlab.runtime.backends import OnnxRuntimeBackend, cpu_settings

    tune_process()
    name, batches = ("vit_tiny_patch16_224", [2]) if args.quick else ("vit_small_patch16_224", args.batches)
    rounds, seconds = (1, 0.2) if args.quick else (args.rounds, args.seconds)
    torch.manual_seed(0)
    model = vitlab.create_model(name, **({"depth": 2} if args.quick else {})).eval()
    rows = []
    with tempfile.TemporaryDirectory(prefix="vitlab-fusions-") as work:
        work = Path(work)
        fp32 = write_variants(model, work, max(batches))
        calibration = [(torch.randn(32 if not args.quick else 4, 3, *model.patch_embed.img_size).numpy(),)]
        files = {"fp32": {v: fp32[v] for v in VARIANTS}, "int8": int8_variants(fp32, work, calibration)}
        settings = cpu_settings()
        for batch in batches:
            x = torch.randn(batch, 3, *model.patch_embed.img_size)
            with torch.inference_mode():
                expected = model(x).numpy()
            for precision, paths in files.items():
                engines = {v: OnnxRuntimeBackend(str(p), settings) for v, p in paths.items()}
                runs = {v: (lambda e=e, x=x: e([x.numpy()])[0]) for v, e in engines.items()}
                per_round = time_rounds(runs, batch, rounds, seconds)
                for variant in VARIANTS:
                    ratios = [a / b for a, b in zip(per_round[variant], per_round["optimizer"])]
                    rows.append({"model": name, "batch": batch, "precision": precision, "graph": variant,
                                 "images_per_s": statistics.median(per_round[variant]),
                                 "ratio": statistics.median(ratios),
                                 "max_abs_diff": float(np.abs(runs[variant]().numpy() - expected).max())})
                    print(rows[-1], flush=True)
        big = torch.randn(max(batches), 3, *model.patch_embed.img_size).numpy()
        profile = {"batch": max(batches), **{precision: op_profile(paths["vitlab"], big, 1 if args.quick else 3)
                                             for precision, paths in files.items()}}
        profile["totals"] = {precision: {"products": sum(ms for op, ms in profile[precision].items()
                                                         if op in PRODUCTS),
                                         "the rest": sum(ms for op, ms in profile[precision].items()
                                                         if op not in PRODUCTS)} for precision in files}
    tokens = model.patch_embed.num_patches + 1
    norm = layer_norm_forms(max(batches), model.config.dim, tokens, 5 if args.quick else 50)
    record = {"machine": machine(), "onnxruntime": importlib.metadata.version("onnxruntime"), "rounds": rounds,
              "seconds": seconds, "rows": rows, "layer_norm": norm, "profile": profile}
    tag = f"{args.tag}_quick" if args.quick else args.tag
    return write_results(args.out, tag, record, markdown(record), beside=args.beside)


if __name__ == "__main__":
    main()
