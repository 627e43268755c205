"""VQGAN stage 2 on the loop: a transformer prior over the codes of a trained, frozen VQGAN (models/gpt_prior.py).

The VQGAN run's training, validation and test images are encoded once, at the start, into code sequences (row by
row); the prior learns them by next-code cross-entropy, conditioned on the class through its start token. A batch
is (codes (B, L) int64, labels (B,)).

Evaluation, on the part scored (validation during training, the test set once at the end): the codes'
cross-entropy (nats per code; `val_loss` picks the best checkpoint) and, with a `--classifier` run, the FID of
`eval_samples` class-conditional samples against that part's images, the floor FID(train, that part), and the
samples' class accuracy (metrics.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from ...data.generation import GenerationImages, load_generation_images
from ...engine.distributed import DistInfo
from ...engine.loaders import TensorBatches
from ...engine.loop import TaskData
from ...engine.options import OptionError
from ...models.registry import create_model
from ..base import Task, register_task, with_absolute_paths
from .config import GenerationEvalOptions, PriorServeOptions, PriorTaskConfig
from .metrics import batches, from_uint8, generation_scores, load_classifier_features, to_unit


def load_vqgan_run(run_dir: str) -> tuple[nn.Module, dict[str, Any]]:
    """The frozen VQGAN of a `--task vqgan` run (its best weights) and its config.json."""
    from ..launch import load_run

    if not (Path(run_dir) / "config.json").is_file():
        raise FileNotFoundError(f"--vqgan must be a VQGAN run folder (vitlab train --task vqgan --out RUN); "
                                f"{run_dir} holds no config.json")
    model, saved = load_run(run_dir, "best")
    if saved.get("task") != "vqgan":
        raise ValueError(f"--vqgan must be a --task vqgan run; {run_dir} is a {saved.get('task')} run")
    return model.eval().requires_grad_(False), saved


def vqgan_images(saved: dict[str, Any], data_dir: str | None = None) -> GenerationImages:
    """The images a VQGAN run trained and was scored on."""
    c, data = saved["config"], saved["data"]
    return load_generation_images(c["data"], data_dir or c.get("data_dir"), data["img_size"], data["channels"],
                                  c.get("val_fraction"), saved.get("loop", {}).get("seed", 0),
                                  not c.get("allow_partial_data", False), c.get("skip_bad_images", False))


@torch.no_grad()
def encode_images(vqgan: nn.Module, images: torch.Tensor, batch_size: int = 500, desc: str = "encoding"
                  ) -> torch.Tensor:
    """(N, C, S, S) uint8 -> code sequences (N, h·w) int64, row by row."""
    device = next(vqgan.parameters()).device
    codes = []
    for part in tqdm(list(batches(len(images), batch_size)), desc=desc, leave=False, mininterval=1.0):
        z = vqgan.encode(from_uint8(images[part].to(device)))
        codes.append(vqgan.quantize(z).indices.flatten(1).cpu())
    return torch.cat(codes)


@torch.no_grad()
def sample_images(prior: nn.Module, vqgan: nn.Module, labels: torch.Tensor, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None, batch_size: int = 250,
                  generator: torch.Generator | None = None, use_cache: bool = True) -> torch.Tensor:
    """labels (N,) -> samples (N, C, S, S) in [0, 1]: codes drawn from the prior, decoded by the VQGAN."""
    device = next(prior.parameters()).device
    out = []
    for part in batches(len(labels), batch_size):
        codes = prior.generate(labels[part].to(device), temperature, top_k, top_p, use_cache, generator)
        out.append(to_unit(vqgan.decode_indices(codes)).cpu())
    return torch.cat(out)


@torch.no_grad()
def code_loss(prior: nn.Module, codes: torch.Tensor, labels: torch.Tensor, batch_size: int = 500) -> float:
    """The prior's cross-entropy on code sequences (N, L) of classes (N,), in nats per code."""
    device = next(prior.parameters()).device
    total = 0.0
    for part in batches(len(codes), batch_size):
        target = codes[part].to(device)
        logits = prior(target, labels[part].to(device))
        total += float(F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), reduction="sum"))
    return total / codes.numel()


def balanced_labels(n: int, num_classes: int) -> torch.Tensor:
    """0, 1, …, K−1, 0, 1, …: n labels with the classes in turn."""
    return torch.arange(n) % num_classes


