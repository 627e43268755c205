"""This checkout's vitlab against an earlier commit's, timed interleaved in one process: the same models with the same
weights, what a refactor must leave as fast as it was.

    git archive COMMIT vitlab | tar -x -C /tmp/before && mv /tmp/before/vitlab /tmp/before/vitlab_before
    python benchmarks/refactor_speed.py --before /tmp/before --commit COMMIT     # ~6 min on 2 cores
    python benchmarks/refactor_speed.py --before /tmp/before --quick             # a smoke run

The earlier package is imported under the name `vitlab_before` (its imports are relative). Cases:

- `vit_s16_runtime_bN`: ViT-S/16 inference at batch N on `vitlab.runtime.load(model, backend="torch")`, the path
  eval, predict and serve take;
- `vit_s16_eager_bN`: the same model called directly (`model(images)` under inference mode);
- `vit_mini_patch7_28_train_b128`: one training step of the default recipe's ViT on a Fashion-MNIST batch;
- `detr_small_train`, `deformable_detr_small_train`: one training step (forward, Hungarian matching, the set loss
  with the auxiliary losses, backward) of each small detector on 4 scenes of 128 × 128, with the criterion each
  version builds for the family (the task's own until then, the family's since);
- `detr_small_infer`, `deformable_detr_small_infer`: their eval-mode forward on the same batch.

Each round times after and before, alternating which goes first; the table gives the median of the per-round
ratios before / after (> 1: this checkout is faster) and their spread. Writes benchmarks/results/refactor_speed.json
and .md with the command, the commits, the CPU and its ISA.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"


def eager(model, images: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(images)


def vit_cases(new, old, batches: tuple[int, ...]) -> dict:
    torch.manual_seed(0)
    after = new.create_model("vit_small_patch16_224").eval()
    before = old.create_model("vit_small_patch16_224").eval()
    before.load_state_dict(after.state_dict())
    cases = {}
    for batch in batches:
        images = torch.randn(batch, 3, 224, 224)
        fast_after = new.runtime.load(after, backend="torch")
        fast_before = old.runtime.load(before, backend="torch")

        cases[f"vit_s16_runtime_b{batch}"] = (lambda f=fast_after, x=images: f(x),
                                               lambda f=fast_before, x=images: f(x))
        cases[f"vit_s16_eager_b{batch}"] = (lambda m=after, x=images: eager(m, x),
                                             lambda m=before, x=images: eager(m, x))
    return cases


def classifier_training_cases(new, old, name: str = "vit_mini_patch7_28", batch: int = 128) -> dict:
    """One training step (forward, cross-entropy, backward) of a Fashion-MNIST-sized ViT: what `vitlab train`'s
    default recipe repeats."""
    torch.manual_seed(0)
    after, before = new.create_model(name), old.create_model(name)
    before.load_state_dict(after.state_dict())
    images, labels = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))

    def step(model):
        model.train()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        model.zero_grad(set_to_none=True)

    return {f"{name}_train_b{batch}": (lambda: step(after), lambda: step(before))}


def detector_cases(new, old, name: str) -> dict:
    torch.manual_seed(0)
    after = new.create_model(name)
    before = old.create_model(name)
    before.load_state_dict(after.state_dict())
    images = torch.randn(4, 3, 128, 128)
    mask = torch.zeros(4, 128, 128, dtype=torch.bool)
    g = torch.Generator().manual_seed(0)
    targets = [{"labels": torch.randint(0, 10, (3,), generator=g), "boxes": torch.rand(3, 4, generator=g) * 0.4 + 0.3}
               for _ in range(4)]
    criterion_after = after.config.build_criterion()
    if hasattr(before.config, "build_criterion"):  # a version where the family builds its criterion
        criterion_before = before.config.build_criterion()
    else:  # before that, the detection task's own
        focal = name.startswith("deformable")
        old_tasks = importlib.import_module("vitlab_before.tasks.detection.criterion")
        old_matcher = importlib.import_module("vitlab_before.tasks.detection.matcher")
        criterion_before = old_tasks.SetCriterion(10, old_matcher.HungarianMatcher(2.0 if focal else 1.0, focal=focal),
                                                  class_weight=2.0 if focal else 1.0, focal=focal)

    def step(model, criterion):
        model.train()
        losses = criterion(model(images, mask), targets)
        losses["loss"].backward()
        model.zero_grad(set_to_none=True)

    def infer(model):
        model.eval()
        with torch.inference_mode():
            return model(images, mask)

    return {f"{name}_train": (lambda: step(after, criterion_after), lambda: step(before, criterion_before)),
            f"{name}_infer": (lambda: infer(after), lambda: infer(before))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="a folder holding the earlier package as vitlab_before/")
    parser.add_argument("--commit", default="?", help="the earlier package's commit (recorded)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--quick", action="store_true", help="two rounds of one call, batch 1 only")
    parser.add_argument("--tag", default="refactor_speed")
    parser.add_argument("--cases", nargs="+", help="only the cases whose names contain one of these")
    from benchmarks.harness.host import add_beside_option

    add_beside_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.calls = 2, 1
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(args.before).resolve()))
    import vitlab_before
    import vitlab_before.runtime

    import vitlab
    import vitlab.runtime
    from benchmarks.harness.clock import interleaved
    from benchmarks.harness.host import machine
    from benchmarks.harness.reporting import write_results

    cases = vit_cases(vitlab, vitlab_before, (1,) if args.quick else (1, 8))
    cases |= classifier_training_cases(vitlab, vitlab_before)
    for name in ("detr_small", "deformable_detr_small"):
        cases |= detector_cases(vitlab, vitlab_before, name)
    if args.cases:
        cases = {name: pair for name, pair in cases.items() if any(part in name for part in args.cases)}
    rows = []
    for name, (after, before) in cases.items():
        timing = interleaved(after, before, args.rounds, args.calls)
        row = {"case": name, "after_ms": 1000 * timing["mine_s"], "before_ms": 1000 * timing["theirs_s"],
               "ratio_median": timing["speedup_median"], "ratio_min": timing["speedup_min"],
               "ratio_max": timing["speedup_max"]}
        rows.append(row)
        print(f"{name:<32} after {row['after_ms']:8.1f} ms  before {row['before_ms']:8.1f} ms  before/after "
              f"{row['ratio_median']:.3f} ({row['ratio_min']:.3f}–{row['ratio_max']:.3f})", flush=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=False,
                            capture_output=True, text=True).stdout.strip()
    host = machine()
    result = {"command": " ".join(["python", *sys.argv]), "commit_after": commit, "commit_before": args.commit,
              "rounds": args.rounds, "calls": args.calls, "machine": host, "rows": rows}
    lines = [f"# Before ({args.commit}) and after ({commit}), interleaved in one process",
             "", f"`{result['command']}` on {host['cpu']} ({host['cpu_capability']}), {args.threads} threads, torch "
             f"{host['torch']}; {args.rounds} rounds of {args.calls} calls. Ratio: before / after (> 1: after is "
             f"faster).", "", "| case | after ms | before ms | ratio (median) | min–max |",
             "| --- | ---: | ---: | ---: | --- |"]
    lines += [f"| {r['case']} | {r['after_ms']:.1f} | {r['before_ms']:.1f} | {r['ratio_median']:.3f} | "
              f"{r['ratio_min']:.3f}–{r['ratio_max']:.3f} |" for r in rows]
    write_results(RESULTS, args.tag, result, "\n".join(lines) + "\n", beside=args.beside)


if __name__ == "__main__":
    main()
