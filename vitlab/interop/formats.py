"""Checkpoints people already have, mapped to vitlab's (= timm's) ViT key names and layouts.

    vitlab / timm   blocks.{i}.attn.qkv.weight (3D, D) rows [q; k; v], blocks.{i}.norm1, mlp.fc1, head, ...
    Hugging Face    vit.layers.{i}.attention.{q,k,v,o}_proj            (transformers ≥ 5; DeiT: deit.*, plus
                    embeddings.distillation_token, cls_classifier, distillation_classifier)
                    vit.encoder.layer.{i}.attention.attention.{query,key,value}, attention.output.dense,
                    intermediate.dense, output.dense                      (transformers 4 and the Hub's files)
                    layernorm_before/after, embeddings.{cls_token, position_embeddings, patch_embeddings}
    Google .npz     Transformer/encoderblock_{i}/MultiHeadDotProductAttention_1/{query,key,value,out}/kernel with
                    kernels (D, heads, head_dim) and (heads, head_dim, D); Dense kernels (in, out); the patch
                    kernel (ph, pw, C, D) "HWIO"

`read_checkpoint(path)` returns the state dict in vitlab's layout plus what the file says about the model
(`CheckpointInfo`): its format, the LayerNorm epsilon (Hugging Face's default is 1e-12, timm's and JAX's 1e-6),
and, where the file holds it, the architecture.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .detr_formats import detr_architecture, detr_state, is_detr_state, unused_stages_dropped
from .ipt_formats import ipt_architecture, ipt_state, is_ipt_state
from .setr_formats import is_setr_state, setr_architecture, setr_state
from .vqgan_formats import is_vqgan_state, vqgan_architecture, vqgan_state
from .weights import CONFIG_KEY, read_state_dict


@dataclass
class CheckpointInfo:
    # "vitlab" | "timm" | "huggingface" | "npz" | "official" (DETR family) | "setr" | "ipt" | "taming" | "diffusers"
    format: str
    norm_eps: float | None = None  # None: the file does not say
    architecture: dict[str, Any] = field(default_factory=dict)  # ViTConfig fields the file determines
    metadata: dict[str, str] = field(default_factory=dict)


def read_checkpoint(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], CheckpointInfo]:
    path = Path(path)
    if path.is_dir():
        return _read_huggingface_folder(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    if path.suffix == ".npz":
        return _read_npz(path)
    state, metadata = read_state_dict(path)
    if CONFIG_KEY in metadata:
        return state, CheckpointInfo("vitlab", metadata=metadata)
    if is_vqgan_state(state):
        config = path.parent / "config.json"
        hf_config = json.loads(config.read_text()) if config.is_file() else {}
        return _from_vqgan(state, hf_config if hf_config.get("_class_name") == "VQModel" else None)
    if is_ipt_state(state):
        state = ipt_state(state)
        return state, CheckpointInfo("ipt", architecture=ipt_architecture(state, path.name))
    if is_setr_state(state):  # before DETR's check: both have a backbone
        state = setr_state(state)
        return state, CheckpointInfo("setr", architecture=setr_architecture(state))
    if is_detr_state(state):
        config = path.parent / "config.json"
        hf_config = json.loads(config.read_text()) if config.is_file() else {}
        return _from_detr(state, hf_config if hf_config.get("model_type") in DETR_TYPES else None)
    if _looks_like_huggingface(state):
        config = path.parent / "config.json"
        hf_config = json.loads(config.read_text()) if config.is_file() else {}
        return _from_huggingface(state, hf_config)
    return state, CheckpointInfo("timm", norm_eps=None, architecture=_architecture_from_state(state))


# ---- Hugging Face -------------------------------------------------------------------------------------------------
def _looks_like_huggingface(state: dict[str, torch.Tensor]) -> bool:
    return any("embeddings.patch_embeddings" in key for key in state)


def _read_huggingface_folder(folder: Path) -> tuple[dict[str, torch.Tensor], CheckpointInfo]:
    config_path = folder / "config.json"
    names = ("model.safetensors", "pytorch_model.bin", "diffusion_pytorch_model.safetensors",
             "diffusion_pytorch_model.bin")  # transformers', then diffusers' file names
    weights = [folder / name for name in names if (folder / name).is_file()]
    if not config_path.is_file() or not weights:
        raise FileNotFoundError(
            f"{folder} is not a Hugging Face model folder: expected config.json and model.safetensors "
            f"(or pytorch_model.bin); found {sorted(p.name for p in folder.iterdir())}"
        )
    state, _ = read_state_dict(weights[0])
    hf_config = json.loads(config_path.read_text())
    if hf_config.get("_class_name") == "VQModel" or is_vqgan_state(state):
        return _from_vqgan(state, hf_config)
    if hf_config.get("model_type") in DETR_TYPES or is_detr_state(state):
        return _from_detr(state, hf_config)
    return _from_huggingface(state, hf_config)


def _from_vqgan(state: dict[str, torch.Tensor], hf_config: dict[str, Any] | None):
    """A taming-transformers VQGAN or a diffusers VQModel, in vitlab's names."""
    source = "diffusers" if any(key.startswith("encoder.down_blocks.") for key in state) else "taming"
    state = vqgan_state(state)
    return state, CheckpointInfo(source, architecture=vqgan_architecture(state, hf_config))


