"""What two process-wide CPU settings are worth to a ViT, per library: each library alone in a fresh process, run
once with the defaults (glibc's malloc thresholds, IEEE gradual underflow) and once with the settings `vitlab`
commands run with (`vitlab.engine.speed.tune_process()`: glibc keeps freed memory, denormals flush to zero).

    python benchmarks/process_settings.py           # 3 libraries × 2 settings × 2 rounds of fresh processes (~7 min)
    python benchmarks/process_settings.py --quick   # one small model, one round (a smoke run)
    python benchmarks/process_settings.py --libraries vitlab --models vit_mini_patch7_28 \
        --settings default malloc denormals vitlab --rounds 6 --tag process_settings-mini   # which setting does it

Why this is measured apart from benchmarks/speed.py: the settings are process-wide, so the interleaved speed
benchmark gives every library the same; here each library runs as its users would run it, alone. Writes
benchmarks/results/<tag>.json and <tag>.md and prints the markdown. One benchmark at a time on the 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
# (model, mode, batch)
DEFAULT = [("vit_tiny_patch16_224", "infer", 32), ("vit_tiny_patch16_224", "train", 32),
           ("vit_small_patch16_224", "infer", 32),
           ("vit_mini_patch7_28", "infer", 256), ("vit_mini_patch7_28", "train", 128)]
QUICK = [("vit_mini_patch7_28", "infer", 64), ("vit_mini_patch7_28", "train", 32)]
# what each fresh process turns on before it builds a model: nothing, both settings (tune_process), or one of them
SETTINGS = {"default": "defaults", "vitlab": "vitlab's settings", "malloc": "freed memory kept only",
            "denormals": "denormals flushed only"}


def probe(library: str, mode: str, workloads: list, target_s: float) -> dict:
    """Runs in the fresh process: images/s of each workload (median of timed calls after a warm-up call)."""
    from vitlab.engine.speed import flush_denormals, keep_freed_memory

    wanted = {"keep_freed_memory": mode in ("vitlab", "malloc"), "flush_denormals": mode in ("vitlab", "denormals")}
    applied = {"keep_freed_memory": wanted["keep_freed_memory"] and keep_freed_memory(),
               "flush_denormals": wanted["flush_denormals"] and flush_denormals()}
    if applied != wanted:
        raise SystemExit(f"the {mode} settings did not apply here: {applied}, wanted {wanted}")
    import torch

    from benchmarks.harness import build, image_shape, timed, train_step
    from vitlab.models.registry import get_config

    out = {}
    for name, mode, batch in workloads:
        torch.manual_seed(0)
        model = build(library, name)
        x = torch.randn(batch, *image_shape(name))
        if mode == "infer":
            model.eval()

            def call(model=model, x=x):
                with torch.inference_mode():
                    model(x)
        else:
            model.train()
            y = torch.randint(0, get_config(name).num_classes, (batch,))
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

            def call(model=model, optimizer=optimizer, x=x, y=y):
                train_step(model, optimizer, x, y)
        first = timed(call, 1, warmup=1)
        seconds = timed(call, max(3, min(20, round(target_s / first))), warmup=0)
        out[f"{name} {mode} b{batch}"] = batch / seconds
    return out


def ratio_cell(samples: dict, library: str, mode: str, key: str, default: float) -> str:
    """The medians' ratio to the defaults; over three rounds or more, with the range of the rounds' own ratios."""
    ratio = statistics.median(run[key] for run in samples[(library, mode)]) / default
    pairs = [run[key] / base[key] for run, base in zip(samples[(library, mode)], samples[(library, "default")])]
    return f"{ratio:.2f}" + (f" ({min(pairs):.2f}–{max(pairs):.2f})" if len(pairs) > 2 else "")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of fresh processes (default: 2)")
    parser.add_argument("--target-s", type=float, default=4.0, help="timed seconds per workload (default: 4)")
    parser.add_argument("--libraries", nargs="+", default=["vitlab", "timm", "hf"])
    parser.add_argument("--models", nargs="+", help="only these models' workloads (default: all)")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=["default", "vitlab"],
                        help="settings to time, 'default' among them: the others are compared with it "
                             "(malloc: glibc keeps freed memory; denormals: flushed to zero; vitlab: both)")
    parser.add_argument("--tag", default="process_settings")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--probe", help=argparse.SUPPRESS)  # internal: run one fresh-process measurement
    from benchmarks.harness import add_beside_option

    add_beside_option(parser)
    args = parser.parse_args(argv)
    workloads = [w for w in (QUICK if args.quick else DEFAULT) if not args.models or w[0] in args.models]
    if not workloads:
        parser.error(f"no workload of {args.models}: the models timed are "
                     f"{sorted({name for name, _, _ in QUICK + DEFAULT})}")
    if "default" not in args.settings:
        parser.error("--settings must include 'default': every other setting is compared with it")
    modes = list(dict.fromkeys(args.settings))
    if args.probe:
        library, mode = args.probe.split(":")
        print(json.dumps(probe(library, mode, workloads, 0.0 if args.quick else args.target_s)))
        return {}
    rounds = 1 if args.quick else args.rounds
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("VITLAB_MALLOC", None)
    env.pop("VITLAB_DENORMALS", None)
    samples: dict[tuple[str, str], list[dict]] = {}
    start = time.perf_counter()
    for r in range(rounds):
        for library in args.libraries:
            # rotate which setting goes first, so drift of the machine does not favour one
            for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
                cmd = [sys.executable, __file__, "--probe", f"{library}:{mode}", "--target-s", str(args.target_s),
                       *(["--quick"] if args.quick else []), *(["--models", *args.models] if args.models else [])]
                done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
                if done.returncode != 0:
                    raise SystemExit(f"{library} with the {mode} settings failed:\n{done.stderr[-2000:]}")
                samples.setdefault((library, mode), []).append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(f"round {r + 1}/{rounds}: {library}, {mode} settings done", flush=True)
    keys = [f"{name} {mode} b{batch}" for name, mode, batch in workloads]
    median = {(lib, mode, key): statistics.median(s[key] for s in runs)
              for (lib, mode), runs in samples.items() for key in keys}
    tried = [mode for mode in modes if mode != "default"]
    lines = ["| workload | library | defaults img/s | " + " | ".join(
        f"{SETTINGS[mode]} img/s | {SETTINGS[mode]} / defaults" for mode in tried) + " |",
             "| --- | --- | --- | " + " | ".join("--- | ---" for _ in tried) + " |"]
    for key in keys:
        for lib in args.libraries:
            d = median[(lib, "default", key)]
            lines.append(f"| {key} | {lib} | {d:.1f} | " + " | ".join(
                f"{median[(lib, mode, key)]:.1f} | {ratio_cell(samples, lib, mode, key, d)}" for mode in tried) + " |")
    others = [lib for lib in args.libraries if lib != "vitlab"]
    if "vitlab" in args.libraries and others and "vitlab" in modes:
        lines += ["", "What each library's users get out of the box: vitlab's commands run with its settings, the "
                      "others with the defaults.", "",
                  "| workload | " + " | ".join(f"vitlab (its settings) / {lib} (defaults)" for lib in others) + " |",
                  "| --- | " + " | ".join("---" for _ in others) + " |"]
        for key in keys:
            lines.append(f"| {key} | " + " | ".join(
                f"{median[('vitlab', 'vitlab', key)] / median[(lib, 'default', key)]:.2f}" for lib in others) + " |")
    from benchmarks.harness import machine, write_results

    m = machine()
    head = (f"Machine: {m['cpu']}, {m['cpus']} cores ({m['cpu_capability']}), torch {m['torch']}, timm "
            f"{m.get('timm', '—')}, transformers {m.get('transformers', '—')}; {m['threads']} threads; fp32. Each "
            f"number: the median over {rounds} fresh process(es) of one library alone; within a process the median "
            "of timed calls after a warm-up call." + (
                " A ratio: the medians' ratio, in brackets the smallest and largest of the rounds' own ratios (each "
                "round's processes ran one after the other)." if rounds > 2 else ""))
    text = "\n".join([head, "", *lines]) + "\n"
    result = {"machine": m, "rounds": rounds, "workloads": keys, "settings": modes,
              "seconds": time.perf_counter() - start,
              "samples": {f"{lib}:{mode}": runs for (lib, mode), runs in samples.items()},
              "median": {f"{lib}:{mode}:{key}": v for (lib, mode, key), v in median.items()}}
    write_results(args.out, args.tag, result, text, beside=args.beside)
    return result


if __name__ == "__main__":
    main()
