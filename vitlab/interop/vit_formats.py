"""ViT and DeiT checkpoints people already have, mapped to vitlab's (= timm's) key names and layouts.

    vitlab / timm   blocks.{i}.attn.qkv.weight (3D, D) rows [q; k; v], blocks.{i}.norm1, mlp.fc1, head, ...
    Hugging Face    vit.layers.{i}.attention.{q,k,v,o}_proj            (transformers ≥ 5; DeiT: deit.*, plus
                    embeddings.distillation_token, cls_classifier, distillation_classifier)
                    vit.encoder.layer.{i}.attention.attention.{query,key,value}, attention.output.dense,
                    intermediate.dense, output.dense                      (transformers 4 and the Hub's files)
                    layernorm_before/after, embeddings.{cls_token, position_embeddings, patch_embeddings}
    Google .npz     Transformer/encoderblock_{i}/MultiHeadDotProductAttention_1/{query,key,value,out}/kernel with
                    kernels (D, heads, head_dim) and (heads, head_dim, D); Dense kernels (in, out); the patch
                    kernel (ph, pw, C, D) "HWIO"

Three converters are registered: a timm state dict (its shapes tell everything but the number of heads, which the
registered model of that width and depth supplies), a Hugging Face ViT / DeiT (its config.json says the rest, and
its LayerNorm epsilon: 1e-12 by default where timm's and JAX's is 1e-6), and a Google .npz.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import torch

from ..models.registry import get_config, list_models
from .converters import CheckpointFile, Converter, State, register_converter
from .exporters import Exporter, register_exporter

# ---- Hugging Face -------------------------------------------------------------------------------------------------
HF_BLOCK_V5 = {"attention.o_proj": "attn.proj", "layernorm_before": "norm1", "layernorm_after": "norm2",
               "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
HF_BLOCK_V4 = {"attention.output.dense": "attn.proj", "layernorm_before": "norm1", "layernorm_after": "norm2",
               "intermediate.dense": "mlp.fc1", "output.dense": "mlp.fc2"}
HF_QKV = {"v5": ("attention.q_proj", "attention.k_proj", "attention.v_proj"),
          "v4": ("attention.attention.query", "attention.attention.key", "attention.attention.value")}


def _from_huggingface(state: State, hf_config: dict[str, Any] | None) -> State:
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
                      stacklevel=4)
    return out


def _huggingface_architecture(state: State, file: CheckpointFile) -> dict[str, Any]:
    if not file.hf_config:  # a loose file: its shapes, and the heads of the registered model of that size
        return _timm_architecture(state, file)
    architecture = _architecture_from_hf_config(file.hf_config)
    if "dist_token" in state:
        architecture["family"] = "deit"
    return architecture


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
NPZ_PREFIXES = ("", "opt/target/", "params/")


def _npz_prefix(state: State) -> str | None:
    return next((p for p in NPZ_PREFIXES if f"{p}embedding/kernel" in state), None)


def _from_npz(w: State, hf_config: dict[str, Any] | None = None) -> State:
    prefix = _npz_prefix(w)

    def get(name: str) -> torch.Tensor:
        return w[prefix + name].float().contiguous()

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
                      "layer, which vitlab's ViT does not have); its head is dropped with it", stacklevel=4)
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
    return out


def _npz_architecture(state: State, file: CheckpointFile) -> dict[str, Any]:
    prefix = _npz_prefix(file.original)
    query = file.original[f"{prefix}Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"]
    return {**_architecture_from_state(state), "num_heads": query.shape[1], "norm_eps": 1e-6}


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
    if not architecture["class_token"]:
        architecture["global_pool"] = "avg"
    if "dist_token" in state:
        architecture["family"] = "deit"  # a DeiT⚗: class and distillation tokens
    if "pos_embed" in state:
        prefix = ("cls_token" in state) + ("dist_token" in state)
        side = round((state["pos_embed"].shape[1] - prefix) ** 0.5)
        architecture["img_size"] = (side * ph, side * pw)
    architecture["num_classes"] = state["head.weight"].shape[0] if "head.weight" in state else 0
    return architecture


# what timm's hub config.json says of the model in its model_args that the shapes do not tell (vitlab writes every
# one of them: _timm_model_args), by the name vitlab's ViT config gives it
TIMM_ARGS_NOT_IN_SHAPES = ("num_heads", "global_pool", "dynamic_img_size", "init_values", "mlp_ratio")


def _timm_architecture(state: State, file: CheckpointFile) -> dict[str, Any]:
    """A state dict's shapes, with what timm's config.json adds in its model_args (the head count, the pooling);
    else the number of heads of the registered ViT it names, or of the registered ViT of that width, depth and
    patch."""
    architecture = _architecture_from_state(state)
    given = (file.hf_config or {}).get("model_args") or {}
    if "num_heads" in given:  # the model's own arguments, not those of the architecture it is a variant of
        return {**architecture, **{key: given[key] for key in TIMM_ARGS_NOT_IN_SHAPES if key in given}}
    named = (file.hf_config or {}).get("architecture")  # timm's hub config.json names the model it saved
    if named in list_models():
        return {**architecture, "num_heads": get_config(named).num_heads}
    patch = architecture.get("patch_size", (0, 0))
    for name in list_models("vit_*"):
        c = get_config(name)
        if c.dim == architecture.get("dim") and c.depth == architecture.get("depth") and \
                c.patch_size in (patch, patch[0]):
            return {**architecture, "num_heads": c.num_heads}
    architecture["needs_model_name"] = (
        f"it is a state dict of a {architecture.get('dim')}-wide, {architecture.get('depth')}-deep ViT, whose number "
        f"of heads its shapes do not tell and no registered model matches")
    return architecture


def _is_timm(state: State, hf_config: dict[str, Any] | None) -> bool:
    weight = state.get("patch_embed.proj.weight")
    return weight is not None and weight.ndim == 4


def _is_huggingface(state: State, hf_config: dict[str, Any] | None) -> bool:
    return any("embeddings.patch_embeddings" in key for key in state)


# what a file still decides when the user names the model: its head, resolution, channels and LayerNorm epsilon
DECIDES = ("num_classes", "img_size", "in_chans", "norm_eps")

register_converter(Converter("a timm ViT or DeiT state dict (patch_embed.proj, blocks.N.attn.qkv, ...)", "vit",
                             _is_timm, lambda state, hf_config: dict(state), _timm_architecture,
                             lambda state, hf_config: "timm", DECIDES))
register_converter(Converter("a Hugging Face ViT or DeiT (embeddings.patch_embeddings, ...)", "vit",
                             _is_huggingface, _from_huggingface, _huggingface_architecture,
                             lambda state, hf_config: "huggingface", DECIDES))
register_converter(Converter("a Google ViT .npz (embedding/kernel, Transformer/encoderblock_N/...)", "vit",
                             lambda state, hf_config: _npz_prefix(state) is not None, _from_npz, _npz_architecture,
                             lambda state, hf_config: "npz", DECIDES))


# ---- written for timm: its hub folder (model.safetensors, config.json), which timm.create_model("hf-hub:...") and
# ("local-dir:...") build. The keys are timm's already; the config says the architecture, the sizes no timm preset
# has (model_args), the labels and the eval transform (pretrained_cfg)
TIMM_ARCHITECTURES = {"vit": "vit_base_patch16_224", "deit": "deit_base_distilled_patch16_224"}


def _timm_model_args(config: Any) -> dict[str, Any]:
    """timm VisionTransformer's arguments for this config; a variant timm cannot build is refused, saying why."""
    if config.patch_proj != "conv" or config.stem_channels:
        raise ValueError(f"this ViT embeds its patches with a {config.patch_proj} projection"
                         f"{' after a convolutional stem' if config.stem_channels else ''}, which timm's "
                         f"VisionTransformer has no argument for; vitlab's own format (vitlab push) keeps it")
    if config.pos_embed != "learn":
        raise ValueError(f"this ViT's position embedding is {config.pos_embed!r}; timm's VisionTransformer learns "
                         f"it: vitlab's own format (vitlab push) keeps it")
    if config.norm_eps != 1e-6:
        raise ValueError(f"this ViT's LayerNorms have eps {config.norm_eps}; timm's VisionTransformer uses 1e-6 and "
                         f"takes no other from its config: vitlab's own format (vitlab push) keeps it")
    pair = (lambda v: list(v) if isinstance(v, tuple | list) else v)  # noqa: E731 - JSON has no tuples
    return {"img_size": pair(config.img_size), "patch_size": pair(config.patch_size), "in_chans": config.in_chans,
            "embed_dim": config.dim, "depth": config.depth, "num_heads": config.num_heads,
            "mlp_ratio": config.mlp_ratio, "qkv_bias": config.qkv_bias, "class_token": config.class_token,
            "global_pool": config.global_pool, "init_values": config.init_values,
            "dynamic_img_size": config.dynamic_img_size}