DETR_TYPES = ("detr", "deformable_detr")  # Hugging Face's model_type of the detectors


def _from_detr(state: dict[str, torch.Tensor], hf_config: dict[str, Any] | None):
    """An official DETR or Deformable DETR (.pth), or a Hugging Face DetrForObjectDetection or
    DeformableDetrForObjectDetection, in vitlab's names."""
    source = "huggingface" if any(key.startswith("model.") for key in state) else "official"
    state = detr_state(state)
    architecture = detr_architecture(state, hf_config)
    last_stage = architecture.get("backbone_last_stage") or max(architecture["backbone_stages"])
    state = unused_stages_dropped(state, last_stage)
    return state, CheckpointInfo(source, architecture=architecture)


HF_BLOCK_V5 = {"attention.o_proj": "attn.proj", "layernorm_before": "norm1", "layernorm_after": "norm2",
               "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
HF_BLOCK_V4 = {"attention.output.dense": "attn.proj", "layernorm_before": "norm1", "layernorm_after": "norm2",
               "intermediate.dense": "mlp.fc1", "output.dense": "mlp.fc2"}
HF_QKV = {"v5": ("attention.q_proj", "attention.k_proj", "attention.v_proj"),
          "v4": ("attention.attention.query", "attention.attention.key", "attention.attention.value")}


def _from_huggingface(state: dict[str, torch.Tensor], hf_config: dict[str, Any]):
    state = {key.removeprefix("vit.").removeprefix("deit."): value for key, value in state.items()}
    out: dict[str, torch.Tensor] = {}
    dropped = []
    blocks: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        match = re.match(r"(?:layers|encoder\.layer)\.(\d+)\.(.+)$", key)
        if match:
            blocks.setdefault(int(match.group(1)), {})[match.group(2)] = value
        elif key == "embeddings.cls_token":
            out["cls_token"] = value
        elif key == "embeddings.distillation_token":  # DeiTForImageClassificationWithTeacher
            out["dist_token"] = value
        elif key.startswith("cls_classifier."):
            out["head." + key.rsplit(".", 1)[1]] = value
        elif key.startswith("distillation_classifier."):
            out["head_dist." + key.rsplit(".", 1)[1]] = value
        elif key == "embeddings.position_embeddings":
            out["pos_embed"] = value
        elif key.startswith("embeddings.patch_embeddings.projection."):
            out["patch_embed.proj." + key.rsplit(".", 1)[1]] = value
        elif key.startswith("layernorm."):
            out["norm." + key.rsplit(".", 1)[1]] = value
        elif key.startswith("classifier."):
            out["head." + key.rsplit(".", 1)[1]] = value
        else:
            dropped.append(key)  # the pooler of ViTModel, a mask token: not part of a ViT classifier
    for i, parts in blocks.items():
        layout = "v5" if any(k.startswith("attention.q_proj") for k in parts) else "v4"
        renames = HF_BLOCK_V5 if layout == "v5" else HF_BLOCK_V4
        for name, value in parts.items():
            stem, kind = name.rsplit(".", 1)
            if stem in renames:
                out[f"blocks.{i}.{renames[stem]}.{kind}"] = value
        q, k, v = HF_QKV[layout]
        for kind in ("weight", "bias"):
            if f"{q}.{kind}" in parts:  # timm's fused layout: rows [q; k; v]
                out[f"blocks.{i}.attn.qkv.{kind}"] = torch.cat([parts[f"{n}.{kind}"] for n in (q, k, v)])
    if dropped:
        warnings.warn(f"ignoring Hugging Face weights vitlab's ViT does not use: {', '.join(sorted(dropped))}",
                      stacklevel=3)
    architecture = _architecture_from_hf_config(hf_config) if hf_config else _architecture_from_state(out)
    if "dist_token" in out:
        architecture["distilled"] = True
    eps = hf_config.get("layer_norm_eps", 1e-12) if hf_config else None
    return out, CheckpointInfo("huggingface", norm_eps=eps, architecture=architecture)


def _architecture_from_hf_config(c: dict[str, Any]) -> dict[str, Any]:
    if c.get("hidden_act", "gelu") != "gelu":
        raise ValueError(f"vitlab's ViT uses exact GELU; this checkpoint's hidden_act is {c['hidden_act']!r}")
    labels = c.get("id2label") or {}
    architecture = {
        "img_size": c.get("image_size", 224), "patch_size": c.get("patch_size", 16),
        "in_chans": c.get("num_channels", 3), "dim": c.get("hidden_size", 768),
        "depth": c.get("num_hidden_layers", 12), "num_heads": c.get("num_attention_heads", 12),
        "mlp_ratio": c.get("intermediate_size", 3072) / c.get("hidden_size", 768),
        "qkv_bias": c.get("qkv_bias", True), "norm_eps": c.get("layer_norm_eps", 1e-12),
    }
    if "ViTForImageClassification" in (c.get("architectures") or []) or labels:
        architecture["num_classes"] = len(labels) if labels else c.get("num_labels", 2)
    else:
        architecture["num_classes"] = 0
    return architecture


# ---- Google .npz --------------------------------------------------------------------------------------------------
def _read_npz(path: Path) -> tuple[dict[str, torch.Tensor], CheckpointInfo]:
    with np.load(path, allow_pickle=False) as archive:  # arrays only: an .npz cannot smuggle code past this
        w = {key: archive[key] for key in archive.files}
    prefix = next((p for p in ("", "opt/target/", "params/") if f"{p}embedding/kernel" in w), None)
    if prefix is None:
        raise ValueError(f"{path} is not a ViT .npz in the Google layout: it has no 'embedding/kernel' array")

    def get(name: str) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(w[prefix + name])).float()

    kernel = get("embedding/kernel")  # (ph, pw, C, D)
    D = kernel.shape[-1]
    out = {
        "patch_embed.proj.weight": kernel.permute(3, 2, 0, 1).contiguous(),  # HWIO -> (D, C, ph, pw)
        "patch_embed.proj.bias": get("embedding/bias"),
        "norm.weight": get("Transformer/encoder_norm/scale"),
        "norm.bias": get("Transformer/encoder_norm/bias"),
    }
    if prefix + "cls" in w:
        out["cls_token"] = get("cls")
    if prefix + "Transformer/posembed_input/pos_embedding" in w:
        out["pos_embed"] = get("Transformer/posembed_input/pos_embedding")
    if prefix + "head/kernel" in w:
        out["head.weight"] = get("head/kernel").T  # Dense kernels are (in, out)
        out["head.bias"] = get("head/bias")
    if prefix + "pre_logits/kernel" in w:
        warnings.warn("ignoring the checkpoint's pre-logits layer (the ImageNet-21k release's representation "
                      "layer, which vitlab's ViT does not have); its head is dropped with it", stacklevel=3)
        out.pop("head.weight", None)
        out.pop("head.bias", None)
    depth = 0
    while f"{prefix}Transformer/encoderblock_{depth}/LayerNorm_0/scale" in w:
        b, t = f"Transformer/encoderblock_{depth}/", f"blocks.{depth}."
        attn = b + "MultiHeadDotProductAttention_1/"
        mlp = next(f"{b}MlpBlock_{j}/" for j in (3, 2, 1) if f"{prefix}{b}MlpBlock_{j}/Dense_0/kernel" in w)
        out[t + "norm1.weight"], out[t + "norm1.bias"] = get(b + "LayerNorm_0/scale"), get(b + "LayerNorm_0/bias")
        out[t + "norm2.weight"], out[t + "norm2.bias"] = get(b + "LayerNorm_2/scale"), get(b + "LayerNorm_2/bias")
        # query/key/value kernels (D, heads, head_dim) -> (D, D) -> transposed to torch's (out, in)
        out[t + "attn.qkv.weight"] = torch.cat([get(f"{attn}{n}/kernel").reshape(D, D).T for n in ("query", "key",
                                                                                                    "value")])
        out[t + "attn.qkv.bias"] = torch.cat([get(f"{attn}{n}/bias").reshape(D) for n in ("query", "key", "value")])
        out[t + "attn.proj.weight"] = get(attn + "out/kernel").reshape(D, D).T  # (heads, head_dim, D) -> (D, D)
        out[t + "attn.proj.bias"] = get(attn + "out/bias")
        out[t + "mlp.fc1.weight"], out[t + "mlp.fc1.bias"] = get(mlp + "Dense_0/kernel").T, get(mlp + "Dense_0/bias")
        out[t + "mlp.fc2.weight"], out[t + "mlp.fc2.bias"] = get(mlp + "Dense_1/kernel").T, get(mlp + "Dense_1/bias")
        depth += 1
    architecture = _architecture_from_state(out)
    architecture["num_heads"] = w[f"{prefix}Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"
                                  ].shape[1]
    return out, CheckpointInfo("npz", norm_eps=1e-6, architecture=architecture)


