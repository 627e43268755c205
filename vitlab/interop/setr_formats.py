"""SETR checkpoints of the official code (fudan-zvg/SETR), mapped to vitlab's SETR names (models/setr.py).

    vitlab            backbone.{cls_token, pos_embed, patch_embed.proj, blocks.{i}.*}   (timm's ViT names)
                      decode_head.{norm, conv_k, syncbn_fc_k}        Naive / PUP, conv_n the classifier
                      neck.{norm_0…3, mla.mla_p{2…5}_1x1, mla.mla_p{2…5}}
                      decode_head.{mlahead.head{2…5}, cls}, auxiliary_head.{i}.aux      MLA
                      auxiliary_head.{i}.{norm, conv_k, syncbn_fc_k}                     Naive / PUP
    official (.pth)   mmcv's {"meta", "state_dict", "optimizer"}: the same names, except
                      - the MLA neck sits inside the backbone: backbone.norm_k, backbone.mla.*;
                      - every head has an unused `conv_seg` (mmseg 0.6's BaseDecodeHead builds it, nothing calls
                        it);
                      - the MLA backbone keeps a class token and its position-embedding entry, which its forward
                        drops before the first block, so they never affect the output; vitlab's MLA encoder has
                        neither.

`is_setr_state(state)` recognises either layout, `setr_state(state)` maps the official one to vitlab's (vitlab's
passes through), and `setr_architecture(state)` reads the SETRConfig fields the shapes determine.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch

from .converters import Converter, register_converter


def is_setr_state(state: dict[str, torch.Tensor]) -> bool:
    return any(k.startswith("decode_head.") for k in state) and any(k.startswith("backbone.") for k in state)


def setr_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    state = {k.removeprefix("module."): v for k, v in state.items()}
    out = {}
    for key, value in state.items():
        if ".conv_seg." in key or key.startswith("conv_seg."):
            continue  # built by mmseg's BaseDecodeHead and never called
        key = re.sub(r"^backbone\.(norm_\d+|mla)\.", r"neck.\1.", key)
        out[key] = value
    if any(k.startswith("neck.") for k in out) and "backbone.cls_token" in out:
        out.pop("backbone.cls_token")  # the official MLA encoder drops the class token before the first block
        pos = out.get("backbone.pos_embed")
        if pos is not None and math.isqrt(pos.shape[1] - 1) ** 2 == pos.shape[1] - 1:
            out["backbone.pos_embed"] = pos[:, 1:]
    return out


def setr_architecture(state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """SETRConfig fields from a state in vitlab's names. The head count is not in the shapes: ViTs of every
    published size use 64-wide heads, so dim // 64."""
    patch = state["backbone.patch_embed.proj.weight"]
    dim, in_chans, patch_size = patch.shape[0], patch.shape[1], patch.shape[2]
    depth = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"backbone\.blocks\.(\d+)\.", k)))
    if "decode_head.cls.weight" in state:
        decoder, classifier = "mla", state["decode_head.cls.weight"]
    else:
        convs = sum(1 for k in state if re.fullmatch(r"decode_head\.syncbn_fc_\d+\.weight", k))
        decoder = "pup" if convs > 1 else "naive"
        classifier = state[f"decode_head.conv_{convs}.weight"]
    tokens = state["backbone.pos_embed"].shape[1] - ("backbone.cls_token" in state)
    side = math.isqrt(tokens)
    if side * side != tokens:
        raise ValueError(f"the checkpoint's position embedding has {tokens} patch entries, not a square grid")
    arch: dict[str, Any] = {
        "family": "setr", "decoder": decoder, "num_classes": classifier.shape[0], "img_size": side * patch_size,
        "patch_size": patch_size, "dim": dim, "depth": depth, "num_heads": max(1, dim // 64), "in_chans": in_chans,
        "aux": any(k.startswith("auxiliary_head.") for k in state),
    }
    if decoder == "mla":
        arch["mla_channels"] = state["neck.mla.mla_p2_1x1.0.weight"].shape[0]
        arch["mla_head_channels"] = state["decode_head.mlahead.head2.0.weight"].shape[0]
    else:
        arch["channels"] = state["decode_head.conv_0.weight"].shape[0]
    return arch


register_converter(Converter("an mmsegmentation SETR checkpoint (backbone.*, decode_head.*)", "setr",
                             lambda state, hf_config: is_setr_state(state), lambda state, hf_config: setr_state(state),
                             lambda state, file: setr_architecture(state), lambda state, hf_config: "setr"))
