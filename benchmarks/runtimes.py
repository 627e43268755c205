"""vitlab on its inference runtimes against what a user would otherwise run on the CPU: timm eager and under
torch.compile, Hugging Face ViTForImageClassification eager, and Hugging Face optimum's ONNX Runtime path.

    python benchmarks/runtimes.py                          # the default set below (~40 min on 2 cores)
    python benchmarks/runtimes.py --quick                  # a smoke run: two tiny models, one round
    python benchmarks/runtimes.py --optimum-site DIR       # also optimum-onnx, installed apart (see below)
    python benchmarks/runtimes.py --int8 --no-compile --no-bf16 --models vit_small_patch16_224 --tag runtimes-int8
    python benchmarks/runtimes.py --int8 --no-compile --no-bf16 --models detr_small deformable_detr_small \
        detr_resnet50 deformable_detr_resnet50 --tag runtimes-int8-detection      # the detectors, both sizes

Contenders run interleaved in one process, in rotated rounds (each goes first once); a row's images/s is the
median over rounds of its median call, its spread the range over rounds, its ratio to timm the median of the
per-round ratios. "first call" is creation plus the first call (export and session creation, or compilation);
"call peak" the resident memory a call adds above what was resident before it (VmHWM, Linux). max |Δ| compares
each vitlab runtime (and timm, given the same weights) with vitlab's torch output.

optimum-onnx pins transformers < 4.58, which diffusers (a test dependency) refuses; install it apart and point
the benchmark at it, which then imports that transformers for the Hugging Face rows too:

    pip install --no-deps --target /tmp/optimum-site optimum-onnx==0.1.0 optimum==2.1.0 transformers==4.57.6 \
        huggingface-hub==0.36.2 tokenizers==0.22.1

Writes benchmarks/results/<tag>.json and .md (default tag: runtimes). One benchmark at a time on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"


@dataclass
class Case:
    name: str
    batch: int
    shape: tuple[int, ...] | None = None  # one input's shape without the batch (default: the model's images)


DEFAULT = [Case("vit_small_patch16_224", 1), Case("vit_small_patch16_224", 32), Case("vit_base_patch16_224", 1),
           Case("vit_base_patch16_224", 32), Case("detr_small", 4, (3, 128, 128)),
           Case("setr_pup_small", 4, (3, 128, 128)), Case("ipt_small", 16, (3, 48, 48))]
QUICK = [Case("vit_tiny_patch4_28", 8), Case("ipt_small", 4, (3, 48, 48))]
# the detectors at both sizes, for the int8 tables (--models): not in the default set, which times fp32 runtimes
MORE = [Case("deformable_detr_small", 4, (3, 128, 128)), Case("detr_resnet50", 1, (3, 512, 512)),
        Case("deformable_detr_resnet50", 1, (3, 512, 512))]


@dataclass
class Contender:
    label: str
    make: Callable[[], Callable[[Any], Any]]  # builds it; the result maps the batch to its first output
    reference: bool = False  # compare its output with vitlab torch's (same weights)


def contenders(case: Case, model, bf16: bool, optimum: bool, compile: bool = True, int8: bool = False,
               cache_dir: Path | None = None) -> list[Contender]:
    """`cache_dir`: one graph folder for every row of the model (a bf16 OpenVINO row then reads the fp32 row's
    model, as a user's second load does); None: each row converts its own, its first call included."""
    import torch

    from vitlab import runtime

    def on(backend: str, precision: str = "fp32"):
        def make():
            engine = runtime.load(model, backend=backend, precision=precision, cache_dir=cache_dir)
            return lambda x: _first(engine(x))
        return make

    def quantized(backend: str):
        def make():  # calibrated as `vitlab quantize` does, on random images (what is timed is the same graph)
            from vitlab.runtime.calibration import calibration_recorder

            rows = min(32, 8 * case.batch)  # a ResNet-50 detector at 512² calibrates on 8 images, not 32
            recorder = calibration_recorder(model, rows)
            shape = case.shape or (model.config.in_chans, *model.patch_embed.img_size)
            with torch.inference_mode():
                recorder.as_model()(torch.randn(rows, *shape))
            engine, _ = recorder.write_int8(backend)
            return lambda x: _first(engine(x))
        return make

    rows = [Contender("vitlab torch", on("torch"), True)]
    rows += [Contender("vitlab compile", on("compile"), True)] if compile else []
    rows += [Contender("vitlab onnxruntime", on("onnxruntime"), True),
             Contender("vitlab openvino", on("openvino"), True)]
    if bf16:
        rows += [Contender("vitlab torch bf16", on("torch", "bf16"), True),
                 Contender("vitlab openvino bf16", on("openvino", "bf16"), True)]
    if int8:
        rows += [Contender("vitlab onnxruntime int8", quantized("onnxruntime"), True)]
        if "openvino" not in getattr(model.config, "wrong_on", {}):
            rows += [Contender("vitlab openvino int8", quantized("openvino"), True)]
    if not case.name.startswith("vit_"):
        return rows

    def timm_model():
        from benchmarks.harness.workloads import build

        m = build("timm", case.name).eval()
        m.load_state_dict(model.state_dict())  # vitlab's ViT keys are timm's
        return m

    def timm_eager():
        return timm_model()

    def timm_compiled():
        from vitlab.runtime.backends import FROZEN_WEIGHTS

        compiled = torch.compile(timm_model())

        def call(x):
            with FROZEN_WEIGHTS:  # frozen weights, as vitlab's compile backend has them
                return compiled(x)
        return call

    def timm_bf16():
        m = timm_model()

        def call(x):
            with torch.autocast("cpu", torch.bfloat16):
                return m(x).float()
        return call

    def hf_eager():
        from benchmarks.harness.workloads import build

        return build("hf", case.name).eval()

    def optimum_session(folder: Path, **where):
        import onnxruntime as ort
        from optimum.onnxruntime import ORTModelForImageClassification

        from vitlab.runtime.backends import usable_cores

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = usable_cores(), 1
        m = ORTModelForImageClassification.from_pretrained(folder, session_options=options,
                                                           provider="CPUExecutionProvider", **where)
        return lambda x: m(pixel_values=x).logits

    def hf_folder() -> Path:
        from benchmarks.harness.workloads import build

        folder = Path(tempfile.mkdtemp(prefix="optimum-"))
        build("hf", case.name).inner.save_pretrained(folder / "hf")
        return folder

    def optimum_ort():
        return optimum_session(hf_folder() / "hf", export=True)

    def optimum_int8():
        """optimum's documented CPU recipe: dynamic quantization, per tensor, for the machine's ISA."""
        from optimum.onnxruntime import ORTModelForImageClassification, ORTQuantizer
        from optimum.onnxruntime.configuration import AutoQuantizationConfig

        from vitlab.runtime.quantize import cpu_int8_isa

        folder = hf_folder()
        ORTModelForImageClassification.from_pretrained(folder / "hf", export=True).save_pretrained(folder / "onnx")
        recipe = AutoQuantizationConfig.avx512_vnni if cpu_int8_isa() != "none" else AutoQuantizationConfig.avx2
        ORTQuantizer.from_pretrained(folder / "onnx").quantize(
            save_dir=folder / "int8", quantization_config=recipe(is_static=False, per_channel=False))
        return optimum_session(folder / "int8", file_name="model_quantized.onnx")

    rows = [Contender("timm eager", timm_eager, True)] \
        + ([Contender("timm compile", timm_compiled, True)] if compile else []) + [Contender("hf eager", hf_eager)] \
        + ([Contender("optimum onnxruntime", optimum_ort)] if optimum else []) \
        + ([Contender("optimum onnxruntime int8", optimum_int8)] if optimum and int8 else []) + rows
    if bf16:
        rows.append(Contender("timm bf16 autocast", timm_bf16, True))
    return rows


def _first(out: Any) -> Any:
    return out if hasattr(out, "shape") else out.logits


def measure(case: Case, rounds: int, calls: int, optimum: bool, compile: bool = True, progress=print,
            target_s: float = 2.0, int8: bool = False, bf16: bool = True, share_graphs: bool = False) -> list[dict]:
    """`calls` timed calls per row per round; 0: as many as fill `target_s` (1 to 20, from a warm call).
    `share_graphs`: the rows of the model convert its graph once (contenders' `cache_dir`, a temporary folder
    removed when the model's rows are done)."""
    if not share_graphs:
        return _measure(case, rounds, calls, optimum, compile, progress, target_s, int8, bf16, None)
    with tempfile.TemporaryDirectory(prefix="runtimes-graphs-") as graphs:
        return _measure(case, rounds, calls, optimum, compile, progress, target_s, int8, bf16, Path(graphs))


def _measure(case: Case, rounds: int, calls: int, optimum: bool, compile: bool, progress, target_s: float,
             int8: bool, bf16: bool, graphs: Path | None) -> list[dict]:
    import torch

    from benchmarks.harness.costs import peak_rss_mib, peak_rss_reset, rss_mib
    from vitlab import create_model
    from vitlab.engine.speed import bf16_supported

    torch.manual_seed(0)
    model = create_model(case.name).eval()
    shape = case.shape or (model.config.in_chans, *model.patch_embed.img_size)
    x = torch.rand(case.batch, *shape) if case.name.startswith("ipt") else torch.randn(case.batch, *shape)
    entries = contenders(case, model, bf16 and bf16_supported("cpu"), optimum, compile, int8, graphs)
    fns, rows = {}, {}
    with torch.inference_mode():
        expected = _first(model(x))
    for c in entries:
        progress(f"  {case.name} b{case.batch}: building {c.label}")
        start = time.perf_counter()
        try:
            fn = c.make()
            with torch.inference_mode():
                out = fn(x)
        except Exception as error:  # noqa: BLE001 - a contender that cannot run is a row that says why
            rows[c.label] = {"label": c.label, "error": f"{type(error).__name__}: {str(error).splitlines()[0]}"}
            continue
        first = time.perf_counter() - start
        with torch.inference_mode():
            start = time.perf_counter()
            fn(x)
            warm = time.perf_counter() - start
        rows[c.label] = {"label": c.label, "first_call_s": first, "samples": [],
                         "calls": calls or min(max(round(target_s / warm), 1), 20),
                         "max_abs_diff": float((torch.as_tensor(out).float() - expected).abs().max())
                         if c.reference else None}
        fns[c.label] = fn
    labels = list(fns)
    for r in range(rounds):
        order = labels[r % len(labels):] + labels[:r % len(labels)]
        for label in order:
            gc.collect()
            before = rss_mib()
            peak_rss_reset()
            times = []
            with torch.inference_mode():
                for _ in range(rows[label]["calls"]):
                    start = time.perf_counter()
                    fns[label](x)
                    times.append(time.perf_counter() - start)
            row = rows[label]
            row["samples"].append(statistics.median(times))
            row["call_peak_mib"] = max(row.get("call_peak_mib", 0.0), peak_rss_mib() - before)
        progress(f"  {case.name} b{case.batch}: round {r + 1}/{rounds} done")
    base = rows.get("timm eager") if "timm eager" in fns else rows.get("vitlab torch")
    out = []
    for c in entries:
        row = rows[c.label]
        row.update({"model": case.name, "batch": case.batch})
        if "samples" in row:
            median = statistics.median(row["samples"])
            row["images_per_s"] = case.batch / median
            row["spread"] = (max(row["samples"]) - min(row["samples"])) / median
            if base is not None and "samples" in base:
                row["ratio_to_base"] = statistics.median(b / s for b, s in zip(base["samples"], row["samples"]))
                row["base"] = base["label"]
        out.append(row)
    del fns
    gc.collect()
    return out


def table(rows: list[dict]) -> str:
    lines = ["| model | batch | contender | images/s | spread | × base | base | first call s | call peak MiB | "
             "max \\|Δ\\| vs vitlab torch |", "|---|---:|---|---:|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['label']} | — | — | — | — | — | — | {r['error']} |")
            continue
        diff = f"{r['max_abs_diff']:.1e}" if r.get("max_abs_diff") is not None else "—"
        lines.append(f"| {r['model']} | {r['batch']} | {r['label']} | {r['images_per_s']:.2f} | "
                     f"{r['spread']:.0%} | {r.get('ratio_to_base', float('nan')):.2f} | {r.get('base', '—')} | "
                     f"{r['first_call_s']:.1f} | {r['call_peak_mib']:.0f} | {diff} |")
    return "\n".join(lines)


def verdict(rows: list[dict]) -> list[str]:
    """The bar, read off the rows: the best fp32 (and int8) vitlab runtime against timm eager and optimum's own."""
    lines = []
    for name in sorted({r["model"] for r in rows if r["model"].startswith("vit_")}):
        for batch in sorted({r["batch"] for r in rows if r["model"] == name}):
            here = [r for r in rows if r["model"] == name and r["batch"] == batch and "images_per_s" in r]
            if not any(r["label"] == "timm eager" for r in here):
                continue
            fp32 = [r for r in here if r["label"].startswith("vitlab") and "bf16" not in r["label"]
                    and (r["max_abs_diff"] or 0) <= 1e-4]
            int8 = [r for r in here if r["label"].startswith("vitlab") and r["label"].endswith("int8")]
            for kind, ours, anchor in (("fp32", fp32, "optimum onnxruntime"),
                                       ("int8", int8, "optimum onnxruntime int8")):
                if ours:
                    lines.append(f"- {name} batch {batch}: " + _best_line(kind, ours, here, anchor))
    return lines


def _best_line(kind: str, ours: list[dict], here: list[dict], anchor_label: str) -> str:
    best = max(ours, key=lambda r: r["ratio_to_base"])
    anchor = next((r for r in here if r["label"] == anchor_label), None)
    versus = (f", {best['images_per_s'] / anchor['images_per_s']:.2f}× {anchor_label}" if anchor
              else f", {anchor_label} not measured")
    close = f" (max |Δ| {best['max_abs_diff']:.1e})" if kind == "fp32" else ""
    return f"best {kind} vitlab runtime **{best['label']}** {best['ratio_to_base']:.2f}× timm eager{versus}{close}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="two tiny models, one round, one call, no compile, "
                        "one graph per model for all its rows (a bf16 row's first call then converts nothing)")
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="leave out the torch.compile rows")
    parser.add_argument("--models", nargs="+", help="only these cases: of the default set, or "
                        + ", ".join(c.name for c in MORE))
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: 5)")
    parser.add_argument("--calls", type=int, default=0, help="timed calls per row per round (default 0: enough "
                        "for about 2 s, 1 to 20)")
    parser.add_argument("--optimum-site", type=Path, help="a folder with optimum-onnx and its transformers "
                        "installed (pip install --target); put ahead of the environment's own packages")
    parser.add_argument("--int8", action="store_true", help="add vitlab's int8 graphs (onnxruntime, openvino; "
                        "calibrated on random images) and, with --optimum-site, optimum's int8 recipe")
    parser.add_argument("--no-bf16", dest="bf16", action="store_false", help="leave out the bf16 rows")
    parser.add_argument("--tag", default="runtimes", help="name of the result files (default: runtimes)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    # the host module imports no transformers (--optimum-site)
    from benchmarks.harness.host import add_beside_option, cpu_and_isa, machine

    add_beside_option(parser)
    args = parser.parse_args(argv)
    if args.optimum_site:  # before anything imports transformers
        sys.path.insert(0, str(args.optimum_site))
        # optimum imports diffusers where it is installed, and the environment's diffusers wants a newer
        # huggingface_hub than optimum's transformers allows: keep it out (no diffusion model is measured here)
        sys.modules["diffusers"] = None
    import torch

    from benchmarks.harness.reporting import write_results
    from vitlab.engine.speed import tune_process
    from vitlab.runtime.backends import usable_cores

    tune_process()
    torch.set_num_threads(usable_cores())
    optimum = False
    if args.optimum_site:
        try:
            import optimum.onnxruntime
            optimum = True
        except ImportError as error:
            print(f"optimum not importable from {args.optimum_site}: {error}; its rows are left out")
    cases = QUICK if args.quick else [c for c in DEFAULT + MORE if c.name in args.models] if args.models else DEFAULT
    rounds, calls = (1, 1) if args.quick else (args.rounds, args.calls)
    rows: list[dict] = []
    for case in cases:
        rows += measure(case, rounds, calls, optimum, args.compile and not args.quick, int8=args.int8,
                        bf16=args.bf16, share_graphs=args.quick)
    host = machine()
    if args.int8:
        from vitlab.runtime.quantize import cpu_int8_isa

        host["int8_dot_product"] = cpu_int8_isa()  # vnni, amx or none: what the int8 kernels run on
    for package in ("onnxruntime", "openvino", "optimum-onnx", "nncf"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            host[package] = importlib.metadata.version(package)
    result = {"machine": host, "rounds": rounds, "calls": calls, "rows": rows}
    markdown = "\n".join([f"# vitlab runtimes on the CPU ({cpu_and_isa(host)}, {host['threads']} threads)", "",
                          f"`python benchmarks/runtimes.py{' --quick' if args.quick else ''}`: {rounds} rotated "
                          f"rounds × {calls or '≈2 s of'} calls; torch {host['torch']}, onnxruntime "
                          f"{host.get('onnxruntime', '—')}, openvino {host.get('openvino', '—')}, timm "
                          f"{host.get('timm', '—')}, transformers {host.get('transformers', '—')}; base = timm "
                          f"eager where it applies, else vitlab torch.", "", table(rows), "", *verdict(rows), ""])
    write_results(args.out, args.tag, result, markdown, beside=args.beside)
    return result


if __name__ == "__main__":
    main()
