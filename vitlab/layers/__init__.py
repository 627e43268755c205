"""Shared building blocks; every model imports these rather than defining its own."""

from .attention import MultiHeadAttention, explicit_attention
from .blocks import DecoderBlock, EncoderBlock, KVCache, LayerScale, PostNormEncoderBlock, PreNormDecoderBlock
from .deform_attn import (
    DeformableDecoderBlock,
    DeformableEncoderBlock,
    MSDeformAttn,
    multi_scale_deformable_attention,
    multi_scale_deformable_attention_reference,
)
from .drop import DropPath, drop_path
from .mlp import Mlp
from .patch_embed import PatchEmbed, patchify, unpatchify
from .pos_embed import learned_pos_embed, resample_pos_embed, sincos_1d, sincos_2d, sincos_pos_embed, sine_pos_embed_2d

__all__ = [
    "DecoderBlock",
    "DeformableDecoderBlock",
    "DeformableEncoderBlock",
    "DropPath",
    "EncoderBlock",
    "KVCache",
    "LayerScale",
    "MSDeformAttn",
    "Mlp",
    "MultiHeadAttention",
    "PatchEmbed",
    "PostNormEncoderBlock",
    "PreNormDecoderBlock",
    "drop_path",
    "explicit_attention",
    "learned_pos_embed",
    "multi_scale_deformable_attention",
    "multi_scale_deformable_attention_reference",
    "patchify",
    "resample_pos_embed",
    "sincos_1d",
    "sincos_2d",
    "sincos_pos_embed",
    "sine_pos_embed_2d",
    "unpatchify",
]
