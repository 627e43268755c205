"""What the checkpoints of the DETR-style detectors (DETR, Deformable DETR) share, whichever family reads them:
Hugging Face's names for a transformer layer's parts, their ResNet backbone's keys, the format a file is in, and the
backbone stages a detector never runs. Each family's converter (`detr_formats.py`, `deformable_detr_formats.py`)
imports this module and no other family's."""

from __future__ import annotations

import re
from typing import Any

import torch

from .converters import State

HF_LAYER = {"self_attn.out_proj": "self_attn.proj", "self_attn.o_proj": "self_attn.proj",
            "encoder_attn.out_proj": "cross_attn.proj", "encoder_attn.o_proj": "cross_attn.proj",
            "self_attn_layer_norm": "norm1", "fc1": "mlp.fc1", "fc2": "mlp.fc2", "mlp.fc1": "mlp.fc1",
            "mlp.fc2": "mlp.fc2"}


def hf_backbone_key(key: str) -> str:
    """A Hugging Face ResNet backbone key (embedder / encoder.stages) in torchvision's names; timm keys pass."""
    key = key.replace("embedder.embedder.convolution", "conv1").replace("embedder.embedder.normalization", "bn1")
    match = re.match(r"encoder\.stages\.(\d+)\.layers\.(\d+)\.(shortcut|layer\.(\d+))\.(convolution|normalization)"
                     r"\.(.+)$", key)
    if not match:
        return key
    stage, block, part, conv, kind, leaf = match.groups()
    prefix = f"layer{int(stage) + 1}.{block}."
    if part == "shortcut":
        return prefix + ("downsample.0." if kind == "convolution" else "downsample.1.") + leaf
    return prefix + (f"conv{int(conv) + 1}." if kind == "convolution" else f"bn{int(conv) + 1}.") + leaf


def unused_stages_dropped(state: dict[str, torch.Tensor], last_stage: int) -> dict[str, torch.Tensor]:
    """The state without the backbone stages after `last_stage`, which the detector never runs."""
    unused = tuple(f"backbone.layer{s}." for s in range(last_stage + 1, 5))
    return {key: value for key, value in state.items() if not key.startswith(unused)}


def own_config(hf_config: dict[str, Any] | None, model_type: str) -> dict[str, Any] | None:
    """A config.json beside the weights, if it is a Hugging Face config of this model type."""
    return hf_config if hf_config and hf_config.get("model_type") == model_type else None


def source_of(state: State, hf_config: dict[str, Any] | None = None) -> str:
    return "huggingface" if any(key.startswith("model.") for key in state) else "official"