def _timm_pretrained_cfg(config: Any, preprocessing: dict[str, Any] | None, distilled: bool) -> dict[str, Any]:
    """timm's eval transform for the model's recorded preprocessing: the centre crop, the share of the resized image
    it keeps (crop_pct), the interpolation, mean and std; timm's ImageNet defaults where nothing is recorded."""
    from ..data.preprocessing import Preprocessing

    size = config.img_size if isinstance(config.img_size, tuple | list) else (config.img_size, config.img_size)
    cfg: dict[str, Any] = {"input_size": [config.in_chans, *size], "num_classes": config.num_classes,
                           "crop_mode": "center", "fixed_input_size": not config.dynamic_img_size,
                           "first_conv": "patch_embed.proj", "classifier": ["head", "head_dist"] if distilled
                           else "head", "license": "unknown"}
    if preprocessing:
        rule = Preprocessing.from_dict(preprocessing)
        crop = rule.input_size or tuple(size)
        cfg |= {"interpolation": rule.interpolation, "mean": list(rule.mean), "std": list(rule.std),
                "crop_pct": crop[0] / rule.resize if isinstance(rule.resize, int) else 1.0}
        if isinstance(rule.resize, tuple):  # both sides to a size, the ratio not kept: timm's "squash" resizes so
            cfg |= {"crop_mode": "squash", "crop_pct": crop[0] / rule.resize[0]}
    return cfg


