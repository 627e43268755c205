"""vitlab against timm and Hugging Face: inference and training images/s, peak memory, FLOPs, scaling.

    python benchmarks/speed.py --rounds 5             # the four default models + scaling (~20 min, 2 cores)
    python benchmarks/speed.py --quick                # a smoke run: tiny settings, two small models
    python benchmarks/speed.py --compile --models vit_tiny_patch16_224 --tag speed-compile --no-scaling
    python benchmarks/speed.py --models vit_small_patch16_224 --batch 32 --tag mine   # one model, your batch

Writes benchmarks/results/<tag>.json and <tag>.md (default tag: speed) and prints the markdown. The ratios
vitlab/timm and vitlab/HF are what matters: absolute numbers move on a shared machine. One benchmark at a time
(on the shared 2-core machine: flock /tmp/vitlab-cpu.lock python benchmarks/speed.py).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable

from benchmarks.harness import Settings, Workload, add_beside_option, report, run_speed, write_results  # noqa: E402 - after the path set-up above

RESULTS = Path(__file__).parent / "results"
# batch 32 for inference everywhere; training at a batch that is realistic for the model on a CPU
DEFAULT = [Workload("vit_tiny_patch16_224"), Workload("vit_small_patch16_224"),
           Workload("vit_base_patch16_224", infer_batch=32, train_batch=8),
           # the default Fashion-MNIST model has a conv stem that timm and HF lack: the three libraries are compared
           # on its plain-patch twin (same 4×4 grid and transformer), the stem model itself is timed beside them
           Workload("vit_mini_convstem_28", infer_batch=256, train_batch=128)]
QUICK = [Workload("vit_mini_convstem_28", infer_batch=8, train_batch=8),
         Workload("vit_tiny_patch7_28", infer_batch=8, train_batch=8)]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+",
                        help="registered names (default: vit_{tiny,small,base}_patch16_224, vit_mini_convstem_28)")
    parser.add_argument("--batch", type=int, help="inference batch of every model named (default: each one's own; "
                                                   "batch 1 is always timed)")
    parser.add_argument("--train-batch", type=int, help="training batch of every model named (default: --batch, "
                                                         "else each one's own)")
    parser.add_argument("--quick", action="store_true", help="tiny settings for a smoke run (seconds, not minutes)")
    parser.add_argument("--repeats", type=int, default=5, help="most timed calls per row per round (default: 5)")
    parser.add_argument("--target-s", type=float, default=2.5, help="seconds per row per round (default: 2.5)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the libraries (default: 3)")
    parser.add_argument("--compile", action="store_true", help="also measure every library under torch.compile")
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the per-library memory runs")
    parser.add_argument("--no-scaling", dest="scaling", action="store_false", help="skip the image-size scaling")
    parser.add_argument("--scaling-model", default="vit_small_patch16_224")
    parser.add_argument("--no-attention-paths", dest="attention", action="store_false",
                        help="skip timing the attention core fused against explicit per shape")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cpu-settings", choices=("vitlab", "default"), default="vitlab",
                        help="vitlab: the process settings vitlab commands run with (glibc keeps freed memory, "
                             "denormals flush to zero); default: glibc's and IEEE's (the same for every library)")
    parser.add_argument("--tag", default="speed", help="name of the result files (default: speed)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the result files")
    add_beside_option(parser)
    args = parser.parse_args(argv)
    known = {w.name: w for w in (QUICK if args.quick else DEFAULT)}
    workloads = [known.get(m, Workload(m)) for m in args.models] if args.models else (QUICK if args.quick else DEFAULT)
    if args.batch or args.train_batch:
        workloads = [replace(w, infer_batch=args.batch or w.infer_batch,
                             train_batch=args.train_batch or args.batch or w.train_batch) for w in workloads]
    settings = Settings(repeats=args.repeats, target_s=args.target_s, rounds=args.rounds, compile=args.compile,
                        memory=args.memory, device=args.device, cpu_settings=args.cpu_settings)
    sizes = (224, 384, 512)
    if args.quick:
        settings.repeats, settings.min_repeats, settings.target_s, settings.rounds = 1, 1, 0.0, 1
        settings.peak_n = 512
        sizes = (28, 56)
        if args.scaling_model == parser.get_default("scaling_model"):
            args.scaling_model = "vit_tiny_patch4_28"
    result = run_speed(workloads, settings, args.scaling_model if args.scaling else None, sizes,
                       attention=args.attention)
    write_results(args.out, args.tag, result, report(result), beside=args.beside, device=args.device)
    return result


if __name__ == "__main__":
    main()
