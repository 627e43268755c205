"""vitlab's DETR and Deformable DETR against Hugging Face's DetrForObjectDetection and
DeformableDetrForObjectDetection with the same configuration and the same weights: inference and a training step
(forward, Hungarian matching, set loss with auxiliary losses, backward, AdamW), timed interleaved in one process.

    python benchmarks/detr_speed.py                 # DETR's two configurations, 15 rounds
    python benchmarks/detr_speed.py --configs deformable_small deformable_r50 --tag deformable_detr_speed
    python benchmarks/detr_speed.py --quick         # a smoke run

Configurations: `small`, the shape of detr_small (ResNet-18 cut after layer3, 3 + 3 layers of width 128, 25
queries) on batches of 8 scenes of 128 × 128; `r50`, the paper's DETR-R50 (6 + 6 layers of width 256, 100 queries)
on 2 images of 384 × 384; `deformable_small`, the shape of deformable_detr_small (ResNet-18 C3–C5 + C6, 3 + 3
layers of width 128, 25 queries) on batches of 4 scenes of 128 × 128; `deformable_r50`, the paper's Deformable
DETR (6 + 6 layers of width 256, FFN 1024, 300 queries) on 2 images of 384 × 384, with transformers' pure-PyTorch
deformable attention (its custom kernels are CUDA ones). The losses are each paper's: cross-entropy for DETR, the
sigmoid focal loss with class cost 2 for Deformable DETR (transformers weighs its focal term 1, vitlab 2: the same
work). Hugging Face's model is built from its config with random weights, saved with
`save_pretrained`, and loaded into vitlab (so both compute the same numbers), and both train the same weights:
frozen batch norm, the stem and layer1 frozen, the rest trained (`train_the_same_backbone_weights` says why
Hugging Face's own choice differs). Each round times vitlab then Hugging Face, alternating which goes first;
the table gives the median of the per-round ratios and their spread (min–max). Writes
benchmarks/results/detr_speed.json and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
RESULTS = Path(__file__).parent / "results"

CONFIGS = {
    "small": {"family": "detr", "backbone": "resnet18", "stage": 3, "dim": 128, "heads": 8, "layers": 3, "ffn": 512,
              "queries": 25, "classes": 10, "batch": 8, "size": 128},
    "r50": {"family": "detr", "backbone": "resnet50", "stage": 4, "dim": 256, "heads": 8, "layers": 6, "ffn": 2048,
            "queries": 100, "classes": 91, "batch": 2, "size": 384},
    "deformable_small": {"family": "deformable_detr", "backbone": "resnet18", "dim": 128, "heads": 8, "layers": 3,
                         "ffn": 512, "queries": 25, "classes": 10, "batch": 4, "size": 128},
    "deformable_r50": {"family": "deformable_detr", "backbone": "resnet50", "dim": 256, "heads": 8, "layers": 6,
                       "ffn": 1024, "queries": 300, "classes": 91, "batch": 2, "size": 384},
}
DEFAULT_CONFIGS = ("small", "r50")


def huggingface_model(c: dict, folder: Path):
    import transformers

    if c["family"] == "deformable_detr":
        config = transformers.DeformableDetrConfig(
            use_timm_backbone=True, backbone=c["backbone"], use_pretrained_backbone=False,
            disable_custom_kernels=True, d_model=c["dim"], encoder_layers=c["layers"], decoder_layers=c["layers"],
            encoder_attention_heads=c["heads"], decoder_attention_heads=c["heads"], encoder_ffn_dim=c["ffn"],
            decoder_ffn_dim=c["ffn"], num_queries=c["queries"], num_labels=c["classes"], auxiliary_loss=True,
            dropout=0.0, class_cost=2)
        torch.manual_seed(0)
        model = transformers.DeformableDetrForObjectDetection(config)
        model.save_pretrained(folder)
        return model
    if c["backbone"] == "resnet18":
        resnet = transformers.ResNetConfig(depths=[2, 2, 2, 2], layer_type="basic", hidden_sizes=[64, 128, 256, 512],
                                           out_features=[f"stage{c['stage']}"])
        backbone = {"use_timm_backbone": False, "backbone_config": resnet}
    else:
        backbone = {"use_timm_backbone": True, "backbone": "resnet50"}
    config = transformers.DetrConfig(
        use_pretrained_backbone=False, d_model=c["dim"], encoder_layers=c["layers"], decoder_layers=c["layers"],
        encoder_attention_heads=c["heads"], decoder_attention_heads=c["heads"], encoder_ffn_dim=c["ffn"],
        decoder_ffn_dim=c["ffn"], num_queries=c["queries"], num_labels=c["classes"], auxiliary_loss=True,
        dropout=0.0, **backbone)
    torch.manual_seed(0)
    model = transformers.DetrForObjectDetection(config)
    model.save_pretrained(folder)
    return model


def train_the_same_backbone_weights(hf, ours) -> None:
    """Give Hugging Face's backbone the trainable weights of vitlab's (the paper's: all but the stem and layer1).

    transformers (5.x) decides which backbone weights train by names: with a timm backbone it freezes none (its
    check looks for "resnet" in the backbone type "timm_backbone"), with its own ResNet all of them (it looks for
    "stage.1" in names that read "stages.1"). Either way a training step would not be the same computation."""
    from vitlab.interop.set_prediction_keys import hf_backbone_key

    trainable = {name: p.requires_grad for name, p in ours.named_parameters()}
    for name, param in hf.model.backbone.model.named_parameters():
        param.requires_grad_(trainable.get("backbone." + hf_backbone_key(name), False))


def batch(c: dict, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(c["batch"], 3, c["size"], c["size"], generator=generator)
    targets = []
    for _ in range(c["batch"]):
        m = 4
        wh = 0.1 + 0.3 * torch.rand(m, 2, generator=generator)
        centre = wh / 2 + (1 - wh) * torch.rand(m, 2, generator=generator)
        targets.append({"labels": torch.randint(0, c["classes"], (m,), generator=generator),
                        "boxes": torch.cat([centre, wh], 1)})
    return images, targets


def compare(name: str, c: dict, rounds: int, calls: int) -> list[dict]:
    from benchmarks.harness import interleaved
    from vitlab.interop import model_from_checkpoint
    from vitlab.models.detr_criterion import SetCriterion
    from vitlab.models.detr_matcher import HungarianMatcher

    with tempfile.TemporaryDirectory() as folder:
        hf = huggingface_model(c, Path(folder))
        ours = model_from_checkpoint(folder)
    train_the_same_backbone_weights(hf, ours)
    images, targets = batch(c)
    ours.eval()
    hf.eval()
    with torch.inference_mode():  # the same numbers, or the timing means nothing
        torch.testing.assert_close(ours(images).pred_boxes, hf(pixel_values=images).pred_boxes, atol=1e-4,
                                   rtol=1e-4)
    hf_labels = [{"class_labels": t["labels"], "boxes": t["boxes"]} for t in targets]
    focal = c["family"] == "deformable_detr"
    criterion = SetCriterion(c["classes"], HungarianMatcher(2.0 if focal else 1.0, focal=focal),
                             class_weight=2.0 if focal else 1.0, focal=focal)
    hf_optimizer = torch.optim.AdamW([p for p in hf.parameters() if p.requires_grad], lr=1e-5)
    our_optimizer = torch.optim.AdamW([p for p in ours.parameters() if p.requires_grad], lr=1e-5)

    def our_infer():
        with torch.inference_mode():
            ours(images)

    def hf_infer():
        with torch.inference_mode():
            hf(pixel_values=images)

    def our_train():
        loss = criterion(ours(images), targets)["loss"]
        our_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        our_optimizer.step()

    def hf_train():
        loss = hf(pixel_values=images, labels=hf_labels).loss
        hf_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        hf_optimizer.step()

    rows = []
    for mode, mine, theirs, train in (("inference", our_infer, hf_infer, False), ("train step", our_train, hf_train,
                                                                                True)):
        ours.train(train)
        hf.train(train)
        timing = interleaved(mine, theirs, rounds, calls)
        rows.append({"config": name, "mode": mode, "batch": c["batch"], "size": c["size"],
                     "vitlab_ms": 1000 * timing["mine_s"], "hf_ms": 1000 * timing["theirs_s"],
                     "speedup_median": timing["speedup_median"], "speedup_min": timing["speedup_min"],
                     "speedup_max": timing["speedup_max"], "rounds": rounds})
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}), flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| configuration | batch | mode | vitlab ms | HF ms | HF time / vitlab time (median, min–max) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['config']} ({r['size']} px) | {r['batch']} | {r['mode']} | {r['vitlab_ms']:.0f} | "
                     f"{r['hf_ms']:.0f} | {r['speedup_median']:.2f}× ({r['speedup_min']:.2f}–{r['speedup_max']:.2f}) |")
    return "\n".join(lines)


def table_of(record: dict) -> str:
    """benchmarks/results/<tag>.md from what the results file records (benchmarks/report.py renders it the same
    way): the table and the machine with its ISA."""
    from benchmarks.harness import cpu_and_isa

    host = record["machine"]
    return (markdown(record["rows"]) + f"\n\n{cpu_and_isa(host)}, "
            f"{host['threads']} threads, torch {host['torch']}, transformers {host.get('transformers', '—')}, fp32\n")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(DEFAULT_CONFIGS))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=3, help="calls per timing (its median is taken)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes, 2 rounds of 1 call")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--tag", default="detr_speed")
    from benchmarks.harness import add_beside_option, machine, write_results

    add_beside_option(parser)
    args = parser.parse_args(argv)
    rows = []
    for name in args.configs:
        c = dict(CONFIGS[name])
        if args.quick:
            c.update(size=64, batch=2, layers=2 if c["family"] == "deformable_detr" else 1, queries=5)
        rows += compare(name, c, 2 if args.quick else args.rounds, 1 if args.quick else args.calls)
    record = {"machine": machine(), "rows": rows}
    write_results(Path(args.out), args.tag, record, table_of(record), beside=args.beside)
    return rows


if __name__ == "__main__":
    main()
