"""VQGAN stage 1 on the loop: the autoencoder and its patch discriminator, two optimizers (Adam, β = (0.5, 0.9)),
one `train_step` (the loop's multi-optimizer seam, engine/loop.py):

    1. the autoencoder: L = L_rec + λ · L_GAN + w_VQ · L_VQ (losses.py), the discriminator frozen for this pass;
    2. the discriminator: the hinge loss on the real images and the (detached) reconstructions.

Before `disc_start` steps only L_rec + w_VQ · L_VQ trains, and the discriminator waits (its schedule runs on).
A batch is (images (B, C, S, S) in [-1, 1], labels (B,)).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from ...data.generation import GenerationImages, load_generation_images
from ...engine.distributed import DistInfo
from ...engine.loaders import TensorLoader
from ...engine.loop import TaskData
from ...engine.options import OptionError
from ...models.registry import build_model, get_config
from ..base import Task, register_task, release_overrides, with_absolute_paths
from .config import GenerationEvalOptions, VQGANServeOptions, VQGANTaskConfig
from .losses import adaptive_weight, generator_loss, hinge_d_loss
from .metrics import reconstruction_scores

LOGGED = ("loss_rec", "loss_vq", "loss_g", "loss_d", "gan_weight", "perplexity", "usage")


def load_perceptual_loss() -> nn.Module:
    """LPIPS (Zhang et al. 2018) from the `lpips` package; its VGG weights must already be on disk."""
    try:
        import lpips
    except ImportError as error:
        raise OptionError("perceptual_weight", "needs the `lpips` package (pip install lpips) and its pretrained VGG "
                          "weights on disk; vitlab downloads no weights. Leave it at 0 to train without") from error
    try:
        return lpips.LPIPS(net="vgg", verbose=False).eval().requires_grad_(False)
    except Exception as error:  # torchvision's download failing offline raises several kinds
        raise OptionError("perceptual_weight", f"could not build LPIPS ({type(error).__name__}: {error}); its VGG "
                          f"weights must be on disk, vitlab downloads none") from error


@register_task
class VQGANTask(Task):
    name: ClassVar[str] = "vqgan"
    order: ClassVar[int] = 60
    commands: ClassVar[tuple[str, ...]] = ("reconstruct",)
    EvalOptions: ClassVar[type] = GenerationEvalOptions
    ServeOptions: ClassVar[type] = VQGANServeOptions
    page: ClassVar[str] = "reconstruction"
    model_noun: ClassVar[str] = "a VQGAN"
    default_model: ClassVar[str] = "vqgan_small"
    Config: ClassVar[type] = VQGANTaskConfig
    best: ClassVar[tuple[str, str]] = ("val_psnr", "max")
    int8_guard: ClassVar[dict[str, float]] = {"psnr": 0.1}  # reconstruction, dB
    sample_name: ClassVar[str] = "images"
    resumable: ClassVar[tuple[str, ...]] = ("data_dir",)
    inference_module: ClassVar[str] = "vitlab.tasks.generation.inference"

    def __init__(self, config: VQGANTaskConfig, loop=None, dist: DistInfo | None = None) -> None:
        config = with_absolute_paths(config, "weights", "data_dir", *(["data"] if Path(config.data).is_dir() else []))
        super().__init__(config, loop, dist)
        if self.dist.distributed:
            raise ValueError("--task vqgan trains in one process: its two optimizers and the codebook restarts are "
                             "not yet written for torchrun; run it without torchrun")
        self.perceptual = load_perceptual_loss() if config.perceptual_weight > 0 else None

    @classmethod
    def loop_defaults(cls, config: VQGANTaskConfig) -> dict[str, Any]:
        # taming's optimizers (Adam, β = (0.5, 0.9), no decay); a far higher rate than its 4.5e-6 × batch, for a
        # short run (500-step probes of vqgan_small: 19.2 dB test PSNR at 1e-3, 17.6 at 2e-4); no clipping, as there
        return {"epochs": 10, "batch_size": 64, "lr": 1e-3, "weight_decay": 0.0, "betas": (0.5, 0.9),
                "warmup_steps": 100, "clip_grad": 0.0, "min_lr_ratio": 0.1}

    # -- data ----------------------------------------------------------------------------------------------------
    def image_size(self) -> int:
        return self.config.img_size or get_config(self.config.model, **release_overrides(self.config)).resolution

    @classmethod
    def check_data(cls, data: str, **options: Any) -> list[Any]:
        from ...data.check_splits import check_image_folder

        return check_image_folder(data)

    def build_data(self, saved: dict[str, Any] | None = None) -> TaskData:
        c, loop = self.config, self.loop
        model_config = get_config(c.model, **release_overrides(self.config))
        self.images = load_generation_images(c.data, c.data_dir, self.image_size(), model_config.in_chans,
                                             c.val_fraction, loop.seed, not c.allow_partial_data,
                                             skip_bad_images=c.skip_bad_images)
        half = (0.5,) * self.images.channels  # (x − 0.5) / 0.5: [0, 1] -> [-1, 1]
        train = TensorLoader(self.images.train, self.images.train_labels, loop.batch_size, half, half,
                             shuffle=True, drop_last=True, seed=loop.seed)
        test = (self.images, "test") if self.images.test is not None else None
        if saved is not None:
            self._refuse_other_data(saved)
        return TaskData(train=train, val=(self.images, "val"), test=test)

    def run_info(self) -> dict[str, Any]:
        d = self.images
        return {"data": {"name": d.name, "data_dir": self.config.data_dir, "classes": d.classes,
                         "num_train": len(d.train), "num_val": len(d.val),
                         "num_test": 0 if d.test is None else len(d.test), "split": d.split, "channels": d.channels,
                         "img_size": d.size, "pad": d.pad}}

    def _refuse_other_data(self, data: dict[str, Any]) -> None:
        """A resumed run's data (`data`: its config.json's record) must be the data it started on."""
        if data["num_train"] != len(self.images.train) or data["classes"] != self.images.classes:
            raise ValueError(f"the data of this run changed since it started ({data['num_train']} training images "
                             f"then, {len(self.images.train)} now); resume on the same data or start a new run")

    # -- model and training --------------------------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        c = self.config
        config = self.model_config()
        if not config.disc_layers:
            raise OptionError("model", f"{c.model} has no discriminator (disc_layers=0); training needs one")
        model = build_model(get_config(c.model, **release_overrides(self.config)).for_data(
            image_size=self.image_size()), c.model)
        if c.weights:
            from ...interop import load_weights

            load_weights(model, c.weights, strict=c.strict)
        return model

    def optimized_modules(self, model: nn.Module) -> dict[str, nn.Module]:
        autoencoder = nn.ModuleDict({name: child for name, child in model.named_children()
                                     if name != "discriminator"})
        return {"autoencoder": autoencoder, "discriminator": model.discriminator}

    def reconstruction_loss(self, x: torch.Tensor, reconstruction: torch.Tensor) -> torch.Tensor:
        rec = (x - reconstruction).abs().mean()
        if self.perceptual is not None:
            self.perceptual.to(x.device)
            rgb = (lambda t: t.expand(-1, 3, -1, -1)) if x.shape[1] == 1 else (lambda t: t)
            rec = rec + self.config.perceptual_weight * self.perceptual(rgb(x), rgb(reconstruction)).mean()
        return rec

    def train_step(self, model: nn.Module, batch, stepper) -> dict[str, torch.Tensor]:
        c = self.config
        x = batch[0]
        discriminator = model.discriminator
        gan_on = stepper.steps_taken("autoencoder") >= c.disc_start and c.disc_weight > 0
        out = model(x)
        rec = self.reconstruction_loss(x, out.reconstruction)
        zero = rec.detach() * 0
        g_loss, weight = zero, zero
        if gan_on:
            discriminator.requires_grad_(False)  # the generator's pass leaves no gradient in the discriminator
            g_loss = generator_loss(discriminator(out.reconstruction))
            weight = c.disc_weight * adaptive_weight(rec, g_loss, model.last_layer)
            discriminator.requires_grad_(True)
        loss = rec + weight * g_loss + c.codebook_weight * out.quantizer_loss
        stepper.backward(loss)
        stepper.step("autoencoder")
        d_loss = zero
        if gan_on:
            d_loss = hinge_d_loss(discriminator(x), discriminator(out.reconstruction.detach()))
            stepper.backward(d_loss)
            stepper.step("discriminator")
        else:
            stepper.skip("discriminator")
        return {"loss": loss.detach(), "loss_rec": rec.detach(), "loss_vq": out.quantizer_loss.detach(),
                "loss_g": g_loss.detach(), "loss_d": d_loss.detach(), "gan_weight": weight.detach(),
                "perplexity": out.perplexity.detach(), "usage": out.usage.detach()}

    def loss(self, model: nn.Module, batch) -> dict[str, torch.Tensor]:
        """The autoencoder's objective without the GAN term (what a single optimizer would train)."""
        x = batch[0]
        out = model(x)
        rec = self.reconstruction_loss(x, out.reconstruction)
        return {"loss": rec + self.config.codebook_weight * out.quantizer_loss, "loss_rec": rec.detach(),
                "loss_vq": out.quantizer_loss.detach()}

    # -- evaluation ----------------------------------------------------------------------------------------------
    def evaluate(self, model: nn.Module, data: tuple[GenerationImages, str]) -> dict[str, float]:
        """Reconstruction PSNR and SSIM, codebook usage and perplexity on the first --eval-images images of the
        part `data` names ("val" or "test")."""
        images, part = data
        return reconstruction_scores(model, images, self.config.eval_images, part=part)