# ---- architecture from shapes ---------------------------------------------------------------------------------------
def _architecture_from_state(state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """What the tensors' shapes tell (everything but the number of heads)."""
    if "patch_embed.proj.weight" not in state or state["patch_embed.proj.weight"].ndim != 4:
        return {}
    D, C, ph, pw = state["patch_embed.proj.weight"].shape
    depth = len({key.split(".")[1] for key in state if key.startswith("blocks.")})
    architecture: dict[str, Any] = {"dim": D, "in_chans": C, "patch_size": (ph, pw), "depth": depth}
    if "blocks.0.mlp.fc1.weight" in state:
        architecture["mlp_ratio"] = state["blocks.0.mlp.fc1.weight"].shape[0] / D
    architecture["qkv_bias"] = "blocks.0.attn.qkv.bias" in state
    architecture["class_token"] = "cls_token" in state
    if "dist_token" in state:
        architecture["distilled"] = True  # a DeiT⚗: class and distillation tokens
    if "pos_embed" in state:
        prefix = ("cls_token" in state) + ("dist_token" in state)
        side = round((state["pos_embed"].shape[1] - prefix) ** 0.5)
        architecture["img_size"] = (side * ph, side * pw)
    architecture["num_classes"] = state["head.weight"].shape[0] if "head.weight" in state else 0
    return architecture
