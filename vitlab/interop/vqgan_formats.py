"""VQGAN checkpoints of taming-transformers (the official code) and of diffusers' `VQModel`, mapped to vitlab's
names (models/vqgan.py, which follow taming's).

    taming (= vitlab, but for the last column)    diffusers VQModel                            vitlab differs
    encoder.down.{i}.block.{j}                    encoder.down_blocks.{i}.resnets.{j}
      .nin_shortcut                                 .conv_shortcut                               .shortcut
    encoder.down.{i}.attn.{j}                     encoder.down_blocks.{i}.attentions.{j}
    encoder.down.{i}.downsample.conv              encoder.down_blocks.{i}.downsamplers.0.conv
    {en,de}coder.mid.block_1 / block_2            {en,de}coder.mid_block.resnets.0 / 1
    {en,de}coder.mid.attn_1                       {en,de}coder.mid_block.attentions.0
    {en,de}coder.norm_out                         {en,de}coder.conv_norm_out
    decoder.up.{i}, up.0 at full resolution       decoder.up_blocks.{n−1−i}, 0 at the lowest
    decoder.up.{i}.upsample.conv                  decoder.up_blocks.{n−1−i}.upsamplers.0.conv
    loss.discriminator.main.*                     (none)                                       discriminator.main.*

Attention: taming's q, k, v, proj_out are 1×1 convolutions (C, C, 1, 1); diffusers' to_q, to_k, to_v, to_out.0
are Linear layers (older diffusers files: query, key, value, proj_attn), and its norm is `group_norm`. vitlab
stacks the three input projections into one `attn.qkv` (3C, C) and calls the output `attn.proj`.

Both libraries place β the other way round from the paper (layers/quantize.py): their models load with
`legacy=True`, so that they train as they did. A taming training checkpoint (.ckpt) also holds the perceptual
loss's VGG weights (`loss.perceptual_loss.*`), which vitlab does not use; they are dropped.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from .converters import CheckpointFile, Converter, State, register_converter
from .exporters import Exporter, register_exporter

TAMING_ATTENTION = {"q": 0, "k": 1, "v": 2}
DIFFUSERS_ATTENTION = {"to_q": 0, "to_k": 1, "to_v": 2, "query": 0, "key": 1, "value": 2}


def is_vqgan_state(state: dict[str, torch.Tensor]) -> bool:
    return "quantize.embedding.weight" in state and "encoder.conv_in.weight" in state


def is_diffusers(state: dict[str, torch.Tensor]) -> bool:
    return any(k.startswith("encoder.down_blocks.") for k in state)


def vqgan_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A taming or diffusers state dict -> vitlab's names (a vitlab state passes through)."""
    if is_diffusers(state):
        levels = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"decoder\.up_blocks\.(\d+)\.", k)))
        state = {_diffusers_name(key, levels): value for key, value in state.items()}
    state = {key.replace("loss.discriminator.", "discriminator.").replace(".nin_shortcut.", ".shortcut."): value
             for key, value in state.items() if not key.startswith("loss.perceptual_loss.")}
    state = _fuse_attention(state)
    # the quantiser's bookkeeping (layers/quantize.py): a loaded codebook is started, its restart window empty
    num_codes = state["quantize.embedding.weight"].shape[0]
    state.setdefault("quantize.initialized", torch.tensor(True))
    state.setdefault("quantize.code_counts", torch.zeros(num_codes))
    state.setdefault("quantize.window_steps", torch.zeros((), dtype=torch.long))
    return state


def _diffusers_name(key: str, levels: int) -> str:
    key = re.sub(r"^encoder\.down_blocks\.(\d+)\.resnets\.", r"encoder.down.\1.block.", key)
    key = re.sub(r"^encoder\.down_blocks\.(\d+)\.attentions\.", r"encoder.down.\1.attn.", key)
    key = re.sub(r"^encoder\.down_blocks\.(\d+)\.downsamplers\.0\.", r"encoder.down.\1.downsample.", key)
    up = re.match(r"^decoder\.up_blocks\.(\d+)\.(.+)$", key)
    if up:
        rest = up.group(2).replace("resnets.", "block.", 1).replace("attentions.", "attn.", 1)
        rest = rest.replace("upsamplers.0.", "upsample.", 1)
        key = f"decoder.up.{levels - 1 - int(up.group(1))}.{rest}"
    key = re.sub(r"\.mid_block\.resnets\.0\.", ".mid.block_1.", key)
    key = re.sub(r"\.mid_block\.resnets\.1\.", ".mid.block_2.", key)
    key = re.sub(r"\.mid_block\.attentions\.0\.", ".mid.attn_1.", key)
    key = key.replace(".conv_norm_out.", ".norm_out.").replace(".conv_shortcut.", ".shortcut.")
    key = re.sub(r"(\.attn(?:_1|\.\d+))\.group_norm\.", r"\1.norm.", key)
    key = re.sub(r"(\.attn(?:_1|\.\d+))\.(?:to_out\.0|proj_attn)\.", r"\1.proj_out.", key)
    return key


