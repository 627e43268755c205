"""DETR checkpoints people have, mapped to vitlab's DETR key names (models/detr.py).

    vitlab            backbone.{conv1,bn1,layer1…4}, input_proj, query_embed, class_embed, bbox_embed.layers.*,
                      transformer.encoder.{i}.{attn.qkv, attn.proj, norm1, mlp.fc1, mlp.fc2, norm2},
                      transformer.decoder.{i}.{self_attn, norm1, cross_attn, norm2, mlp, norm3},
                      transformer.decoder_norm
    official (.pth)   {"model": …} with backbone.0.body.*,
                      transformer.encoder.layers.{i}.self_attn.in_proj_weight (rows [q; k; v], as vitlab's qkv),
                      out_proj, linear1/2, norm1/2(/3), multihead_attn (cross), transformer.decoder.norm,
                      transformer.encoder.norm (pre-norm only)
    Hugging Face      model.backbone.conv_encoder.model.* (timm: torchvision's names; or HF ResNet: embedder.embedder,
                      encoder.stages.{s}.layers.{l}.layer.{j} / shortcut, each .convolution + .normalization),
                      model.{encoder,decoder}.layers.{i}.self_attn.{q,k,v}_proj + out_proj, self_attn_layer_norm,
                      encoder_attn (cross), encoder_attn_layer_norm, fc1, fc2, final_layer_norm,
                      model.decoder.layernorm, model.input_projection, model.query_position_embeddings,
                      class_labels_classifier, bbox_predictor.layers.{0,1,2}              (transformers 4, on disk)
                      transformers 5 in memory: model.backbone.model.*, o_proj, layers.{i}.mlp.fc1/fc2

`is_detr_state(state)` recognises the three layouts; `detr_state(state)` maps any of them to vitlab's and
`detr_architecture(state, hf_config)` reads the DETRConfig fields the file determines.
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


def is_detr_state(state: dict[str, torch.Tensor]) -> bool:
    """A DETR's state dict, in any of the layouts: object queries over one feature map (a multi-scale detector
    embeds its levels as well, and is not one)."""
    single_scale = "transformer.level_embed" not in state and "model.level_embed" not in state
    queries = ("query_embed.weight", "model.query_position_embeddings.weight")
    return single_scale and any(key in state for key in queries)


def detr_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An official or Hugging Face DETR state dict, or vitlab's own, in vitlab's key names."""
    if "model.query_position_embeddings.weight" in state:
        return _from_huggingface(state)
    if any(key.startswith("backbone.0.body.") for key in state):
        return _from_official(state)
    return dict(state)


