"""`vitlab bench [MODEL...]`: vitlab's speed against timm and Hugging Face (a thin front door to the benchmark
harness, `benchmarks/harness/` in the repository).

The full benchmark with its committed results is `benchmarks/speed.py`; this command runs the same measurement
for the models named and prints the same markdown tables. The harness is not part of the installed package: the
command finds the repository's benchmarks/ folder beside the vitlab package (an editable install from a clone).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import ModuleType

# vitlab/cli/bench_cmd.py -> the folder holding vitlab/ (and, in a clone, benchmarks/)
REPO = Path(__file__).resolve().parents[2]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="images/s of vitlab, timm and Hugging Face on the same ViT")
    p.add_argument("models", nargs="*", default=["vit_tiny_patch16_224"],
                   help="registered model names (default: vit_tiny_patch16_224)")
    p.add_argument("--batch", type=int, default=32, help="inference batch (default: 32; batch 1 is always timed)")
    p.add_argument("--train-batch", type=int, help="training batch (default: the inference batch)")
    p.add_argument("--repeats", type=int, default=5, help="most timed calls per row per round (default: 5)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the libraries (default: 3)")
    p.add_argument("--compile", action="store_true", help="also measure each library under torch.compile")
    p.add_argument("--no-memory", dest="memory", action="store_false", help="skip the per-library memory runs")
    p.add_argument("--scaling", action="store_true", help="also time the first model at 224, 384 and 512 pixels")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    p.add_argument("--cpu-settings", choices=("vitlab", "default"), default="vitlab",
                   help="vitlab: the process settings vitlab commands run with (glibc keeps freed memory, "
                        "denormals flush to zero); default: glibc's and IEEE's (the same for every library)")
    p.add_argument("--json", type=Path, help="also write the results to this JSON file")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        import timm  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as error:
        raise ValueError("vitlab bench compares with timm and transformers: pip install timm transformers") from error
    harness = load_harness()
    workloads = [harness.Workload(name, args.batch, args.train_batch or args.batch) for name in args.models]
    settings = harness.Settings(repeats=args.repeats, rounds=args.rounds, compile=args.compile, memory=args.memory,
                                device=args.device, cpu_settings=args.cpu_settings)
    result = harness.run_speed(workloads, settings, args.models[0] if args.scaling else None)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    print(harness.report(result))
    return 0


def load_harness() -> ModuleType:
    """The repository's benchmark harness (`benchmarks.harness`), which lives outside the installed package."""
    if not (REPO / "benchmarks" / "harness" / "__init__.py").is_file():
        raise FileNotFoundError(
            f"vitlab bench runs the benchmark harness in the repository's benchmarks/ folder, which is not part of "
            f"the installed package (looked in {REPO / 'benchmarks'}); run it from a clone: git clone the vitlab "
            f"repository, pip install -e . in it, then vitlab bench or python benchmarks/speed.py"
        )
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import benchmarks.harness

    return benchmarks.harness