def _fuse_attention(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Separate q, k, v projections (1×1 convolutions or Linear layers) -> one `attn.qkv`; proj_out -> attn.proj."""
    out: dict[str, torch.Tensor] = {}
    qkv: dict[tuple[str, str], list[torch.Tensor | None]] = {}
    for key, value in state.items():
        match = re.match(r"(.+\.attn(?:_1|\.\d+))\.(q|k|v|to_q|to_k|to_v|query|key|value|proj_out)\.(weight|bias)$",
                         key)
        if not match:
            out[key] = value
            continue
        stem, part, kind = match.groups()
        value = value.flatten(1) if kind == "weight" else value  # (C, C, 1, 1) -> (C, C)
        if part == "proj_out":
            out[f"{stem}.attn.proj.{kind}"] = value
        else:
            slot = TAMING_ATTENTION.get(part, DIFFUSERS_ATTENTION.get(part))
            qkv.setdefault((stem, kind), [None, None, None])[slot] = value
    for (stem, kind), parts in qkv.items():
        if any(p is None for p in parts):
            raise ValueError(f"the attention at {stem} lacks one of its query, key and value {kind}s")
        out[f"{stem}.attn.qkv.{kind}"] = torch.cat(parts)
    return out


def vqgan_architecture(state: dict[str, torch.Tensor], hf_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """VQGANConfig fields from a state dict in vitlab's names (and a diffusers config.json when there is one)."""
    c = hf_config or {}
    if c.get("norm_type", "group") != "group":
        raise ValueError(f"this VQModel uses norm_type={c['norm_type']!r} (MoVQ's spatial norm); vitlab's VQGAN "
                         f"has GroupNorm only")
    ch = state["encoder.conv_in.weight"].shape[0]
    levels = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"encoder\.down\.(\d+)\.", k)))
    widths = [state[f"encoder.down.{i}.block.0.conv1.weight"].shape[0] for i in range(levels)]
    if any(w % ch for w in widths):
        raise ValueError(f"level widths {widths} are not multiples of the first width {ch}")
    blocks = 1 + max(int(m.group(1)) for k in state if (m := re.match(r"encoder\.down\.0\.block\.(\d+)\.", k)))
    resolution = c.get("sample_size", 256)
    resolution = resolution[0] if isinstance(resolution, list | tuple) else resolution
    f = 2 ** (levels - 1)
    resolution = max(f, resolution - resolution % f)
    attn = tuple(resolution // 2 ** i for i in range(levels)
                 if any(k.startswith(f"encoder.down.{i}.attn.") for k in state))
    discriminator = sorted({int(m.group(1)) for k in state
                            if (m := re.match(r"discriminator\.main\.(\d+)\.weight$", k))
                            and state[k].ndim == 4})
    return {
        "family": "vqgan", "in_chans": state["encoder.conv_in.weight"].shape[1],
        "out_chans": state["decoder.conv_out.weight"].shape[0],
        "resolution": resolution, "ch": ch, "ch_mult": tuple(w // ch for w in widths), "num_res_blocks": blocks,
        "attn_resolutions": attn, "mid_attention": "encoder.mid.attn_1.attn.qkv.weight" in state,
        "z_channels": state["encoder.conv_out.weight"].shape[0], "embed_dim": state["quant_conv.weight"].shape[0],
        "num_codes": state["quantize.embedding.weight"].shape[0], "num_groups": c.get("norm_num_groups", 32),
        "legacy": True,
        "disc_layers": len(discriminator) - 2 if discriminator else 0,
        "disc_channels": state["discriminator.main.0.weight"].shape[0] if discriminator else 64,
    }


def _own_config(hf_config: dict[str, Any] | None) -> dict[str, Any] | None:
    return hf_config if hf_config and hf_config.get("_class_name") == "VQModel" else None


def _architecture(state: State, file: CheckpointFile) -> dict[str, Any]:
    return vqgan_architecture(state, _own_config(file.hf_config))


# what the tensors say; the training size, GroupNorm groups and β's placement are the file's guesses (taming's
# defaults), which a named model's own values replace
DECIDES = ("in_chans", "out_chans", "ch", "ch_mult", "num_res_blocks", "mid_attention", "z_channels", "embed_dim",
           "num_codes", "disc_layers", "disc_channels")

register_converter(Converter("a taming-transformers VQGAN or a diffusers VQModel (quantize.embedding, encoder.*)",
                             "vqgan", lambda state, hf_config: is_vqgan_state(state),
                             lambda state, hf_config: vqgan_state(state), _architecture,
                             lambda state, hf_config: "diffusers" if is_diffusers(state) else "taming", DECIDES))


# ---- written for diffusers: a VQModel folder (config.json, diffusion_pytorch_model.safetensors), which
# `VQModel.from_pretrained` loads; the inverse of the names above, in diffusers' current form (Linear to_q, to_k,
# to_v, to_out.0 and group_norm). The discriminator trains the VQGAN only: a VQModel has none
def _to_diffusers_name(key: str, levels: int) -> str:
    key = re.sub(r"\.mid\.block_1\.", ".mid_block.resnets.0.", key)
    key = re.sub(r"\.mid\.block_2\.", ".mid_block.resnets.1.", key)
    key = re.sub(r"\.mid\.attn_1\.", ".mid_block.attentions.0.", key)
    key = re.sub(r"^encoder\.down\.(\d+)\.block\.", r"encoder.down_blocks.\1.resnets.", key)
    key = re.sub(r"^encoder\.down\.(\d+)\.attn\.", r"encoder.down_blocks.\1.attentions.", key)
    key = re.sub(r"^encoder\.down\.(\d+)\.downsample\.", r"encoder.down_blocks.\1.downsamplers.0.", key)
    up = re.match(r"^decoder\.up\.(\d+)\.(.+)$", key)
    if up:
        rest = up.group(2).replace("block.", "resnets.", 1).replace("attn.", "attentions.", 1)
        rest = rest.replace("upsample.", "upsamplers.0.", 1)
        key = f"decoder.up_blocks.{levels - 1 - int(up.group(1))}.{rest}"
    key = key.replace(".norm_out.", ".conv_norm_out.").replace(".shortcut.", ".conv_shortcut.")
    key = re.sub(r"(\.attentions\.\d+)\.norm\.", r"\1.group_norm.", key)
    return re.sub(r"(\.attentions\.\d+)\.attn\.proj\.", r"\1.to_out.0.", key)


def _diffusers_state(state: State, levels: int) -> State:
    out: State = {}
    for key, value in state.items():
        if key.startswith(("discriminator.", "quantize.")) and key != "quantize.embedding.weight":
            continue  # the GAN's critic and the quantiser's training bookkeeping
        name = _to_diffusers_name(key, levels)
        qkv = re.match(r"(.+\.attentions\.\d+)\.attn\.qkv\.(weight|bias)$", name)
        if qkv:
            for part, piece in zip(("to_q", "to_k", "to_v"), value.chunk(3)):
                out[f"{qkv.group(1)}.{part}.{qkv.group(2)}"] = piece.contiguous()
        else:
            out[name] = value.contiguous()
    return out


def _write_diffusers(model: Any, preprocessing: dict[str, Any] | None, folder: Any) -> None:
    import json

    from safetensors.torch import save_file

    from ..models.family import family_config

    c = family_config(model)
    levels = len(c.ch_mult)
    attended = {c.resolution // 2 ** i for i in range(levels)} & set(c.attn_resolutions)
    down = ["AttnDownEncoderBlock2D" if c.resolution // 2 ** i in attended else "DownEncoderBlock2D"
            for i in range(levels)]
    up = ["AttnUpDecoderBlock2D" if c.resolution // 2 ** (levels - 1 - j) in attended else "UpDecoderBlock2D"
          for j in range(levels)]
    record = {"_class_name": "VQModel", "in_channels": c.in_chans, "out_channels": c.out_chans or c.in_chans,
              "down_block_types": down, "up_block_types": up, "block_out_channels": [c.ch * m for m in c.ch_mult],
              "layers_per_block": c.num_res_blocks, "act_fn": "silu", "latent_channels": c.z_channels,
              "sample_size": c.resolution, "num_vq_embeddings": c.num_codes, "norm_num_groups": c.num_groups,
              "vq_embed_dim": c.embed_dim, "scaling_factor": 0.18215, "norm_type": "group",
              "mid_block_add_attention": c.mid_attention, "lookup_from_codebook": False, "force_upcast": False}
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    save_file(_diffusers_state(state, levels), str(folder / "diffusion_pytorch_model.safetensors"),
              metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(record, indent=2) + "\n")


register_exporter(Exporter("diffusers", "vqgan", _write_diffusers))