def _write_timm(model: Any, preprocessing: dict[str, Any] | None, folder: Any) -> None:
    import json

    from safetensors.torch import save_file

    from ..models.family import family_config

    config = family_config(model)
    family = type(config).family
    distilled = family == "deit"
    record = {"architecture": TIMM_ARCHITECTURES[family], "num_classes": config.num_classes,
              "num_features": config.dim, "global_pool": config.global_pool,
              "model_args": _timm_model_args(config),
              "pretrained_cfg": _timm_pretrained_cfg(config, preprocessing, distilled)}
    if config.labels:
        record["label_names"] = list(config.labels)
    save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()},
              str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(record, indent=2) + "\n")


for _family in TIMM_ARCHITECTURES:
    register_exporter(Exporter("timm", _family, _write_timm))


# ---- written for transformers: a save_pretrained-shaped folder (config.json, model.safetensors under transformers'
# classic key names, which every transformers version reads, and preprocessor_config.json), which
# AutoModelForImageClassification and pipeline("image-classification") load (an RGB model: the pipeline makes
# every image RGB)
HF_ARCHITECTURES = {"vit": ("vit", "ViTForImageClassification"),
                    "deit": ("deit", "DeiTForImageClassificationWithTeacher")}


def _huggingface_state(model: Any, config: Any, distilled: bool) -> State:
    prefix = "deit." if distilled else "vit."
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    out = {f"{prefix}embeddings.cls_token": state["cls_token"],
           f"{prefix}embeddings.position_embeddings": state["pos_embed"],
           f"{prefix}layernorm.weight": state["norm.weight"], f"{prefix}layernorm.bias": state["norm.bias"]}
    if distilled:
        out[f"{prefix}embeddings.distillation_token"] = state["dist_token"]
    for kind in ("weight", "bias"):
        out[f"{prefix}embeddings.patch_embeddings.projection.{kind}"] = state[f"patch_embed.proj.{kind}"]
        if distilled:
            out[f"cls_classifier.{kind}"] = state[f"head.{kind}"]
            out[f"distillation_classifier.{kind}"] = state[f"head_dist.{kind}"]
        else:
            out[f"classifier.{kind}"] = state[f"head.{kind}"]
    for i in range(config.depth):
        layer = f"{prefix}encoder.layer.{i}"
        for hf_name, name in HF_BLOCK_V4.items():
            for kind in ("weight", "bias"):
                if f"blocks.{i}.{name}.{kind}" in state:
                    out[f"{layer}.{hf_name}.{kind}"] = state[f"blocks.{i}.{name}.{kind}"]
        for kind in ("weight", "bias"):
            if f"blocks.{i}.attn.qkv.{kind}" in state:  # rows [q; k; v]
                for hf_name, part in zip(HF_QKV["v4"], state[f"blocks.{i}.attn.qkv.{kind}"].chunk(3)):
                    out[f"{layer}.{hf_name}.{kind}"] = part.contiguous()
    return out


