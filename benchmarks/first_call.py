"""Where the first call on a runtime goes: a detector's graph made for ONNX Runtime and for OpenVINO, stage by
stage, then loaded again from the files, as a later process does.

    python benchmarks/first_call.py            # deformable_detr_small, deformable_detr_resnet50, detr_resnet50
    python benchmarks/first_call.py --quick    # deformable_detr_small with one layer each side

Stages, seconds each (random weights; the small presets at 256², the ResNet-50 ones at 512², batch 2, which is
what the runtimes trace at):

    trace          torch.export of the model with its batch and image size free (shared by both runtimes)
    to ONNX        torch.onnx.export of that program, with its graph optimizer
    save ONNX      the file written
    ORT session    onnxruntime's InferenceSession of the file (its graph optimizations)
    ORT first      the first call, at the traced size
    to OpenVINO    openvino.convert_model of the program
    save OpenVINO  the .xml and .bin written
    OV compile     core.compile_model of the saved file
    OV first       its first call
    cached ORT / cached OV   a later process: the session or compiled model from the saved file, and its first call

Writes benchmarks/results/first_call.{json,md}. One benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"
MODELS = {"deformable_detr_small": 256, "deformable_detr_resnet50": 512, "detr_resnet50": 512}
STAGES = ("trace", "to ONNX", "save ONNX", "ORT session", "ORT first", "to OpenVINO", "save OpenVINO", "OV compile",
          "OV first", "cached ORT", "cached OV")


def measure(name: str, size: int, threads: int, work: Path, overrides: dict) -> dict:
    import warnings

    import numpy as np
    import onnx
    import onnxruntime
    import openvino

    import vitlab
    from vitlab.runtime.export import exported_program, metadata, save_openvino
    from vitlab.runtime.graphs import graph_for

    torch.manual_seed(0)
    model = vitlab.create_model(name, **overrides).eval()
    example = (torch.randn(2, 3, size, size),)
    seconds: dict[str, float] = {}

    def timed(stage: str, fn):
        start = time.perf_counter()
        out = fn()
        seconds[stage] = time.perf_counter() - start
        print(f"  {name}: {stage} {seconds[stage]:.1f} s", flush=True)
        return out

    graph = graph_for(model, example)
    program = timed("trace", lambda: exported_program(graph))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx_program = timed("to ONNX", lambda: torch.onnx.export(
            program, graph.example, input_names=list(graph.input_names), output_names=list(graph.output_names),
            dynamo=True, verbose=False, optimize=True))
    path = work / f"{name}.onnx"
    timed("save ONNX", lambda: onnx.save_model(onnx_program.model_proto, str(path)))
    feeds = {"images": graph.example[0].numpy(), "padding_mask": graph.example[1].numpy()}
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = timed("ORT session", lambda: onnxruntime.InferenceSession(str(path), options,
                                                                        providers=["CPUExecutionProvider"]))
    timed("ORT first", lambda: session.run(None, feeds))
    core = openvino.Core()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = timed("to OpenVINO", lambda: openvino.convert_model(program))
    xml = work / f"{name}.xml"
    timed("save OpenVINO", lambda: save_openvino(converted, graph, xml, metadata(graph)))
    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
    compiled = timed("OV compile", lambda: core.compile_model(core.read_model(str(xml)), "CPU", config))
    inputs = [feeds[port.any_name] for port in compiled.inputs]
    timed("OV first", lambda: compiled(inputs))

    def cached_ort():
        again = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return again.run(None, feeds)

    def cached_ov():
        again = openvino.Core().compile_model(str(xml), "CPU", config)
        return again([feeds[port.any_name] for port in again.inputs])

    timed("cached ORT", cached_ort)
    timed("cached OV", cached_ov)
    with torch.inference_mode():
        expected = model(*graph.example).logits.numpy()
    error = float(np.abs(session.run(None, feeds)[0] - expected).max())
    return {"model": name, "size": size, "batch": 2, "seconds": seconds, "max_abs_diff": error,
            "onnx_mib": path.stat().st_size / 2**20,
            "first_call_ort": sum(seconds[s] for s in ("trace", "to ONNX", "save ONNX", "ORT session", "ORT first")),
            "first_call_ov": sum(seconds[s] for s in ("trace", "to OpenVINO", "save OpenVINO", "OV compile",
                                                     "OV first"))}


def table_of(record: dict) -> str:
    from benchmarks.harness import cpu_and_isa

    rows = record["rows"]
    lines = ["| stage, s | " + " | ".join(f"{r['model']} ({r['size']}²)" for r in rows) + " |",
             "|---|" + "---:|" * len(rows)]
    for stage in STAGES:
        lines.append(f"| {stage} | " + " | ".join(f"{r['seconds'][stage]:.1f}" for r in rows) + " |")
    lines.append("| **first call, onnxruntime** | " + " | ".join(f"**{r['first_call_ort']:.1f}**" for r in rows)
                 + " |")
    lines.append("| **first call, OpenVINO** | " + " | ".join(f"**{r['first_call_ov']:.1f}**" for r in rows) + " |")
    host = record["machine"]
    return "\n".join(lines) + (f"\n\n{cpu_and_isa(host)}, {host['threads']} threads, torch {host['torch']}, "
                               f"onnxruntime {record['versions']['onnxruntime']}, openvino "
                               f"{record['versions']['openvino']}\n")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a smoke run: a one-layer deformable_detr_small")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--tag", default="first_call")
    from benchmarks.harness import add_beside_option, machine, write_results

    add_beside_option(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    models = ["deformable_detr_small"] if args.quick else args.models
    overrides = {"enc_layers": 1, "dec_layers": 1} if args.quick else {}
    with tempfile.TemporaryDirectory(prefix="vitlab-first-call-") as work:
        rows = [measure(name, MODELS[name], args.threads, Path(work), overrides) for name in models]
    import onnxruntime
    import openvino

    record = {"machine": machine(), "rows": rows,
              "versions": {"onnxruntime": onnxruntime.__version__, "openvino": openvino.__version__}}
    write_results(Path(args.out), args.tag + ("_quick" if args.quick else ""), record, table_of(record),
                  beside=args.beside)
    return record


if __name__ == "__main__":
    main()
