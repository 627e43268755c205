"""`vitlab export RUN_DIR --format onnx|openvino|exported-program`: a trained model for deployment, batch size free
(and the image size, where the model allows it). `--format timm`: the model as another library's own folder, which
that library builds by itself (interop/exporters.py)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ..commands import command
from ..engine.flags import SELECTED_WEIGHTS, add_weights_flag


@command("export", order=70)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export a trained run (or a vitlab .safetensors file) for a runtime")
    p.add_argument("source", metavar="RUN_DIR", help="run folder from `vitlab train`, a vitlab .safetensors file, or "
                   "released weights by name: a release tag (vitlab models --pretrained) or hf-hub:org/name[@rev]")
    p.add_argument("--format", choices=["onnx", "openvino", "exported-program", "timm", "transformers", "diffusers"],
                   default="onnx",
                   help="onnx (onnxruntime), openvino (an .xml with its .bin) or exported-program (torch.export "
                   ".pt2); timm, transformers, diffusers: a folder that library loads, for a family it has a "
                   "form of (another is refused, naming the formats its family has) (default: onnx)")
    p.add_argument("--out", help="file to write (default: RUN_DIR/model.onnx, model.xml or model.pt2; a release: "
                   "NAME.onnx here; a restorer with several tasks: one file per task, model-TASK.onnx); for timm, "
                   "transformers or diffusers a new folder (default: RUN_DIR/FORMAT, NAME-FORMAT)")
    add_weights_flag(p, None, f"for a run folder, {SELECTED_WEIGHTS}")
    p.add_argument("--task", help="a restoration run: the degradation to export, e.g. sr2 (default: every one)")
    p.add_argument("--no-optimize", action="store_true", help="ONNX: write the graph as exported (default: a "
                   "ViT's GELU fused with its bias, each attention one MultiHeadAttention node, for onnxruntime)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..data.preprocessing import Preprocessing
    from ..interop import load_model
    from ..interop.convert import model_from_checkpoint
    from ..interop.exporters import FOREIGN_FORMATS
    from ..interop.hub import names_remote_weights
    from ..interop.preprocessing import preprocessing_for
    from ..runtime.export import FORMATS, export_graph
    from ..runtime.graphs import graph_for
    from ..tasks.launch import load_run_model, load_task

    FORMATS = {**FORMATS, **{fmt: f"-{fmt}" for fmt in FOREIGN_FORMATS}}  # a folder: NAME-timm, RUN_DIR/timm

    source = Path(args.source)
    if names_remote_weights(args.source):  # a release: the model it names, built to its file
        model = model_from_checkpoint(args.source).eval()
        default_out = Path(re.sub(r"[^A-Za-z0-9_.-]+", "_", args.source.removeprefix("hf-hub:")) + FORMATS[args.format])
        preprocessing = preprocessing_for(args.source)
    elif source.is_dir():
        model = load_run_model(source, args.weights)
        default_out = source / f"model{FORMATS[args.format]}"
        # a run records its preprocessing in config.json; a folder of weights alone has none to give
        recorded = (load_task(source)[1].get("data", {}).get("preprocessing") if (source / "config.json").is_file()
                    else None)
        preprocessing = Preprocessing.from_dict(recorded) if recorded else None
    elif source.is_file():
        model = load_model(source).eval()
        default_out = source.parent / f"model{FORMATS[args.format]}"
        preprocessing = preprocessing_for(source)
    else:
        raise FileNotFoundError(f"no weights at {source}: give a run folder from `vitlab train`, a .safetensors, or "
                                f"a release tag (vitlab models --pretrained)")
    if args.format in FOREIGN_FORMATS:
        from ..interop.exporters import export_to

        if args.task:
            raise ValueError(f"--task picks a graph of a multi-task model; a {args.format} folder holds it whole")
        out = Path(args.out) if args.out else (source / args.format if source.is_dir() and not
                                               names_remote_weights(args.source) else default_out)
        folder = export_to(model, args.format, out, preprocessing.to_dict() if preprocessing is not None else None)
        print(f"wrote {folder}: {', '.join(sorted(p.name for p in folder.iterdir()))} ({args.format})")
        return 0
    out = Path(args.out) if args.out else default_out
    if out.suffix != FORMATS[args.format]:
        raise ValueError(f"--out {out}: a {args.format} file ends in {FORMATS[args.format]}")
    tasks: list[str | None] = [None]
    if model.task_names:  # one graph per task
        tasks = [args.task] if args.task else list(model.task_names)
    elif args.task:
        raise ValueError(f"--task picks the task of a multi-task model (a restoration run's degradation); this run is "
                         f"a {graph_for(model).kind}")
    for task in tasks:
        graph = graph_for(model, task=task)
        if preprocessing is not None:  # with the labels: what a user of the file alone needs to answer as vitlab does
            graph.meta["preprocessing"] = preprocessing.to_dict()
        path = out if len(tasks) == 1 else out.with_name(f"{out.stem}-{task}{out.suffix}")
        export_graph(graph, path, args.format, optimize=not args.no_optimize)
        free = ", ".join(f"{name} {'/'.join(sorted(axes.values()))}" if axes else f"{name} fixed"
                         for name, axes in zip(graph.input_names, graph.dynamic))
        which = f" ({graph.meta['degradation']})" if "degradation" in graph.meta else ""
        print(f"wrote {path}{which}: {args.format}, inputs {', '.join(graph.input_names)} (free axes: {free}), "
              f"outputs {', '.join(graph.output_names)}")
    return 0
