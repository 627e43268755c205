"""Image restoration on the loop: IPT's multi-task training (Chen et al. 2021, §3.2), and the EDSR baseline.

Every batch is one task's: patches of the training photographs, degraded on the fly (data/degradations.py), taken
through that task's head, the shared body and its tail; the tasks come in turn. The loss is L1 between the output
and the clean patch, plus optionally the paper's contrastive term on the decoder's features (eq. 4: features of
patches from one photograph are pulled together, others pushed apart; the supervised contrastive loss of Khosla
et al. 2020 with the photograph as the label). Evaluation restores whole test images (or their centres) tile by
tile and scores them as IPT does: PSNR and SSIM on the Y channel, a border of the scale shaved, outputs quantised
to 8 bits; RGB PSNR beside them.

A batch is (lq (B, 3, p, p), hq (B, 3, p·s, p·s) in [0, 1], task (B,)[, photograph (B,)]).
"""

from __future__ import annotations

import inspect
import math
import warnings
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ...data.degradations import baseline, scale_of
from ...data.photos import packages, photo_paths
from ...data.restoration import RestorationPairs, RestorationPatches, TaskBatchLoader, image_files, read_photos
from ...data.split import split_indices
from ...engine.distributed import DistInfo, all_reduce_sum
from ...engine.loop import TaskData
from ...engine.options import OptionError
from ...models.registry import create_model, get_config
from ..base import Task, register_task, release_overrides, with_absolute_paths
from .config import RestorationConfig, RestorationEvalOptions, RestorationPredictOptions, RestorationServeOptions
from .metrics import restoration_scores

METRICS = ("psnr_y", "ssim_y", "psnr_rgb")


