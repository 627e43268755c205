"""vitlab's Deformable DETR against the official code (fundamentalvision/Deformable-DETR) with the same weights: an
official model with random weights is saved as its training script saves checkpoints ({"model": state_dict,
"args": ...}), read back by `vitlab.interop.model_from_checkpoint`, and both run on the same padded batch.

    python benchmarks/official_deformable_detr_parity.py --repo PATH/TO/Deformable-DETR

The official repository is not on PyPI and its attention is a compiled CUDA op, so this is a script that takes a
checkout, not a test: the op is replaced by the repository's own pure-PyTorch `ms_deform_attn_core_pytorch`
(its `grid_sample` per level), `torchvision`'s version check in util/misc.py is passed, and no backbone weights
are downloaded. Checked for the plain model, with box refinement, and two-stage: the logits, the boxes and every
auxiliary layer's, and the official SetCriterion's weighted loss (focal term weighed 2, the paper's) against
vitlab's on the same outputs and targets. Writes benchmarks/results/official_deformable_detr_parity.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
RESULTS = Path(__file__).parent / "results"
VARIANTS = {"plain": {}, "box_refine": {"with_box_refine": True},
            "two_stage": {"with_box_refine": True, "two_stage": True}}


def import_official(repo: Path):
    """The official `models` package, its CUDA op replaced by its own PyTorch core."""
    import torchvision

    sys.path.insert(0, str(repo))
    op = types.ModuleType("MultiScaleDeformableAttention")  # the compiled extension's name

    def forward(value, shapes, level_start, locations, weights, im2col_step):
        from models.ops.functions.ms_deform_attn_func import ms_deform_attn_core_pytorch

        return ms_deform_attn_core_pytorch(value, shapes, locations, weights)

    op.ms_deform_attn_forward = forward
    sys.modules["MultiScaleDeformableAttention"] = op
    version = torchvision.__version__
    torchvision.__version__ = "0.99"  # util/misc.py reads "0.29.1"[:3] as 0.2 and imports what 0.5 removed
    try:
        import util.misc
    finally:
        torchvision.__version__ = version
    util.misc.is_main_process = lambda: False  # the backbone asks for ImageNet weights on the main process only
    import models.deformable_detr

    return models.deformable_detr, util.misc


def official_args(**overrides) -> argparse.Namespace:
    """main.py's defaults (the paper's model) with a few overrides."""
    args = dict(dataset_file="coco", device="cpu", lr_backbone=2e-5, masks=False, num_feature_levels=4,
                backbone="resnet50", dilation=False, position_embedding="sine", hidden_dim=256, nheads=8,
                enc_layers=6, dec_layers=6, dim_feedforward=1024, dropout=0.1, dec_n_points=4, enc_n_points=4,
                two_stage=False, with_box_refine=False, num_queries=300, aux_loss=True, set_cost_class=2.0,
                set_cost_bbox=5.0, set_cost_giou=2.0, cls_loss_coef=2.0, bbox_loss_coef=5.0, giou_loss_coef=2.0,
                mask_loss_coef=1.0, dice_loss_coef=1.0, focal_alpha=0.25, frozen_weights=None)
    args.update(overrides)
    return argparse.Namespace(**args)


def randomise(model: torch.nn.Module, seed: int) -> None:
    """Random weights everywhere, batch-norm statistics included, so that no tensor is left at its init."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if not tensor.is_floating_point():
                continue
            noise = torch.randn(tensor.shape, generator=generator) * 0.02
            if name.endswith(("running_var", "weight")) and tensor.ndim == 1:
                tensor.copy_(1 + noise.abs())
            else:
                tensor.add_(noise)


def check(variant: str, official, misc, size: int, seed: int) -> dict:
    from vitlab.interop import model_from_checkpoint
    from vitlab.models.detr_criterion import SetCriterion
    from vitlab.models.detr_matcher import HungarianMatcher

    args = official_args(**VARIANTS[variant])
    torch.manual_seed(seed)
    theirs, their_criterion, _ = official.build(args)
    randomise(theirs, seed)
    theirs.eval()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "checkpoint.pth"
        torch.save({"model": theirs.state_dict(), "args": args, "epoch": 49}, path)
        ours = model_from_checkpoint(str(path))
    ours.eval()
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(2, 3, size, size, generator=generator)
    mask = torch.zeros(2, size, size, dtype=torch.bool)
    mask[1, :, size * 3 // 4:] = True  # the second image is narrower: its right quarter is padding
    mask[1, size * 5 // 8:] = True
    images[mask[:, None].expand_as(images)] = 0.0
    with torch.no_grad():
        their_out = theirs(misc.NestedTensor(images, mask))
        our_out = ours(images, mask)
    row = {"variant": variant, "size": size, "params": sum(p.numel() for p in ours.parameters()),
           "official_params": sum(p.numel() for p in theirs.parameters()),
           "logits_max_diff": (our_out.logits - their_out["pred_logits"]).abs().max().item(),
           "boxes_max_diff": (our_out.pred_boxes - their_out["pred_boxes"]).abs().max().item(),
           "aux_max_diff": max(max((ours_aux.logits - t["pred_logits"]).abs().max().item(),
                                   (ours_aux.pred_boxes - t["pred_boxes"]).abs().max().item())
                               for ours_aux, t in zip(our_out.aux_outputs, their_out["aux_outputs"]))}
    targets = [{"labels": torch.tensor([3, 17]), "boxes": torch.tensor([[0.3, 0.4, 0.2, 0.3], [0.7, 0.6, 0.3, 0.2]])},
               {"labels": torch.tensor([1]), "boxes": torch.tensor([[0.4, 0.4, 0.3, 0.4]])}]
    their_losses = their_criterion(their_out, targets)
    weights = their_criterion.weight_dict
    their_total = sum(their_losses[k] * weights[k] for k in their_losses if k in weights)
    criterion = SetCriterion(91, HungarianMatcher(2.0, 5.0, 2.0, focal=True), class_weight=2.0, focal=True)
    our_total = criterion(our_out, targets)["loss"]
    row.update(official_loss=their_total.item(), vitlab_loss=our_total.item())
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True, help="a checkout of fundamentalvision/Deformable-DETR")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--size", type=int, default=256, help="image side in pixels")
    parser.add_argument("--out", default=str(RESULTS / "official_deformable_detr_parity.json"))
    from benchmarks.harness import add_beside_option, machine, write_json

    add_beside_option(parser)
    args = parser.parse_args(argv)
    official, misc = import_official(Path(args.repo).resolve())
    rows = [check(variant, official, misc, args.size, seed) for seed, variant in enumerate(args.variants)]
    lines = ["| variant | parameters (vitlab = official) | logits max diff | boxes max diff | aux layers max diff | "
             "loss official / vitlab |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['params']:,} = {r['official_params']:,} | {r['logits_max_diff']:.1e} | "
                     f"{r['boxes_max_diff']:.1e} | {r['aux_max_diff']:.1e} | {r['official_loss']:.5f} / "
                     f"{r['vitlab_loss']:.5f} |")
    table = "\n".join(lines)
    print(table)
    write_json(Path(args.out), {"machine": machine(), "rows": rows, "table": table}, beside=args.beside)
    return rows


if __name__ == "__main__":
    main()
