"""Seeing what a ViT learned: attention maps, attention rollout, position-embedding similarity, filters."""

from .attention import attention_rollout, collect_attention, fuse_heads, layer_head_maps, rollout_map, token_map
from .inspect import patch_filter_components, position_similarity

__all__ = [
    "attention_rollout",
    "collect_attention",
    "fuse_heads",
    "layer_head_maps",
    "patch_filter_components",
    "position_similarity",
    "rollout_map",
    "token_map",
]