def supervised_contrastive(features: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """features (B, D), labels (B,) -> the mean over anchors with a positive (another item of the same label) of
    −mean_p log softmax_{a ≠ i}(cos(z_i, z_a) / τ)[p]; 0 (with a gradient path) when no anchor has one."""
    z = F.normalize(features, dim=1)
    self_mask = torch.eye(len(z), dtype=torch.bool, device=z.device)
    log_prob = (z @ z.T / temperature).masked_fill(self_mask, -math.inf).log_softmax(dim=1)
    positive = (labels[:, None] == labels[None, :]) & ~self_mask
    count = positive.sum(dim=1)
    anchors = count > 0
    if not anchors.any():
        return features.sum() * 0.0
    per_anchor = log_prob.masked_fill(~positive, 0.0).sum(dim=1)[anchors] / count[anchors]
    return -per_anchor.mean()


def find_photographs(data: str, eval_data: str | None = None
                     ) -> tuple[list[Path], list[Path] | None, list[Path] | None]:
    """(train, val or None, test or None) files of --data: fetch-photos' folder (its train and test splits), a
    folder with train/ and val/ and/or test/, or one folder of images (all for training); --eval-data replaces the
    test files. Where there is no val part the task holds some training photographs out."""
    root = Path(data)
    if not root.is_dir():
        raise FileNotFoundError(f"no photograph folder at {root}; `vitlab fetch-photos --out {root}` makes one")
    val = None
    if any((root / package).is_dir() for package in packages()):
        train, test = photo_paths("train", root), photo_paths("test", root)
    elif (root / "train").is_dir():
        train = image_files(root / "train")
        val = image_files(root / "val") if (root / "val").is_dir() else None
        test = image_files(root / "test") if (root / "test").is_dir() else None
    else:
        train, test = image_files(root), None
    if eval_data:
        test = image_files(eval_data)
    return train, val, test


@register_task
class RestorationTask(Task):
    name: ClassVar[str] = "restoration"
    order: ClassVar[int] = 50
    commands: ClassVar[tuple[str, ...]] = ("restore",)
    EvalOptions: ClassVar[type] = RestorationEvalOptions
    PredictOptions: ClassVar[type] = RestorationPredictOptions
    ServeOptions: ClassVar[type] = RestorationServeOptions
    page: ClassVar[str] = "restored"
    model_noun: ClassVar[str] = "a restoration model"
    default_model: ClassVar[str] = "ipt_small"
    Config: ClassVar[type] = RestorationConfig
    best: ClassVar[tuple[str, str]] = ("val_psnr_y", "max")
    int8_guard: ClassVar[dict[str, float]] = {"degradations.*.psnr_y": 0.1}  # dB
    sample_name: ClassVar[str] = "patches"
    resumable: ClassVar[tuple[str, ...]] = ("data", "eval_data")
    unused_parameters: ClassVar[bool] = True  # a step trains one task's head and tail
    inference_module: ClassVar[str] = "vitlab.tasks.restoration.inference"

    def __init__(self, config: RestorationConfig, loop=None, dist: DistInfo | None = None) -> None:
        config = with_absolute_paths(config, "data", "weights", "eval_data")
        super().__init__(config, loop, dist)
        self.tasks = config.tasks

    @classmethod
    def loop_defaults(cls, config: RestorationConfig) -> dict[str, Any]:
        # EDSR's and IPT's fine-tuning recipe, scaled down: Adam without decay, batches of 16 patches, a short
        # warm-up, then cosine
        return {"epochs": 20, "batch_size": 16, "lr": 2e-4, "weight_decay": 0.0, "betas": (0.9, 0.999),
                "warmup_epochs": 0.5, "clip_grad": 1.0}

    # -- data ----------------------------------------------------------------------------------------------------
    def patch_size(self) -> int:
        config = get_config(self.config.model, **release_overrides(self.config))
        return int(getattr(config, "patch_size", 48))

    @classmethod
    def check_data(cls, data: str, **options: Any) -> list[Any]:
        from ...data.checks import check_image_files

        parts = zip(("train", "val", "test"), find_photographs(data))
        return [check_image_files(files, f"{split} images of {data}") for split, files in parts if files]

    def build_data(self, saved: dict[str, Any] | None = None) -> TaskData:
        c, loop, dist = self.config, self.loop, self.dist
        if not c.data:
            raise OptionError("data", "is needed: a folder of photographs (`vitlab fetch-photos --out data/photos` "
                              "gets 49 real ones)")
        train_files, val_files, test_files = find_photographs(c.data, c.eval_data)
        if val_files is None:  # whole photographs held out, so no patch of them is trained on
            kept_idx, held = split_indices([0] * len(train_files), c.val_fraction, loop.seed)
            train_files, val_files = [train_files[i] for i in kept_idx], [train_files[i] for i in held]
            self.split = {"val_from": "train", "val_fraction": c.val_fraction, "seed": loop.seed}
        else:
            self.split = {"val_from": "val"}
        need = self.patch_size() * max(scale_of(name) for name in self.tasks)
        train_files, images = read_photos(train_files, c.halve, c.skip_bad_images)
        val_files, val_images = read_photos(val_files, c.halve, c.skip_bad_images)
        if test_files is not None:
            test_files, test_images = read_photos(test_files, c.halve and not c.eval_data, c.skip_bad_images)
        kept = [(path, image) for path, image in zip(train_files, images) if min(image.shape[-2:]) >= need]
        if not kept:
            raise ValueError(f"no training image of {c.data} has both sides of at least {need} pixels (the patch "
                             f"of the largest scale{', after halving; try --no-halve' if c.halve else ''})")
        if len(kept) < len(images):
            warnings.warn(f"{len(images) - len(kept)} training images are smaller than {need} pixels and are left "
                          f"out", stacklevel=2)
        self.train_files = [str(path) for path, _ in kept]
        self.val_files = [str(path) for path in val_files]
        self.test_files = [str(path) for path in test_files] if test_files is not None else []
        self.split.update({"train": len(self.train_files), "val": len(self.val_files), "test": len(self.test_files)})
        self.train_set = RestorationPatches([image for _, image in kept], self.tasks, self.patch_size(),
                                            c.patches_per_task, with_source=c.contrastive_weight > 0)
        train = TaskBatchLoader(self.train_set, loop.batch_size, loop.seed, dist.rank, dist.world_size, loop.workers)
        val = self.test_sets(val_images, [Path(p).stem for p in val_files])
        test = None if test_files is None else self.test_sets(test_images, [Path(p).stem for p in test_files])
        if saved is not None:
            self._refuse_other_data(saved)
        return TaskData(train=train, val=val, test=test)

    def test_sets(self, images: list[torch.Tensor], names: list[str]) -> dict[str, RestorationPairs]:
        crop = self.config.eval_crop or None
        return {name: RestorationPairs(images, name, crop, self.config.eval_seed, names) for name in self.tasks}

    def run_info(self) -> dict[str, Any]:
        return {"data": {"path": self.config.data, "degradations": list(self.tasks), "train": self.train_files,
                         "val": self.val_files, "test": self.test_files, "split": self.split,
                         "patch_size": self.patch_size()}}

    def _refuse_other_data(self, data: dict[str, Any]) -> None:
        """A resumed run's data (`data`: its config.json's record) must be the data it started on."""
        if [Path(p).name for p in data["train"]] != [Path(p).name for p in self.train_files]:
            raise ValueError(f"the training photographs of this run changed since it started ({len(data['train'])} "
                             f"then, {len(self.train_files)} now); resume on the same data or start a new run")

    # -- model and loss ------------------------------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        c = self.config
        self.model_config()
        chosen = {} if c.global_residual is None else {"global_residual": c.global_residual}
        model = create_model(c.model, **{**release_overrides(self.config), "degradations": self.tasks, **chosen})
        if c.contrastive_weight > 0 and "return_tokens" not in inspect.signature(model.forward).parameters:
            raise OptionError("contrastive_weight", f"needs a transformer's token features (IPT's); {c.model} has "
                                                    f"none")
        if c.weights:
            load_start(model, c.weights)
        return model

    def loss(self, model: nn.Module, batch) -> dict[str, torch.Tensor]:
        lq, hq, task = batch[:3]
        t = int(task[0])
        if self.config.contrastive_weight > 0:
            out, tokens = model(lq, t, return_tokens=True)
            l1 = F.l1_loss(out, hq)
            contrastive = supervised_contrastive(tokens.mean(dim=1), batch[3], self.config.temperature)
            return {"loss": l1 + self.config.contrastive_weight * contrastive, "loss_l1": l1.detach(),
                    "loss_contrastive": contrastive.detach()}
        l1 = F.l1_loss(model(lq, t), hq)
        return {"loss": l1, "loss_l1": l1.detach()}

    def num_samples(self, batch) -> int:
        return len(batch[0])

    # -- evaluation ----------------------------------------------------------------------------------------------
    @torch.no_grad()
    def scores(self, model: nn.Module, sets: dict[str, RestorationPairs], with_input: bool = False
               ) -> dict[str, dict[str, float]]:
        """Per degradation, the mean of each metric over the images (split over processes); with_input, also the
        scores of doing nothing (bicubic upscaling, the noisy or rainy input) as input_psnr_y, ..."""
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        c, dist = self.config, self.dist
        result = {}
        for name, pairs in sets.items():
            scale = scale_of(name)
            keys = METRICS + tuple(f"input_{m}" for m in METRICS) if with_input else METRICS
            sums = dict.fromkeys(keys, 0.0)
            for index in range(dist.rank, len(pairs), dist.world_size):
                lq, hq, _ = pairs[index]
                out = model.forward_chop(lq[None].to(device), name, c.overlap, c.eval_batch_size,
                                         blend=c.blend).cpu()
                for key, values in restoration_scores(out, hq[None], scale).items():
                    sums[key] += min(float(values[0]), 100.0)  # an exact restoration (inf dB) counts as 100
                if with_input:
                    start = baseline((lq * 255).round().to(torch.uint8), name).float()[None] / 255
                    for key, values in restoration_scores(start, hq[None], scale).items():
                        sums[f"input_{key}"] += min(float(values[0]), 100.0)
            totals = all_reduce_sum(list(sums.values()), dist)
            result[name] = {key: total / len(pairs) for key, total in zip(keys, totals)}
        model.train(was_training)
        return result

    def evaluate(self, model: nn.Module, data) -> dict[str, float]:
        """Each degradation's Y-PSNR, Y-SSIM and RGB PSNR on the images of `data` (validation or test); `psnr_y`,
        the mean over tasks, picks the best checkpoint (as val_psnr_y)."""
        per_task = self.scores(model, data)
        flat = {f"{name}_{key}": value for name, values in per_task.items() for key, value in values.items()}
        return {"psnr_y": sum(v["psnr_y"] for v in per_task.values()) / len(per_task), **flat}


def load_start(model: nn.Module, path: str) -> None:
    """Weights to start from, matched by task name: a restoration run or file in vitlab's names, or an official
    IPT checkpoint. Tasks the checkpoint lacks keep their fresh head, tail and task embedding."""

    from ...engine.run import weights_file
    from ...interop.formats import read_checkpoint

    state, info = read_checkpoint(weights_file(path))
    theirs = tuple(info.architecture.get("degradations", ()))  # what the file's config (or converter) says
    if not theirs:
        raise ValueError(f"{path} is neither an IPT checkpoint nor a vitlab restoration file")
    mine = model.state_dict()
    loaded, renamed = [], {}
    for key, value in state.items():
        parts = key.split(".")
        if parts[0] in ("head", "tail") and len(parts) > 1 and parts[1].isdigit():
            name = theirs[int(parts[1])] if int(parts[1]) < len(theirs) else None
            if name not in model.degradations:
                continue
            key = ".".join([parts[0], str(model.degradations.index(name)), *parts[2:]])
        elif key == "body.query_embed":
            if value.shape[1:] != mine[key].shape[1:]:
                continue
            table = mine[key].clone()
            for i, name in enumerate(theirs):
                if name in model.degradations and i < len(value):
                    table[model.degradations.index(name)] = value[i]
            value = table
        if key in mine and mine[key].shape == value.shape:
            renamed[key] = value
            loaded.append(key)
    if not any(key.startswith("body.") for key in loaded):
        raise ValueError(f"{path} holds no body this {type(model).__name__} can take (different size or model?)")
    model.load_state_dict(renamed, strict=False)