def _from_official(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.startswith("backbone.0.body."):
            out["backbone." + key.removeprefix("backbone.0.body.")] = value
        elif match := re.match(r"transformer\.(encoder|decoder)\.layers\.(\d+)\.(.+)$", key):
            side, i, rest = match.groups()
            rest = (rest.replace("in_proj_weight", "qkv.weight").replace("in_proj_bias", "qkv.bias")
                    .replace("out_proj", "proj").replace("multihead_attn.", "cross_attn.")
                    .replace("linear1", "mlp.fc1").replace("linear2", "mlp.fc2"))
            if side == "encoder":  # an encoder block names its one attention `attn`
                rest = rest.replace("self_attn.", "attn.", 1)
            out[f"transformer.{side}.{i}.{rest}"] = value
        elif key.startswith("transformer.decoder.norm."):
            out["transformer.decoder_norm." + key.rsplit(".", 1)[1]] = value
        elif key.startswith("transformer.encoder.norm."):
            out["transformer.encoder_norm." + key.rsplit(".", 1)[1]] = value
        else:  # input_proj, query_embed, class_embed, bbox_embed: the same names
            out[key] = value
    return out


def _from_huggingface(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    qkv: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        if key.startswith(("model.backbone.conv_encoder.model.", "model.backbone.model.")):
            rest = key.removeprefix("model.backbone.conv_encoder.model.").removeprefix("model.backbone.model.")
            if not rest.endswith("num_batches_tracked"):
                out["backbone." + hf_backbone_key(rest)] = value
        elif match := re.match(r"model\.(encoder|decoder)\.layers\.(\d+)\.(.+)\.(weight|bias)$", key):
            side, i, stem, kind = match.groups()
            attention = re.match(r"(self_attn|encoder_attn)\.([qkv])_proj$", stem)
            if attention:  # q, k, v projections become one (3D, D) matrix, rows [q; k; v]
                name = "attn" if side == "encoder" else ("self_attn" if attention[1] == "self_attn" else "cross_attn")
                qkv.setdefault(f"transformer.{side}.{i}.{name}.qkv.{kind}", {})[attention[2]] = value
                continue
            if side == "encoder":
                renamed = {"self_attn.out_proj": "attn.proj", "self_attn.o_proj": "attn.proj",
                           "final_layer_norm": "norm2"}.get(stem) or HF_LAYER[stem]
            else:
                renamed = {"encoder_attn_layer_norm": "norm2", "final_layer_norm": "norm3"}.get(stem) or HF_LAYER[stem]
            out[f"transformer.{side}.{i}.{renamed}.{kind}"] = value
        elif key.startswith("model.decoder.layernorm."):
            out["transformer.decoder_norm." + key.rsplit(".", 1)[1]] = value
        elif key.startswith("model.input_projection."):
            out["input_proj." + key.rsplit(".", 1)[1]] = value
        elif key == "model.query_position_embeddings.weight":
            out["query_embed.weight"] = value
        elif key.startswith("class_labels_classifier."):
            out["class_embed." + key.rsplit(".", 1)[1]] = value
        elif key.startswith("bbox_predictor."):
            out["bbox_embed." + key.removeprefix("bbox_predictor.")] = value
    for name, parts in qkv.items():
        out[name] = torch.cat([parts["q"], parts["k"], parts["v"]])
    return out


def detr_architecture(state: dict[str, torch.Tensor], hf_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The DETRConfig fields a vitlab-layout DETR state dict (and a Hugging Face config.json, if any) determine."""
    arch: dict[str, Any] = {"family": "detr"}
    dim = state["query_embed.weight"].shape[1]
    arch.update(dim=dim, num_queries=state["query_embed.weight"].shape[0],
                num_classes=state["class_embed.weight"].shape[0] - 1,
                enc_layers=len({k.split(".")[2] for k in state if k.startswith("transformer.encoder.")}),
                dec_layers=len({k.split(".")[2] for k in state if k.startswith("transformer.decoder.")}),
                pre_norm="transformer.encoder_norm.weight" in state, in_chans=state["backbone.conv1.weight"].shape[1])
    if "transformer.decoder.0.mlp.fc1.weight" in state:
        arch["ffn_dim"] = state["transformer.decoder.0.mlp.fc1.weight"].shape[0]
    stages = [s for s in range(1, 5) if f"backbone.layer{s}.0.conv1.weight" in state]
    blocks = tuple(len({k.split(".")[2] for k in state if k.startswith(f"backbone.layer{s}.")}) for s in stages)
    bottleneck = "backbone.layer1.0.conv3.weight" in state
    # the stage DETR reads is the one whose width the input projection takes (a Hugging Face backbone keeps the
    # weights of later stages it does not use)
    widths = (256, 512, 1024, 2048) if bottleneck else (64, 128, 256, 512)
    arch["backbone_last_stage"] = widths.index(state["input_proj.weight"].shape[1]) + 1
    if bottleneck:
        arch["backbone"] = "resnet101" if blocks[2:3] == (23,) else "resnet50"
    else:
        arch["backbone"] = "resnet18" if blocks[:1] == (2,) else "resnet34"
    arch["frozen_bn"] = "backbone.bn1.num_batches_tracked" not in state
    if hf_config:  # a state dict does not say how many heads there are: the official models have 8, the default
        arch["num_heads"] = hf_config.get("encoder_attention_heads", 8)
        arch["dropout"] = hf_config.get("dropout", 0.1)
        if hf_config.get("dilation"):
            raise ValueError("this DETR uses a dilated C5 (DETR-DC5), which vitlab's DETR does not build yet")
    return arch


def _convert(state: State, hf_config: dict[str, Any] | None) -> State:
    state = detr_state(state)
    return unused_stages_dropped(state, detr_architecture(state)["backbone_last_stage"])


def _architecture(state: State, file: CheckpointFile) -> dict[str, Any]:
    return detr_architecture(state, own_config(file.hf_config, "detr"))


register_converter(Converter("a DETR state dict (official .pth, Hugging Face DetrForObjectDetection)", "detr",
                             lambda state, hf_config: is_detr_state(state),
                             _convert, _architecture, source_of))


# ---- written for transformers: DetrForObjectDetection's save_pretrained folder (transformers 4's key names, which
# every version reads), its ResNet transformers' own, cut after the stage DETR reads; the object-detection pipeline
# loads it
def huggingface_detr_state(state: State, config: Any) -> State:
    """A vitlab DETR's state dict in DetrForObjectDetection's key names."""
    out, _ = hf_backbone(state, config.backbone, (config.backbone_last_stage,), config.in_chans)
    encoder = {"norm1": "self_attn_layer_norm", "mlp.fc1": "fc1", "mlp.fc2": "fc2", "norm2": "final_layer_norm"}
    decoder = {"norm1": "self_attn_layer_norm", "norm2": "encoder_attn_layer_norm", "mlp.fc1": "fc1",
               "mlp.fc2": "fc2", "norm3": "final_layer_norm"}
    for side, names, attentions in (("encoder", encoder, {"attn": "self_attn"}),
                                    ("decoder", decoder, {"self_attn": "self_attn", "cross_attn": "encoder_attn"})):
        layers = config.enc_layers if side == "encoder" else config.dec_layers
        for i in range(layers):
            ours, theirs = f"transformer.{side}.{i}", f"model.{side}.layers.{i}"
            for mine, hf_name in attentions.items():
                out |= hf_attention(state, f"{ours}.{mine}", f"{theirs}.{hf_name}")
            out |= {f"{theirs}.{hf_name}.{kind}": state[f"{ours}.{mine}.{kind}"]
                    for mine, hf_name in names.items() for kind in ("weight", "bias")}
    renamed = {"transformer.decoder_norm.": "model.decoder.layernorm.", "input_proj.": "model.input_projection.",
               "query_embed.": "model.query_position_embeddings.", "class_embed.": "class_labels_classifier.",
               "bbox_embed.": "bbox_predictor."}
    for key, value in state.items():
        for mine, hf_name in renamed.items():
            if key.startswith(mine):
                out[hf_name + key.removeprefix(mine)] = value
    return out


def _write_transformers(model: Any, preprocessing: dict[str, Any] | None, folder: Any) -> None:
    import json

    from safetensors.torch import save_file

    from ..models.family import family_config
    from .preprocessing import to_transformers

    config = family_config(model)
    if config.pre_norm:
        raise ValueError("transformers' DETR is post-norm; this DETR normalises before each layer (pre_norm): "
                         "vitlab's own format (vitlab push) keeps it")
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    _, backbone = hf_backbone(state, config.backbone, (config.backbone_last_stage,), config.in_chans)
    record = hf_detector_config(config, "DetrForObjectDetection", "detr") | {"backbone_config": backbone}
    save_file(huggingface_detr_state(state, config), str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(record, indent=2) + "\n")
    if preprocessing:
        processor = to_transformers(preprocessing, detector="DetrImageProcessor")
        (folder / "preprocessor_config.json").write_text(json.dumps(processor, indent=2) + "\n")


register_exporter(Exporter("transformers", "detr", _write_transformers))
