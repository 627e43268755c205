"""Deformable DETR checkpoints people have, mapped to vitlab's key names (models/deformable_detr.py).

    vitlab            backbone.{conv1,bn1,layer1…4}, input_proj.{l}.{0,1}, query_embed, transformer.level_embed,
                      transformer.encoder.{i}.{self_attn.*, norm1, mlp.fc1, mlp.fc2, norm2},
                      transformer.decoder.{i}.{self_attn.qkv, self_attn.proj, norm1, cross_attn.*, norm2, mlp, norm3},
                      transformer.{reference_points | enc_output, enc_output_norm, pos_trans, pos_trans_norm},
                      class_embed + bbox_embed.layers.* (one shared pair), or class_embed.{i} + bbox_embed.{i}
                      (with_box_refine: one pair per decoder layer, plus the proposals' when two-stage)
    official (.pth)   {"model": …}, backbone.0.body.*, transformer.encoder.layers.{i}.{self_attn, norm1, linear1,
                      linear2, norm2}, transformer.decoder.layers.{i}.{cross_attn, norm1 (after it), self_attn
                      .in_proj_weight / out_proj, norm2 (after it), linear1, linear2, norm3}, class_embed.{i} and
                      bbox_embed.{i} for every layer even when shared, transformer.decoder.{class,bbox}_embed
                      (the refining heads again)
    Hugging Face      model.backbone.conv_encoder.model.* (transformers 4 on disk) or model.backbone.model.*
                      (transformers 5 in memory), model.input_proj, model.level_embed,
                      model.query_position_embeddings, model.encoder.layers.{i}.{self_attn, self_attn_layer_norm,
                      fc1 | mlp.fc1, fc2 | mlp.fc2, final_layer_norm}, model.decoder.layers.{i}.{self_attn.{q,k,v}_proj,
                      out_proj | o_proj, self_attn_layer_norm, encoder_attn, encoder_attn_layer_norm, …},
                      model.reference_points, class_embed.{i}, bbox_embed.{i}, model.decoder.{class,bbox}_embed

A file may hold one copy of heads its model shares (safetensors keeps one name per shared tensor, and
transformers ties the refining class heads): missing heads are filled from the first one present.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from .converters import CheckpointFile, Converter, State, register_converter
from .exporters import Exporter, register_exporter
from .set_prediction_keys import (
    HF_LAYER,
    hf_attention,
    hf_backbone,
    hf_backbone_key,
    hf_detector_config,
    own_config,
    source_of,
    unused_stages_dropped,
)


def is_deformable_detr_state(state: dict[str, torch.Tensor]) -> bool:
    return "transformer.level_embed" in state or "model.level_embed" in state


def deformable_detr_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An official or Hugging Face Deformable DETR state dict (or vitlab's own) in vitlab's key names."""
    if "model.level_embed" in state:
        out, refine = _from_huggingface(state), any(k.startswith("model.decoder.bbox_embed.") for k in state)
    elif any(key.startswith("backbone.0.body.") for key in state):
        out, refine = _from_official(state), any(k.startswith("transformer.decoder.bbox_embed.") for k in state)
    else:
        return dict(state)
    return _heads(out, refine)


