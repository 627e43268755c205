"""Training through the lean last block against the model's own forward: the engine's own step, interleaved in one
process.

    python benchmarks/lean_training.py              # the default recipe's model at batch 128, ViT-S/16 at batch 32
    python benchmarks/lean_training.py --smoke      # every path once, no timing loops

Each case is one optimizer step of `vitlab train`'s loop (`_Loop._train_on`: autocast, the loss, backward, gradient
clipping, AdamW, the schedule) on random images, with the model's training view (engine/lean.py: the last block
makes the class token's rows alone) against the model itself. The two share nothing but the starting weights
(two copies, each with its own optimizer), so each steps on its own. The table gives each one's median time per
step and the median of the per-round ratios full / lean (> 1: lean is faster). Writes
benchmarks/results/lean_training.{json,md} with the command, the commit, the CPU and its ISA.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: benchmarks/ is a package there
import vitlab
from benchmarks.harness import add_beside_option, provenance, write_results
from benchmarks.harness.clock import interleaved
from vitlab.engine.config import LoopConfig
from vitlab.engine.lean import LeanTraining, training_view
from vitlab.engine.loop import TaskData, _Loop
from vitlab.engine.run import RunDir
from vitlab.tasks.classification.recipes import RECIPES

RESULTS = Path(__file__).parent / "results"
DEFAULT = RECIPES["fashion-mnist"]
# name -> (model, batch, image shape): the default recipe's model and batch, and ViT-S/16 at batch 32
CASES = {
    "default_recipe": (DEFAULT["task"]["model"], DEFAULT["loop"]["batch_size"], (1, 28, 28)),
    "vit_small_patch16_224": ("vit_small_patch16_224", 32, (3, 224, 224)),
}


class Classifying:
    """The loop's view of a classification task, cut to what one step needs: cross-entropy on the logits."""

    best, sample_name, unused_parameters = ("val_acc", "max"), "images", False

    def loss(self, model, batch):
        images, labels = batch
        return {"loss": F.cross_entropy(model(images), labels)}

    def optimized_modules(self, model):
        return {"model": model}

    def lr_scales(self):
        return {}

    def num_samples(self, batch):
        return len(batch[0])

    def train_step(self, model, batch, stepper):
        return None

    def evaluate(self, model, data):
        return {}


class OneBatch:
    """An epoch loader of one fixed batch (the loop needs a length and an order to build its schedule)."""

    def __init__(self, batch, steps: int) -> None:
        self.batch, self.steps = batch, steps

    def __len__(self) -> int:
        return self.steps

    def set_epoch(self, epoch: int) -> None:
        pass

    def __iter__(self):
        return iter([self.batch] * self.steps)


def engine_step(model, batch, lean: bool, folder: Path, steps: int):
    """A callable making one step of the engine's loop on `batch`, training `model` (lean: through its view)."""
    recipe = {key: value for key, value in DEFAULT["loop"].items() if key != "epochs"}
    config = dataclasses.replace(LoopConfig(), **recipe, epochs=None, steps=steps, warmup_steps=steps // 10)
    loop = _Loop(Classifying(), model, TaskData(OneBatch(batch, steps), None), config, RunDir(folder), {}, None)
    loop.train_model = training_view(model) if lean else model
    assert isinstance(loop.train_model, LeanTraining) == lean  # the model qualifies: the case measures the path
    model.train()
    return lambda: loop._train_on(batch, True)


def measure(name: str, rounds: int, calls: int, smoke: bool, folder: Path) -> dict:
    model_name, batch_size, shape = CASES[name]
    torch.manual_seed(0)
    full_model = vitlab.create_model(model_name, num_classes=10, in_chans=shape[0])
    lean_model = copy.deepcopy(full_model)
    batch = (torch.randn(batch_size, *shape), torch.randint(0, 10, (batch_size,)))
    steps = 2 + 2 * rounds * calls
    lean = engine_step(lean_model, batch, True, folder / "lean", steps)
    full = engine_step(full_model, batch, False, folder / "full", steps)
    if smoke:  # one step each way from the same weights on the same batch: the same loss, up to float rounding
        return {"case": name, "model": model_name, "batch": batch_size, "smoke": True,
                "lean_loss": float(lean()["loss"]), "full_loss": float(full()["loss"])}
    timing = interleaved(lean, full, rounds, calls)
    return {"case": name, "model": model_name, "batch": batch_size, "image": list(shape),
            "lean_ms": round(1000 * timing["mine_s"], 2), "full_ms": round(1000 * timing["theirs_s"], 2),
            "speedup_median": round(timing["speedup_median"], 3), "speedup_min": round(timing["speedup_min"], 3),
            "speedup_max": round(timing["speedup_max"], 3)}


def table(rows: list[dict]) -> str:
    lines = ["| case | model | batch | lean ms/step | full ms/step | full / lean (median) | min–max |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    lines += [f"| {r['case']} | {r['model']} | {r['batch']} | {r['lean_ms']:.1f} | {r['full_ms']:.1f} | "
              f"{r['speedup_median']:.3f} | {r['speedup_min']:.3f}–{r['speedup_max']:.3f} |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--smoke", action="store_true", help="every path once, no timing and no results file")
    add_beside_option(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        rows = [measure(name, args.rounds, args.calls, args.smoke, Path(folder) / name) for name in args.cases]
    if args.smoke:
        for row in rows:
            print(f"smoke: {row['case']}: first step's loss lean {row['lean_loss']:.6f}, full {row['full_loss']:.6f}")
        return rows
    prov = provenance(beside=args.beside)
    host = prov["machine"]
    text = (f"# Training through the lean last block (the engine's own step), interleaved in one process\n\n"
            f"`{prov['command']}` at {prov['commit']} on {host['cpu']} ({host['cpu_capability']}), {args.threads} "
            f"threads, beside: {args.beside}; {args.rounds} rounds of {args.calls} steps each way. full / lean > 1: "
            f"the lean last block is faster.\n\n{table(rows)}\n")
    write_results(RESULTS, "lean_training", {"threads": args.threads, "rounds": args.rounds, "calls": args.calls,
                                             "rows": rows}, text, beside=args.beside)
    return rows


if __name__ == "__main__":
    main()
