"""Denoising training (DN-DETR) on the scenes: each detector with and without denoising queries, back to back,
COCO AP50 on val against training minutes.

    python benchmarks/denoising_detection.py                          # detr_small (16 epochs) then deformable (6)
    python benchmarks/denoising_detection.py --models detr_small --epochs 8
    python benchmarks/denoising_detection.py --quick                  # a smoke run on a tiny set

Every run is a full `vitlab train --task detection` from random weights with detr_scenes.py's recipe (batch 4,
lr 2e-4 for the backbone too, no dropout, cosine over the epochs), evaluated on the val scenes after every epoch;
the test scenes are scored once, on the weights val selected. The pair differs only in `--dn-groups` (0 against
--dn-groups, DN-DETR's 5 by default) with `--dn-box-noise 0.4 --dn-label-noise 0.2`, the paper's. Both runs of a
model go one after the other in this process, so they share the machine's state. Denoising costs time (more
decoder queries), so the curves are compared at equal training minutes: each evaluation with denoising against
the run without it interpolated to the same minute.

The bars (for 60-minute runs): detr_small with denoising at least +0.08 AP50 over the run without it at every
evaluation after 20 minutes, and 0.5 AP50 within 60 minutes; deformable_detr_small 0.68 within 60 minutes.
Writes benchmarks/results/denoising_detection.{json,md,png}; a model's earlier pair is kept when another is run.
Run one benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
RESULTS = Path(__file__).parent / "results"
MODELS = ("detr_small", "deformable_detr_small")
VARIANTS = ("plain", "denoising")  # each pair: the model without denoising queries, then with them
# epochs filling about 60 minutes without denoising on the Xeon detr_scenes.py measured on; machines differ (an AMD
# EPYC with AVX-512 ran 24 detr_small epochs in 53 minutes; one with AVX2 8 deformable ones in 52): pass
# --epochs for yours
EPOCHS = {"detr_small": 16, "deformable_detr_small": 6}
GAIN_AFTER_MIN, GAIN = 20.0, 0.08  # detr_small: the gain denoising must keep at every evaluation past 20 minutes
TARGET = {"detr_small": 0.5, "deformable_detr_small": 0.68}  # AP50 within 60 minutes


def at_minute(curve: list[dict], minute: float, key: str = "map_50") -> float | None:
    """A curve's `key` (AP50) at `minute` of training, linear between its evaluations; None outside them."""
    for before, after in itertools.pairwise(curve):
        if before["train_min"] <= minute <= after["train_min"]:
            share = (minute - before["train_min"]) / max(after["train_min"] - before["train_min"], 1e-9)
            return before[key] + share * (after[key] - before[key])
    if curve and abs(curve[-1]["train_min"] - minute) < 1e-9:
        return curve[-1][key]
    return None


def compare(plain: dict, denoised: dict, model: str, budget_min: float) -> dict:
    """Each evaluation of the denoised run against the plain run at the same minute, and the bars."""
    rows = []
    for row in denoised["curve"]:
        other = at_minute(plain["curve"], row["train_min"])
        rows.append({"train_min": row["train_min"], "epoch": row["epoch"], "map_50": row["map_50"],
                     "plain_map_50": other, "gain": None if other is None else row["map_50"] - other})
    late = [row for row in rows if row["train_min"] >= GAIN_AFTER_MIN and row["gain"] is not None]
    reached = [row for row in denoised["curve"] if row["map_50"] >= TARGET[model]]
    bars = {"target_ap50": TARGET[model], "budget_min": budget_min,
            "target_reached_at_min": reached[0]["train_min"] if reached else None,
            "target_met": bool(reached) and reached[0]["train_min"] <= budget_min,
            "runs_reached_min": min(plain["curve"][-1]["train_min"], denoised["curve"][-1]["train_min"])}
    if model == "detr_small":
        bars.update(gain_required=GAIN, gain_after_min=GAIN_AFTER_MIN, evaluations_after=len(late),
                    smallest_gain_after=min((row["gain"] for row in late), default=None),
                    gain_met=bool(late) and all(row["gain"] >= GAIN for row in late))
    return {"rows": rows, "bars": bars}