@register_task
class PriorTask(Task):
    name: ClassVar[str] = "prior"
    order: ClassVar[int] = 70
    commands: ClassVar[tuple[str, ...]] = ("sample", "reconstruct")
    EvalOptions: ClassVar[type] = GenerationEvalOptions
    ServeOptions: ClassVar[type] = PriorServeOptions
    python_loop: ClassVar[str] = ("a prior samples in a Python loop: it runs on --runtime torch in fp32 only (evaluate "
                                  "its VQGAN run on a runtime instead)")
    needs_image: ClassVar[bool] = False
    page: ClassVar[str] = "samples"
    model_noun: ClassVar[str] = "a prior"
    Config: ClassVar[type] = PriorTaskConfig
    best: ClassVar[tuple[str, str]] = ("val_loss", "min")
    sample_name: ClassVar[str] = "sequences"
    resumable: ClassVar[tuple[str, ...]] = ("data_dir", "classifier")
    inference_module: ClassVar[str] = "vitlab.tasks.generation.inference"

    def __init__(self, config: PriorTaskConfig, loop=None, dist: DistInfo | None = None) -> None:
        config = with_absolute_paths(config, "vqgan", "classifier", "data_dir")
        super().__init__(config, loop, dist)

    @classmethod
    def loop_defaults(cls, config: PriorTaskConfig) -> dict[str, Any]:
        # minGPT's recipe for small models: AdamW (0.9, 0.95), decay 0.01 on matrices, warm-up then cosine
        return {"epochs": 10, "batch_size": 64, "lr": 5e-4, "weight_decay": 0.01, "betas": (0.9, 0.95),
                "warmup_steps": 200, "clip_grad": 1.0}

    def build_data(self, saved: dict[str, Any] | None = None) -> TaskData:
        c, loop, dist = self.config, self.loop, self.dist
        if not c.vqgan:
            raise OptionError("vqgan", "is needed: the VQGAN run whose codes to model (vitlab train --task vqgan "
                              "--out RUN first)")
        self.vqgan, self.vqgan_saved = load_vqgan_run(c.vqgan)
        self.images = vqgan_images(self.vqgan_saved, c.data_dir)
        self.vqgan.to(dist.device)
        self.train_codes = encode_images(self.vqgan, self.images.train, desc="encoding the training images")
        self.val_codes = encode_images(self.vqgan, self.images.val, desc="encoding the validation images")
        self.test_codes = (encode_images(self.vqgan, self.images.test, desc="encoding the test images")
                           if self.images.test is not None else None)
        self.features = load_classifier_features(c.classifier, self.images.crop) if c.classifier else None
        train = TensorBatches(self.train_codes, self.images.train_labels, batch_size=loop.batch_size, shuffle=True,
                              drop_last=True, seed=loop.seed, num_replicas=dist.world_size, rank=dist.rank)
        test = (self.test_codes, self.images.test_labels, "test") if self.test_codes is not None else None
        if saved is not None:
            self._refuse_other_data(saved)
        return TaskData(train=train, val=(self.val_codes, self.images.val_labels, "val"), test=test)

    def run_info(self) -> dict[str, Any]:
        d = self.images
        return {"data": {"name": d.name, "vqgan": self.config.vqgan, "classes": d.classes, "num_train": len(d.train),
                         "num_val": len(d.val), "num_test": 0 if d.test is None else len(d.test), "split": d.split,
                         "channels": d.channels, "img_size": d.size, "pad": d.pad}}

    def _refuse_other_data(self, data: dict[str, Any]) -> None:
        """A resumed run's data (`data`: its config.json's record) must be the data it started on."""
        if data["num_train"] != len(self.images.train):
            raise ValueError("the VQGAN run's data changed since this prior started; start a new run")

    def serving_context(self, saved: dict[str, Any]) -> dict[str, Any]:
        """The VQGAN that turns the prior's codes into pixels, loaded once."""
        return {"vqgan": load_vqgan_run(saved["config"]["vqgan"])}

    def build_model(self) -> nn.Module:
        c = self.config
        self.model_config()
        grid = tuple(self.vqgan.encode(torch.zeros(1, self.images.channels, self.images.size, self.images.size,
                                                   device=next(self.vqgan.parameters()).device)).shape[-2:])
        return create_model(c.model, num_codes=self.vqgan.config.num_codes, grid=grid,
                            num_classes=len(self.images.classes))

    def loss(self, model: nn.Module, batch) -> dict[str, torch.Tensor]:
        codes, labels = batch
        logits = model(codes, labels)  # (B, L, K)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), codes.flatten())
        return {"loss": loss}

    def num_samples(self, batch) -> int:
        return len(batch[0])

    @torch.no_grad()
    def evaluate(self, model: nn.Module, data) -> dict[str, float]:
        """Cross-entropy of the codes of `data` = (codes, labels, part), and with a classifier the FID and class
        accuracy of samples, against the images of that part."""
        codes, labels, part = data
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        result = {"loss": code_loss(model, codes, labels)}
        c = self.config
        if self.features is not None and c.eval_samples:
            sample_labels = balanced_labels(c.eval_samples, model.config.num_classes)
            generator = torch.Generator(device=device).manual_seed(self.loop.seed)
            samples = sample_images(model, self.vqgan, sample_labels, c.temperature, c.top_k, c.top_p,
                                    generator=generator)
            result.update(generation_scores(self.features.to(device), self.images, samples.to(device),
                                            sample_labels.to(device), part=part))
        model.train(was_training)
        return result
