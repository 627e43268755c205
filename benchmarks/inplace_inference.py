"""What writing inference results into the block's own fresh buffers is worth (vitlab/runtime/fast.py:
`may_overwrite`, `activate_in_place`, `InferenceBlock.add_residual`).

The same vitlab model on its inference path is timed with it on and off (off: `may_overwrite` answers no, so GELU
and the residual sums go into new tensors, as in timm and Hugging Face), with timm beside them, interleaved and
rotated in one process.
Each setting of the process runs in its own fresh process, because glibc's allocator cannot be set back.

    python benchmarks/inplace_inference.py            # ViT-Ti/16 b32, the mini model b256; both process settings
    python benchmarks/inplace_inference.py --quick    # a smoke run

Writes benchmarks/results/<tag>.json and <tag>.md and prints the markdown. One benchmark at a time on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
DEFAULT = [("vit_tiny_patch16_224", 32), ("vit_mini_patch7_28", 256)]
QUICK = [("vit_mini_patch7_28", 16)]
VARIANTS = ("in place", "out of place", "timm")


def probe(cpu_settings: str, workloads: list, rounds: int, target_s: float) -> list[dict]:
    """In this (fresh) process: images/s of each variant per round, interleaved and rotated."""
    import torch

    import vitlab.runtime.fast as fast
    from benchmarks.harness import build, image_shape, timed
    from vitlab.engine.speed import tune_process

    if cpu_settings == "vitlab":
        tune_process()
    in_place = fast.may_overwrite

    def never(*_args) -> bool:
        return False

    out = []
    for name, batch in workloads:
        torch.manual_seed(0)
        x = torch.randn(batch, *image_shape(name))
        ours, theirs = build("vitlab", name).eval(), build("timm", name).eval()

        def run(variant: str, ours=ours, theirs=theirs, x=x) -> None:
            check = in_place if variant == "in place" else never
            fast.may_overwrite = check
            with torch.inference_mode():
                (theirs if variant == "timm" else ours)(x)

        calls = {v: max(2, min(20, round(target_s / timed(lambda v=v: run(v), 1, warmup=2)))) for v in VARIANTS}
        seconds = {v: [] for v in VARIANTS}
        for r in range(rounds):
            for v in VARIANTS[r % 3:] + VARIANTS[: r % 3]:
                seconds[v].append(timed(lambda v=v: run(v), calls[v], warmup=0))
        fast.may_overwrite = in_place
        row = {"model": name, "batch": batch, "cpu_settings": cpu_settings, "rounds": rounds}
        for v in VARIANTS:
            row[f"{v} img/s"] = batch / statistics.median(seconds[v])
        for v in ("out of place", "timm"):
            per_round = [theirs_s / ours_s for ours_s, theirs_s in zip(seconds["in place"], seconds[v])]
            row[f"in place / {v}"] = statistics.median(per_round)
            row[f"in place / {v} range"] = [min(per_round), max(per_round)]
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--target-s", type=float, default=2.0, help="timed seconds per variant per round")
    parser.add_argument("--tag", default="inplace_inference")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--probe", help=argparse.SUPPRESS)  # internal: one fresh process
    from benchmarks.harness import add_beside_option

    add_beside_option(parser)
    args = parser.parse_args(argv)
    workloads = QUICK if args.quick else DEFAULT
    rounds, target_s = (1, 0.0) if args.quick else (args.rounds, args.target_s)
    if args.probe:
        print(json.dumps(probe(args.probe, workloads, rounds, target_s)))
        return []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    rows = []
    for cpu_settings in ("default", "vitlab"):
        cmd = [sys.executable, __file__, "--probe", cpu_settings, "--rounds", str(args.rounds), "--target-s",
               str(args.target_s), *(["--quick"] if args.quick else [])]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            raise SystemExit(f"the {cpu_settings} run failed:\n{done.stderr[-2000:]}")
        rows += json.loads(done.stdout.strip().splitlines()[-1])
    from benchmarks.harness import CPU_SETTINGS, machine, write_results

    m = machine()
    lines = [f"Machine: {m['cpu']}, {m['cpus']} cores ({m['cpu_capability']}), torch {m['torch']}, timm "
             f"{m.get('timm', '—')}; {m['threads']} threads; fp32 inference; {rounds} interleaved, rotated rounds; "
             "img/s = median over rounds; ratios = median of per-round ratios (range).", "",
             "| model | batch | CPU process settings | in place img/s | out of place img/s | timm img/s | "
             "in place / out of place | in place / timm |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ratios = []
        for v in ("out of place", "timm"):
            low, high = r[f"in place / {v} range"]
            ratios.append(f"{r[f'in place / {v}']:.2f} ({low:.2f}–{high:.2f})")
        lines.append(f"| {r['model']} | {r['batch']} | {r['cpu_settings']} | {r['in place img/s']:.1f} | "
                     f"{r['out of place img/s']:.1f} | {r['timm img/s']:.1f} | {ratios[0]} | {ratios[1]} |")
    lines += [""] + [f"- {key}: {text}" for key, text in CPU_SETTINGS.items()]
    text = "\n".join(lines) + "\n"
    write_results(args.out, args.tag, {"machine": m, "rows": rows}, text, beside=args.beside)
    return rows


if __name__ == "__main__":
    main()
