"""The workloads of the speed benchmark and the same ViT built in each library (vitlab, timm, Hugging Face).

Each library builds the same transformer (same width, depth, heads, patch, image size, classes) with random
weights; a conv-stem hybrid, which has no twin elsewhere, is compared through its plain-patch twin. vitlab's model
runs on its inference path (vitlab.runtime.fast: the lean last block, in-place writes under inference_mode), as
`vitlab.runtime.load(..., backend="torch")` runs it; its reference layers compute what timm's and HF's do. The
training workload takes that path too, so its step has the lean last block (exact under autograd), which
`vitlab train` does not use: its training rows are the inference path's, not the command's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import nn

from vitlab.layers.patch_embed import ConvStemPatchEmbed
from vitlab.models.registry import create_model, get_config, list_models
from vitlab.runtime.fast import inference_model

LIBRARIES = ("vitlab", "timm", "hf")

# the values of Settings.cpu_settings, and how the report describes each
CPU_SETTINGS = {"vitlab": "vitlab's (glibc keeps freed memory, denormals flush to zero: engine/speed.tune_process, "
                          "as `vitlab` commands run)",
                "default": "the defaults (glibc's malloc thresholds, IEEE gradual underflow)"}


@dataclass
class Workload:
    name: str  # registered vitlab model; timm and HF build the same transformer
    infer_batch: int = 32
    train_batch: int = 32
    extra: tuple[str, ...] = ()  # other vitlab models measured alongside, vitlab only (e.g. the conv-stem twin)


@dataclass
class Settings:
    repeats: int = 5  # most timed calls per row per round
    min_repeats: int = 2  # fewest timed calls per row per round
    target_s: float = 3.0  # time per row per round that sets the number of calls between those bounds
    rounds: int = 3  # interleaved, rotated rounds over the contenders
    compile: bool = False  # also measure "<library>+compile" for every library
    bf16: bool = True  # also measure bf16 autocast inference where the device supports it natively
    memory: bool = True  # peak memory of each library in a fresh subprocess
    device: str = "cpu"
    peak_n: int = 2048  # side of the square torch.mm that measures the matmul peak
    libraries: tuple[str, ...] = LIBRARIES
    # "vitlab": the process settings `vitlab` commands run with (engine/speed.tune_process: glibc keeps freed memory,
    # denormals flush to zero); "default": glibc's and IEEE's. Process-wide, so every library in the run gets the same.
    cpu_settings: str = "vitlab"
    notes: list[str] = field(default_factory=list)


def comparable(name: str) -> str:
    """The registered name whose transformer timm and HF can build: a conv-stem hybrid has no twin there, so it is
    compared through the plain-patch model with the same grid and transformer (vit_mini_convstem_28 ->
    vit_mini_patch7_28); its own speed is measured beside it as a vitlab-only row."""
    c = get_config(name)
    if not has_conv_stem(c):
        return name
    twins = []
    for other in list_models():
        o = get_config(other)  # the same config but for the stem: same class, every other field equal
        if (type(o) is type(c) and replace(o, patch_proj=c.patch_proj, stem_channels=c.stem_channels) == c
                and not has_conv_stem(o)):
            twins.append(other)
    if twins:  # the twin of the same family name first (vit_mini_patch7_28, not an identical deit_ preset)
        return min(twins, key=lambda other: other.split("_")[0] != name.split("_")[0])
    raise ValueError(f"{name} has a convolutional stem and no plain-patch twin to compare with timm and HF")


def has_conv_stem(config) -> bool:
    """Whether a config builds a conv-stem hybrid (ViT paper §3.1), asked of the module it builds, on the meta
    device (no memory, no initialisation), so that the harness does not depend on how a config spells it."""
    with torch.device("meta"):
        return isinstance(config.build().patch_embed, ConvStemPatchEmbed)


def build(library: str, name: str, **overrides) -> nn.Module:
    """The same architecture in each library. Returns a module mapping images (B, C, H, W) to logits."""
    if library == "vitlab":
        return inference_model(create_model(name, **overrides))
    c = get_config(name, **overrides)
    if has_conv_stem(c):
        raise ValueError(f"{library} has no convolutional stem; compare {comparable(name)} instead of {name}")
    if library == "timm":
        import timm

        return timm.create_model("vit_tiny_patch16_224", img_size=c.img_size, patch_size=c.patch_size,
                                 in_chans=c.in_chans, num_classes=c.num_classes, embed_dim=c.dim, depth=c.depth,
                                 num_heads=c.num_heads, mlp_ratio=c.mlp_ratio)
    if library == "hf":
        import transformers

        config = transformers.ViTConfig(
            hidden_size=c.dim, num_hidden_layers=c.depth, num_attention_heads=c.num_heads,
            intermediate_size=int(c.dim * c.mlp_ratio), image_size=c.img_size, patch_size=c.patch_size,
            num_channels=c.in_chans, num_labels=c.num_classes, layer_norm_eps=1e-6,
            attn_implementation="sdpa",
        )
        return HFLogits(transformers.ViTForImageClassification(config))
    raise ValueError(f"unknown library {library!r}; choose from {', '.join(LIBRARIES)}")


class HFLogits(nn.Module):
    """transformers' ViTForImageClassification with the call signature of the others: images -> logits."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.inner(pixel_values=images).logits


def image_shape(name: str, **overrides) -> tuple[int, int, int]:
    c = get_config(name, **overrides)
    return (c.in_chans, c.img_size, c.img_size) if isinstance(c.img_size, int) else (c.in_chans, *c.img_size)


@dataclass
class Contender:
    label: str  # "vitlab", "timm", "hf", "vitlab+compile", "vitlab:vit_mini_convstem_28", ...
    library: str
    model_name: str
    compiled: bool = False


def contenders(workload: Workload, settings: Settings) -> list[Contender]:
    base = comparable(workload.name)
    out = [Contender(lib, lib, base) for lib in settings.libraries]
    extras = workload.extra + ((workload.name,) if base != workload.name else ())  # a conv-stem model itself
    out += [Contender(f"vitlab:{extra}", "vitlab", extra) for extra in dict.fromkeys(extras)]
    if settings.compile:
        out += [Contender(f"{c.label}+compile", c.library, c.model_name, compiled=True) for c in list(out)]
    return out


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