def table_of(record: dict) -> str:
    """The results file's table, from what the file records (benchmarks/report.py renders it the same way)."""
    results = record["results"]
    def where(run: dict) -> str:
        machine = run["machine"]
        return f"{machine['cpu']} ({machine['cpu_capability']}), {machine['threads']} threads, commit {run['commit']}"

    parts = []
    for model, pair in results.items():
        # the first pairs recorded one provenance for both runs (back to back); later ones one per run
        runs = [pair] if "machine" in pair else [pair[v] for v in VARIANTS]
        places = list(dict.fromkeys(where(run) for run in runs))
        parts.append(f"{model}: " + (places[0] if len(places) == 1 else
                                     " and ".join(f"{v} on {where(pair[v])}" for v in VARIANTS)
                                     + " (different machines or commits: compare at equal epochs)"))
    head = "Denoising queries on the scenes, each pair run back to back; " + "; ".join(parts)
    return markdown(results, head)


def markdown(results: dict[str, dict], head: str) -> str:
    lines = [head, "", "| model | denoising | epochs | training min | images/s | AP50 after each epoch | "
             "best val AP50 | test AP50 (selected on val) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for model, pair in results.items():
        for name in ("plain", "denoising"):
            run = pair[name]
            curve = run["curve"]
            groups = run["options"].get("dn_groups", 0)
            lines.append(f"| {model} | {f'{groups} groups' if groups else 'off'} | {curve[-1]['epoch']} | "
                         f"{curve[-1]['train_min']:.1f} | {run['images_per_s']:.1f} | "
                         + ", ".join(f"{row['map_50']:.3f}" for row in curve)
                         + f" | {max(row['map_50'] for row in curve):.3f} | "
                           f"{run['test'].get('map_50', float('nan')):.3f} |")
    lines += ["", "At equal training minutes (the run without denoising interpolated to each evaluation of the run "
              "with it):", "", "| model | minute | AP50 with denoising | without | gain |",
              "| --- | --- | --- | --- | --- |"]
    for model, pair in results.items():
        for row in pair["comparison"]["rows"]:
            plain = "—" if row["plain_map_50"] is None else f"{row['plain_map_50']:.3f}"
            gain = "—" if row["gain"] is None else f"{row['gain']:+.3f}"
            lines.append(f"| {model} | {row['train_min']:.1f} | {row['map_50']:.3f} | {plain} | {gain} |")
    lines += ["", "| model | bar | measured |", "| --- | --- | --- |"]
    for model, pair in results.items():
        bars = pair["comparison"]["bars"]
        if "gain_required" in bars:
            smallest = bars["smallest_gain_after"]
            lines.append(f"| {model} | ≥ +{bars['gain_required']:.2f} AP50 at every evaluation after "
                         f"{bars['gain_after_min']:.0f} min | "
                         + ("no evaluation after it" if smallest is None else
                            f"{'met' if bars['gain_met'] else 'missed'}: smallest {smallest:+.3f} over "
                            f"{bars['evaluations_after']} evaluations")
                         + f" (runs of {bars['runs_reached_min']:.0f} min) |")
        reached = bars["target_reached_at_min"]
        lines.append(f"| {model} | ≥ {bars['target_ap50']} AP50 within {bars['budget_min']:.0f} min | "
                     + (f"reached at {reached:.1f} min" if reached is not None else
                        "not reached: best {map_50:.3f} at {train_min:.1f} min, in a run of {minutes:.0f} min".format(
                            **max(pair["denoising"]["curve"], key=lambda row: row["map_50"]),
                            minutes=pair["denoising"]["curve"][-1]["train_min"]))
                     + " |")
    return "\n".join(lines)


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for model, pair in results.items():
        for name, style in (("plain", "--"), ("denoising", "-")):
            curve = pair[name]["curve"]
            ax.plot([row["train_min"] for row in curve], [row["map_50"] for row in curve], style, marker="o", ms=3,
                    label=f"{model}, {'denoising' if name == 'denoising' else 'without'}")
        ax.axhline(TARGET[model], color="gray", lw=0.8, ls=":")
    ax.set_xlabel("training time (min, 2 CPU cores)")
    ax.set_ylabel("scenes val AP50")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.suptitle("Denoising queries (DN-DETR) on vitlab make-scenes, from random weights")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--data", default="data/scenes", help="the scenes folder (made there if missing)")
    parser.add_argument("--epochs", type=int, help="epochs of every run (default: 16 for detr_small, 6 for "
                        "deformable_detr_small, about 60 minutes each without denoising on a 2-core Xeon; "
                        "machines differ)")
    parser.add_argument("--dn-groups", type=int, default=5, help="denoising groups of the denoised runs")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-4, help="lr, backbone included")
    parser.add_argument("--budget-min", type=float, default=60.0, help="the minutes the AP50 target is set for")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a tiny set, one epoch")
    parser.add_argument("--out", default=str(RESULTS / "denoising_detection.json"))
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS),
                        help="which runs of each pair to make now (a pair may span sessions: each run is saved "
                        "into the results file as soon as it ends)")
    parser.add_argument("--runs", default=str(RESULTS / "runs" / "denoising_detection"),
                        help="the runs' folders, one per model and variant: a run killed midway continues from its "
                        "last epoch when the command is given again, a finished one is read as it is")
    from benchmarks.harness import add_beside_option, provenance, write_json, write_table

    add_beside_option(parser)
    args = parser.parse_args(argv)
    from benchmarks.detr_scenes import ensure_scenes, finished, run_detr

    data = ensure_scenes(Path(args.data), args.quick)
    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.is_file() else {}
    results: dict[str, dict] = dict(previous.get("results", {}))
    # halves of pairs not finished yet: "results" keeps the last complete pair of each model (the one the pages
    # show) until its successor is complete
    pending: dict[str, dict] = dict(previous.get("pending", {}))
    options = {"batch_size": args.batch_size, "lr": args.lr, "backbone_lr": args.lr, "dropout": 0.0}
    if args.quick:
        options.update(eval_batch_size=8, num_queries=8)
    denoise = {"dn_groups": args.dn_groups, "dn_box_noise": 0.4, "dn_label_noise": 0.2}

    def save() -> None:
        record = {"data": str(data), "budget_min": args.budget_min, "results": results, "beside": args.beside}
        if pending:
            record["pending"] = pending
        if "table" in previous:
            record["table"] = previous["table"]
        write_json(out, record, beside=args.beside)

    for model in args.models:
        epochs = 1 if args.quick else args.epochs or EPOCHS[model]
        pair = dict(pending.get(model, {}))
        if any(run["options"]["epochs"] != epochs for run in pair.values()):
            pair = {}  # a pair compares runs of one length: an earlier run of another length is not its half
        for variant in args.variants:
            folder = Path(args.runs) / f"{model}-{variant}"
            if variant in pair and finished(folder):
                print(f"{model} {variant}: recorded earlier, kept with the provenance of its own run")
                continue
            run_options = {**options, **denoise} if variant == "denoising" else options
            run = run_detr(data, epochs, run_options, str(folder), model=model, continue_run=True)
            pair[variant] = {**run, **provenance(beside=args.beside)}  # each run its own: a pair may span sessions
            pending[model] = pair
            save()
            print(f"{model} {variant}: saved into {out}")
        if all(v in pair for v in VARIANTS):
            results[model] = {**pair, "comparison": compare(pair["plain"], pair["denoising"], model, args.budget_min)}
            pending.pop(model, None)
    results = {model: results[model] for model in MODELS if model in results}
    if any(model in pending for model in args.models):
        save()
        print("a pair is not complete yet: give the command again with the other --variants to finish it")
        return results
    table = table_of({"results": results})
    print(table)
    previous["table"] = table
    save()
    write_table(out.with_suffix(".md"), table + "\n")
    plot(results, out.with_suffix(".png"))
    print(f"wrote {out}, {out.with_suffix('.md')} and {out.with_suffix('.png')}")
    return results


if __name__ == "__main__":
    main()
