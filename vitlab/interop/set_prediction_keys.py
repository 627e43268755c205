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


def to_hf_backbone_key(key: str) -> str:
    """The inverse of `hf_backbone_key`: a torchvision ResNet key in the names of Hugging Face's ResNet."""
    stem = {"conv1": "embedder.embedder.convolution", "bn1": "embedder.embedder.normalization"}
    first, _, leaf = key.partition(".")
    if first in stem:
        return f"{stem[first]}.{leaf}"
    stage, block, part, leaf = re.match(r"layer(\d)\.(\d+)\.([a-z]+\d?(?:\.\d)?)\.(.+)$", key).groups()
    prefix = f"encoder.stages.{int(stage) - 1}.layers.{block}."
    if part.startswith("downsample."):
        return prefix + ("shortcut.convolution." if part.endswith("0") else "shortcut.normalization.") + leaf
    kind, index = part[:-1], int(part[-1]) - 1
    return prefix + f"layer.{index}." + ("convolution." if kind == "conv" else "normalization.") + leaf


# torchvision's ResNets as transformers' ResNetConfig builds them (stride in the 3 × 3 convolution, as torchvision)
HF_RESNETS = {"resnet18": ("basic", [2, 2, 2, 2]), "resnet34": ("basic", [3, 4, 6, 3]),
              "resnet50": ("bottleneck", [3, 4, 6, 3]), "resnet101": ("bottleneck", [3, 4, 23, 3])}


def hf_backbone(state: dict[str, torch.Tensor], backbone: str, stages: tuple[int, ...], in_chans: int
                ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A detector's ResNet (vitlab's `backbone.*` keys in `state`, read at `stages`) as a transformers detector
    holds it: its weights under `model.backbone.conv_encoder.model.` and the `backbone_config` that builds it, cut
    after the last stage read (the stages after it are never run, and vitlab keeps no weights for them)."""
    layer_type, depths = HF_RESNETS[backbone]
    last = max(stages)
    widths = [64, 128, 256, 512] if layer_type == "basic" else [256, 512, 1024, 2048]
    config = {"model_type": "resnet", "num_channels": in_chans, "embedding_size": 64, "hidden_sizes": widths[:last],
              "depths": depths[:last], "layer_type": layer_type, "hidden_act": "relu",
              "downsample_in_first_stage": False, "downsample_in_bottleneck": False,
              "out_features": [f"stage{s}" for s in stages]}
    weights = {"model.backbone.conv_encoder.model." + to_hf_backbone_key(key.removeprefix("backbone.")): value
               for key, value in state.items()
               if key.startswith("backbone.") and not key.endswith("num_batches_tracked")}
    return weights, config


def hf_attention(state: dict[str, torch.Tensor], ours: str, theirs: str, out_proj: str = "out_proj"
                 ) -> dict[str, torch.Tensor]:
    """vitlab's attention `ours` (qkv with rows [q; k; v], proj) under transformers' names at `theirs`
    ({q,k,v}_proj, out_proj)."""
    out = {}
    for kind in ("weight", "bias"):
        for name, part in zip("qkv", state[f"{ours}.qkv.{kind}"].chunk(3)):
            out[f"{theirs}.{name}_proj.{kind}"] = part.contiguous()
        out[f"{theirs}.{out_proj}.{kind}"] = state[f"{ours}.proj.{kind}"]
    return out


def hf_detector_config(config: Any, architecture: str, model_type: str) -> dict[str, Any]:
    """What a transformers DETR-style config.json says alike for both detectors: the sizes, labels, and the
    inference-only choices (no auxiliary loss, no dropout)."""
    names = list(config.labels) or [str(i) for i in range(config.num_classes)]
    return {"architectures": [architecture], "model_type": model_type, "num_channels": config.in_chans,
            "d_model": config.dim, "encoder_layers": config.enc_layers, "decoder_layers": config.dec_layers,
            "encoder_attention_heads": config.num_heads, "decoder_attention_heads": config.num_heads,
            "encoder_ffn_dim": config.ffn_dim, "decoder_ffn_dim": config.ffn_dim, "num_queries": config.num_queries,
            "activation_function": "relu", "dropout": 0.0, "attention_dropout": 0.0, "activation_dropout": 0.0,
            "position_embedding_type": "sine", "auxiliary_loss": False, "dilation": False,
            "use_timm_backbone": False, "use_pretrained_backbone": False, "backbone": None,
            "id2label": {str(i): name for i, name in enumerate(names)},
            "label2id": {name: i for i, name in enumerate(names)}}


def unused_stages_dropped(state: dict[str, torch.Tensor], last_stage: int) -> dict[str, torch.Tensor]:
    """The state without the backbone stages after `last_stage`, which the detector never runs."""
    unused = tuple(f"backbone.layer{s}." for s in range(last_stage + 1, 5))
    return {key: value for key, value in state.items() if not key.startswith(unused)}


def own_config(hf_config: dict[str, Any] | None, model_type: str) -> dict[str, Any] | None:
    """A config.json beside the weights, if it is a Hugging Face config of this model type."""
    return hf_config if hf_config and hf_config.get("model_type") == model_type else None


def source_of(state: State, hf_config: dict[str, Any] | None = None) -> str:
    return "huggingface" if any(key.startswith("model.") for key in state) else "official"