def _from_official(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    swapped_norms = {"norm1": "norm2", "norm2": "norm1"}  # its decoder's norm1 follows cross-attention
    for key, value in state.items():
        if key.startswith("backbone.0.body."):
            out["backbone." + key.removeprefix("backbone.0.body.")] = value
        elif match := re.match(r"transformer\.(encoder|decoder)\.layers\.(\d+)\.(.+)$", key):
            side, i, rest = match.groups()
            rest = rest.replace("linear1", "mlp.fc1").replace("linear2", "mlp.fc2")
            if side == "decoder":
                rest = (rest.replace("self_attn.in_proj_weight", "self_attn.qkv.weight")
                        .replace("self_attn.in_proj_bias", "self_attn.qkv.bias")
                        .replace("self_attn.out_proj", "self_attn.proj"))
                first, _, leaf = rest.partition(".")
                rest = f"{swapped_norms.get(first, first)}.{leaf}"
            out[f"transformer.{side}.{i}.{rest}"] = value
        elif key.startswith(("transformer.decoder.bbox_embed.", "transformer.decoder.class_embed.")):
            continue  # the detector's own heads, seen again by the decoder
        else:  # input_proj, query_embed, class_embed, bbox_embed, transformer.level_embed, reference_points, …
            out[key] = value
    return out


def _from_huggingface(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    qkv: dict[str, dict[str, torch.Tensor]] = {}
    top = {"model.level_embed": "transformer.level_embed", "model.query_position_embeddings.weight":
           "query_embed.weight"}
    for key, value in state.items():
        if key.startswith(("model.backbone.conv_encoder.model.", "model.backbone.model.")):
            rest = key.removeprefix("model.backbone.conv_encoder.model.").removeprefix("model.backbone.model.")
            if not rest.endswith("num_batches_tracked"):
                out["backbone." + hf_backbone_key(rest)] = value
        elif key in top:
            out[top[key]] = value
        elif match := re.match(r"model\.(encoder|decoder)\.layers\.(\d+)\.(.+)\.(weight|bias)$", key):
            side, i, stem, kind = match.groups()
            prefix = f"transformer.{side}.{i}"
            if attention := re.match(r"self_attn\.([qkv])_proj$", stem):
                qkv.setdefault(f"{prefix}.self_attn.qkv.{kind}", {})[attention[1]] = value
                continue
            if match := re.match(r"(self_attn|encoder_attn)\.(sampling_offsets|attention_weights|value_proj|"
                                 r"output_proj)$", stem):
                deformable = "self_attn" if side == "encoder" else "cross_attn"
                out[f"{prefix}.{deformable}.{match[2]}.{kind}"] = value
                continue
            norms = {"encoder": {"final_layer_norm": "norm2"},
                     "decoder": {"encoder_attn_layer_norm": "norm2", "final_layer_norm": "norm3"}}[side]
            out[f"{prefix}.{norms.get(stem) or HF_LAYER[stem]}.{kind}"] = value
        elif key.startswith("model.input_proj."):
            out[key.removeprefix("model.")] = value
        elif key.startswith(("model.reference_points.", "model.enc_output", "model.pos_trans")):
            out["transformer." + key.removeprefix("model.")] = value
        elif key.startswith(("class_embed.", "bbox_embed.")):
            out[key] = value
    for key, value in state.items():  # the decoder's copy of the refining heads, where a file kept only that one
        if key.startswith(("model.decoder.class_embed.", "model.decoder.bbox_embed.")):
            out.setdefault(key.removeprefix("model.decoder."), value)
    for name, parts in qkv.items():
        out[name] = torch.cat([parts["q"], parts["k"], parts["v"]])
    return out


def _heads(state: dict[str, torch.Tensor], refine: bool) -> dict[str, torch.Tensor]:
    """class_embed.{i} / bbox_embed.{i}.* as vitlab keeps them: one per layer with refinement (missing ones
    filled from the first present, the same shared tensor), else the single shared pair."""
    heads: dict[str, dict[int, dict[str, torch.Tensor]]] = {"class_embed": {}, "bbox_embed": {}}
    out = {}
    for key, value in state.items():
        if match := re.match(r"(class_embed|bbox_embed)\.(\d+)\.(.+)$", key):
            heads[match[1]].setdefault(int(match[2]), {})[match[3]] = value
        else:
            out[key] = value
    layers = 1 + max((int(k.split(".")[2]) for k in out if k.startswith("transformer.decoder.")), default=-1)
    count = layers + (1 if "transformer.enc_output.weight" in out else 0)
    for name, found in heads.items():
        if not found:
            continue
        first = found[min(found)]
        if not refine:
            out.update({f"{name}.{leaf}": value for leaf, value in first.items()})
            continue
        for i in range(count):
            out.update({f"{name}.{i}.{leaf}": value for leaf, value in found.get(i, first).items()})
    return out


def deformable_detr_architecture(state: dict[str, torch.Tensor], hf_config: dict[str, Any] | None = None
                                 ) -> dict[str, Any]:
    """The DeformableDETRConfig fields a vitlab-layout state dict (and a Hugging Face config.json) determine."""
    levels, dim = state["transformer.level_embed"].shape
    refine = "class_embed.0.weight" in state
    two_stage = "transformer.enc_output.weight" in state
    arch: dict[str, Any] = {
        "family": "deformable_detr", "dim": dim, "num_levels": levels, "with_box_refine": refine,
        "two_stage": two_stage, "in_chans": state["backbone.conv1.weight"].shape[1],
        "num_classes": state["class_embed.0.weight" if refine else "class_embed.weight"].shape[0],
        "enc_layers": len({k.split(".")[2] for k in state if k.startswith("transformer.encoder.")}),
        "dec_layers": len({k.split(".")[2] for k in state if k.startswith("transformer.decoder.")}),
        "ffn_dim": state["transformer.encoder.0.mlp.fc1.weight"].shape[0],
        "frozen_bn": "backbone.bn1.num_batches_tracked" not in state}
    if not two_stage:
        arch["num_queries"] = state["query_embed.weight"].shape[0]
    bottleneck = "backbone.layer1.0.conv3.weight" in state
    widths = (256, 512, 1024, 2048) if bottleneck else (64, 128, 256, 512)
    projections = sorted({int(k.split(".")[1]) for k in state if k.startswith("input_proj.")})
    stages = tuple(widths.index(state[f"input_proj.{p}.0.weight"].shape[1]) + 1 for p in projections
                   if state[f"input_proj.{p}.0.weight"].shape[-1] == 1)  # the 1×1 ones read the backbone
    arch["backbone_stages"] = stages
    blocks = {s: len({k.split(".")[2] for k in state if k.startswith(f"backbone.layer{s}.")}) for s in range(1, 5)}
    if bottleneck:
        arch["backbone"] = "resnet101" if blocks[3] == 23 else "resnet50"
    else:
        arch["backbone"] = "resnet18" if blocks[1] == 2 else "resnet34"
    heads, points = 8, 4  # the paper's; a state dict's shapes give only heads × levels × points
    if hf_config:
        heads = hf_config.get("encoder_attention_heads", heads)
        arch.update(dropout=hf_config.get("dropout", 0.1), enc_points=hf_config.get("encoder_n_points", points),
                    dec_points=hf_config.get("decoder_n_points", points))
        if two_stage:
            arch["num_queries"] = hf_config.get("two_stage_num_proposals", 300)
    else:
        offsets = state["transformer.encoder.0.self_attn.attention_weights.weight"].shape[0]
        arch["enc_points"] = offsets // (heads * levels)
        arch["dec_points"] = state["transformer.decoder.0.cross_attn.attention_weights.weight"].shape[0] // (
            heads * levels)
    arch["num_heads"] = heads
    return arch


def _convert(state: State, hf_config: dict[str, Any] | None) -> State:
    state = deformable_detr_state(state)
    return unused_stages_dropped(state, max(deformable_detr_architecture(state)["backbone_stages"]))


def _architecture(state: State, file: CheckpointFile) -> dict[str, Any]:
    return deformable_detr_architecture(state, own_config(file.hf_config, "deformable_detr"))


register_converter(Converter("a Deformable DETR state dict (official .pth, Hugging Face DeformableDetr...)",
                             "deformable_detr", lambda state, hf_config: is_deformable_detr_state(state), _convert,
                             _architecture, source_of))


# ---- written for transformers: DeformableDetrForObjectDetection's save_pretrained folder, plain, refining or
# two-stage, its ResNet transformers' own (cut after the last stage read); pure-PyTorch attention, no custom kernel
def huggingface_deformable_detr_state(state: State, config: Any) -> State:
    """A vitlab Deformable DETR's state dict in DeformableDetrForObjectDetection's key names. Every head is written
    at every index transformers builds (a shared head once per layer), so that no version's tying or untying of
    them leaves one uninitialised."""
    out, _ = hf_backbone(state, config.backbone, config.backbone_stages, config.in_chans)
    sampling = ("sampling_offsets", "attention_weights", "value_proj", "output_proj")
    for i in range(config.enc_layers):
        ours, theirs = f"transformer.encoder.{i}", f"model.encoder.layers.{i}"
        names = {f"self_attn.{p}": f"self_attn.{p}" for p in sampling} | {
            "norm1": "self_attn_layer_norm", "mlp.fc1": "fc1", "mlp.fc2": "fc2", "norm2": "final_layer_norm"}
        out |= {f"{theirs}.{hf_name}.{kind}": state[f"{ours}.{mine}.{kind}"]
                for mine, hf_name in names.items() for kind in ("weight", "bias")}
    for i in range(config.dec_layers):
        ours, theirs = f"transformer.decoder.{i}", f"model.decoder.layers.{i}"
        out |= hf_attention(state, f"{ours}.self_attn", f"{theirs}.self_attn")
        names = {f"cross_attn.{p}": f"encoder_attn.{p}" for p in sampling} | {
            "norm1": "self_attn_layer_norm", "norm2": "encoder_attn_layer_norm", "mlp.fc1": "fc1", "mlp.fc2": "fc2",
            "norm3": "final_layer_norm"}
        out |= {f"{theirs}.{hf_name}.{kind}": state[f"{ours}.{mine}.{kind}"]
                for mine, hf_name in names.items() for kind in ("weight", "bias")}
    for key, value in state.items():
        if key == "transformer.level_embed":
            out["model.level_embed"] = value
        elif key == "query_embed.weight":
            out["model.query_position_embeddings.weight"] = value
        elif key.startswith("input_proj."):
            out["model." + key] = value
        elif key.startswith(("transformer.reference_points.", "transformer.enc_output", "transformer.pos_trans")):
            out["model." + key.removeprefix("transformer.")] = value
    heads = config.dec_layers + (1 if config.two_stage else 0)
    for i in range(heads):
        for head in ("class_embed", "bbox_embed"):
            mine = f"{head}.{i}." if config.with_box_refine else f"{head}."
            for key, value in state.items():
                if key.startswith(mine):
                    leaf = key.removeprefix(mine)
                    out[f"{head}.{i}.{leaf}"] = value.clone()  # a file holds each tensor once
                    if (head == "bbox_embed" and config.with_box_refine) or config.two_stage:
                        out[f"model.decoder.{head}.{i}.{leaf}"] = value.clone()  # the decoder's refining copy
    return out


def _write_transformers(model: Any, preprocessing: dict[str, Any] | None, folder: Any) -> None:
    import json

    from safetensors.torch import save_file

    from ..models.family import family_config
    from .preprocessing import to_transformers

    config = family_config(model)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    _, backbone = hf_backbone(state, config.backbone, config.backbone_stages, config.in_chans)
    record = hf_detector_config(config, "DeformableDetrForObjectDetection", "deformable_detr") | {
        "backbone_config": backbone, "num_feature_levels": config.num_levels, "encoder_n_points": config.enc_points,
        "decoder_n_points": config.dec_points, "with_box_refine": config.with_box_refine,
        "two_stage": config.two_stage, "two_stage_num_proposals": config.num_queries,
        # transformers ties every layer's heads to the first unless told not to; vitlab's refining heads differ
        "tie_word_embeddings": False, "disable_custom_kernels": True}
    save_file(huggingface_deformable_detr_state(state, config), str(folder / "model.safetensors"),
              metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(record, indent=2) + "\n")
    if preprocessing:
        processor = to_transformers(preprocessing, detector="DeformableDetrImageProcessor")
        (folder / "preprocessor_config.json").write_text(json.dumps(processor, indent=2) + "\n")


register_exporter(Exporter("transformers", "deformable_detr", _write_transformers))
