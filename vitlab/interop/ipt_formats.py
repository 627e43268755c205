"""IPT checkpoints of the official code (huawei-noah/Pretrained-IPT: `IPT_pretrain.pt`, `IPT_sr2.pt`,
`IPT_denoise50.pt`, ...), mapped to vitlab's IPT names (models/ipt.py).

The released files are raw state dicts of the official `ipt` module. Heads, tails and the mean shifts have the same
names here; the transformer differs:

    official (nn.MultiheadAttention, bias=False, sequence-first)       vitlab
    body.encoder.layers.{l}.self_attn.in_proj_weight                   body.encoder.{l}.attn.qkv.weight
    body.encoder.layers.{l}.self_attn.out_proj.weight                  body.encoder.{l}.attn.proj.weight
    body.{en,de}coder.layers.{l}.linear1 / linear2                     body.{en,de}coder.{l}.mlp.fc1 / fc2
    body.{en,de}coder.layers.{l}.norm{k}                               body.{en,de}coder.{l}.norm{k}
    body.decoder.layers.{l}.self_attn / multihead_attn                 body.decoder.{l}.self_attn / cross_attn
    body.position_encoding.pe.weight (N, D)                            body.pos_embed (1, N, D)
    body.position_encoding.position_ids (1, N), arange                 (dropped)
    body.query_embed.weight (tasks, N·D)                               body.query_embed (tasks, N, D)

`ipt_architecture(state, name)` reads the IPTConfig fields from the shapes. A tail's upsampler gives its scale;
the tasks of scale 1 (derain, denoise30, denoise50) look alike, so the file's name decides them when it names one
(`IPT_denoise50.pt`), and the official six-task order (x2, x3, x4, derain, σ30, σ50) otherwise.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import torch

from ..models.ipt import DEGRADATION_SCALES, PAPER_DEGRADATIONS
from .converters import Converter, register_converter

LAYER_NAMES = {"self_attn.in_proj_weight": "{attn}.qkv.weight", "self_attn.out_proj.weight": "{attn}.proj.weight",
               "multihead_attn.in_proj_weight": "cross_attn.qkv.weight",
               "multihead_attn.out_proj.weight": "cross_attn.proj.weight",
               "linear1.weight": "mlp.fc1.weight", "linear1.bias": "mlp.fc1.bias",
               "linear2.weight": "mlp.fc2.weight", "linear2.bias": "mlp.fc2.bias"}
# the official attention has no biases, but some torch 1.x releases gave nn.MultiheadAttention an output bias even
# with bias=False; a file written there carries it, which is dropped when it is zero (nothing else can be loaded)
DROPPED_BIASES = ("self_attn.out_proj.bias", "multihead_attn.out_proj.bias")


def is_ipt_state(state: dict[str, torch.Tensor]) -> bool:
    return "body.linear_encoding.weight" in state and any(k.startswith("head.0.") for k in state) \
        and any(k.startswith("tail.0.") for k in state)


def is_official(state: dict[str, torch.Tensor]) -> bool:
    return any(k.startswith("body.encoder.layers.") for k in state)


def ipt_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The official layout -> vitlab's (a vitlab state passes through)."""
    state = {k.removeprefix("module."): v for k, v in state.items()}
    if not is_official(state):
        return state
    out = {}
    for key, value in state.items():
        layer = re.match(r"body\.(encoder|decoder)\.layers\.(\d+)\.(.+)$", key)
        if layer:
            stack, index, rest = layer.groups()
            if rest in DROPPED_BIASES:
                if value.abs().max() > 0:
                    raise ValueError(f"{key} is not zero: IPT's attention has no output bias, and vitlab's IPT has "
                                     f"none to load it into")
                continue
            name = LAYER_NAMES.get(rest, rest).format(attn="attn" if stack == "encoder" else "self_attn")
            out[f"body.{stack}.{index}.{name}"] = value
        elif key == "body.position_encoding.position_ids":
            continue  # arange(N): which table row each token takes
        elif key == "body.position_encoding.pe.weight":
            out["body.pos_embed"] = value[None]
        elif key == "body.query_embed.weight":
            dim = state["body.linear_encoding.weight"].shape[0]
            out["body.query_embed"] = value.view(value.shape[0], -1, dim)
        else:
            out[key] = value
    return out


def tail_scale(state: dict[str, torch.Tensor], index: int, channels: int) -> int:
    """A tail's upsampling factor from its pixel-shuffle convolutions (none: scale 1)."""
    first = state.get(f"tail.{index}.0.0.weight")
    if first is None:
        return 1
    ratio = first.shape[0] // channels  # s² output channels per feature for one ×s step
    if ratio == 9:
        return 3
    return 2 ** sum(1 for k in state if re.fullmatch(rf"tail\.{index}\.0\.\d+\.weight", k))  # one conv per ×2


def degradations_for(scales: list[int], name: str = "") -> tuple[str, ...]:
    """Degradation names for tails of these scales: sr{s} for s > 1; for scale 1, a task the file's name mentions,
    else the official order (derain, denoise30, denoise50)."""
    hinted = [task for task in ("derain", "denoise30", "denoise50") if task in name.lower()]
    spare = [*hinted, "derain", "denoise30", "denoise50"]
    names, used = [], set()
    for scale in scales:
        if scale > 1:
            names.append(f"sr{scale}")
            continue
        task = next(t for t in spare if t not in used)
        used.add(task)
        names.append(task)
    if scales.count(1) and not hinted and scales != [DEGRADATION_SCALES[t] for t in PAPER_DEGRADATIONS]:
        warnings.warn(f"the checkpoint's {scales.count(1)} task(s) of scale 1 could be deraining or denoising; taken "
                      f"as {', '.join(t for t, s in zip(names, scales) if s == 1)}. A file name that says which "
                      f"(IPT_denoise50.pt, IPT_derain.pt) decides it.", stacklevel=3)
    return tuple(names)


def ipt_architecture(state: dict[str, torch.Tensor], name: str = "") -> dict[str, Any]:
    """IPTConfig fields from a state in vitlab's names. The head count is not in the shapes: every released IPT
    has 12 heads (of 48 channels), taken when the width allows, else 64-wide heads."""
    head = state["head.0.0.weight"]  # (C, in_chans, 3, 3)
    channels, in_chans = head.shape[0], head.shape[1]
    dim = state["body.linear_encoding.weight"].shape[0]
    patch_dim = math.isqrt(dim // channels)
    tokens = state["body.pos_embed"].shape[1]
    num_layers = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"body\.encoder\.(\d+)\.", k)))
    hidden = state["body.encoder.0.mlp.fc1.weight"].shape[0]
    tails = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"tail\.(\d+)\.", k)))
    scales = [tail_scale(state, i, channels) for i in range(tails)]
    mean = state.get("sub_mean.bias")
    rgb_range = round(float(-mean[0] / 0.4488), 3) if mean is not None else 255.0
    return {"family": "ipt", "degradations": degradations_for(scales, name), "channels": channels,
            "patch_size": math.isqrt(tokens) * patch_dim, "patch_dim": patch_dim,
            "num_heads": 12 if dim % 12 == 0 else max(1, dim // 64), "num_layers": num_layers,
            "mlp_ratio": hidden / dim, "rgb_range": rgb_range, "in_chans": in_chans}


register_converter(Converter("an IPT checkpoint (body.linear_encoding, head.N, tail.N)", "ipt",
                             lambda state, hf_config: is_ipt_state(state), lambda state, hf_config: ipt_state(state),
                             lambda state, file: ipt_architecture(state, file.path.name),
                             lambda state, hf_config: "ipt"))