def _square(value: Any, what: str) -> int:
    if isinstance(value, tuple | list):
        if value[0] != value[1]:
            raise ValueError(f"this ViT's {what} is {value[0]} × {value[1]}; transformers' ViT takes a square one: "
                             f"vitlab's own format (vitlab push) or timm's keeps it")
        return int(value[0])
    return int(value)


def _write_transformers(model: Any, preprocessing: dict[str, Any] | None, folder: Any) -> None:
    import json

    from safetensors.torch import save_file

    from ..models.family import family_config
    from .preprocessing import to_transformers

    config = family_config(model)
    family = type(config).family
    distilled = family == "deit"
    if config.patch_proj != "conv" or config.stem_channels or config.pos_embed != "learn":
        _timm_model_args(config)  # refused, saying why: transformers' ViT embeds patches as timm's does
    if config.global_pool != "token" or not config.class_token or config.init_values is not None:
        raise ValueError("transformers' ViT classifies from the class token, without LayerScale; this ViT "
                         f"(global_pool={config.global_pool!r}, class_token={config.class_token}, init_values="
                         f"{config.init_values}) is not one: vitlab's own format (vitlab push) keeps it")
    model_type, architecture = HF_ARCHITECTURES[family]
    names = list(config.labels) or [str(i) for i in range(config.num_classes)]
    patch = _square(config.patch_size, "patch")
    record = {"architectures": [architecture], "model_type": model_type, "hidden_size": config.dim,
              "num_hidden_layers": config.depth, "num_attention_heads": config.num_heads,
              "intermediate_size": int(config.dim * config.mlp_ratio), "hidden_act": "gelu",
              "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "initializer_range": 0.02,
              "layer_norm_eps": config.norm_eps, "image_size": _square(config.img_size, "image size"),
              "patch_size": patch, "num_channels": config.in_chans, "qkv_bias": config.qkv_bias,
              "encoder_stride": patch, "id2label": {str(i): name for i, name in enumerate(names)},
              "label2id": {name: i for i, name in enumerate(names)}}
    save_file(_huggingface_state(model, config, distilled), str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(record, indent=2) + "\n")
    if preprocessing:
        processor = to_transformers(preprocessing)
        (folder / "preprocessor_config.json").write_text(json.dumps(processor, indent=2) + "\n")


for _family in HF_ARCHITECTURES:
    register_exporter(Exporter("transformers", _family, _write_transformers))
