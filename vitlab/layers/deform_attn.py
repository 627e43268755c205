"""Multi-scale deformable attention (Zhu et al. 2021, Deformable DETR, §4.1, eq. 3), in plain PyTorch.

Each query attends to P sampled points on each of L feature maps, around its reference point, instead of to every
pixel: for head m,

    out_m(q) = Σ_l Σ_p A_mlqp · V_m^l(φ_l(p̂_q) + Δp_mlqp)

where the offsets Δp and the weights A (a softmax over the L·P points together) are linear functions of the
query, and V^l(x) reads the value map of level l at a fractional location by bilinear interpolation.

The official code and transformers' fallback read V^l with one `grid_sample` call per level, then stack and
weight the samples: `multi_scale_deformable_attention_reference` is that formulation, the readable one, kept as the
definition the fast path is held to (forward and gradients, tests/layers/test_deform_attn.py). The fast path,
`multi_scale_deformable_attention`, makes the whole sum one weighted lookup into the values of all levels at
once. Each level gets a one-pixel border of zeros (that is `grid_sample`'s zero padding with
`align_corners=False`), so a sample point is always its four corner pixels, rows tl, tl+1, tl+W+2 and tl+W+3 of
the padded (B·S_padded·heads, head_dim) value table, with bilinear weights; and
`F.embedding_bag(mode="sum", per_sample_weights=A·bilinear)` sums a query's L·P·4 weighted rows without ever
materialising the samples. Its own backward is slow on the CPU (a sort of every corner and a serial
per-sample-weight kernel), so the backward is written out here:

- the weights' gradient is one dot product per corner, ⟨∂out_q, V[row]⟩, which `torch.sparse.sampled_addmm`
  computes over the (query, row) pattern of the forward without materialising the gathered rows; the
  locations' and attention weights' gradients follow from it by the chain rule of the bilinear weights;
- the values' gradient is a scatter of ∂out_q·A·bilinear into the four corners. The sample points (not their four
  times as many corners) are sorted by their top-left corner once; four `embedding_bag` calls, one per corner,
  sum them per top-left pixel, and each sum is added to its corner by a shifted slice of the padded map.

Under ONNX export the same sum is a gather of the corners and a weighted reduction, which every runtime has.

Shapes: value (B, S, heads, head_dim) with S = Σ_l H_l·W_l (levels flattened row-major, finest first),
spatial_shapes (L, 2) as (H_l, W_l), sampling_locations (B, Q, heads, L, P, 2) as (x, y) in [0, 1] of each map,
attention_weights (B, Q, heads, L, P) -> (B, Q, heads·head_dim).
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention
from .mlp import Mlp

LevelShapes = torch.Tensor | list[tuple[int, int]]  # (L, 2) as (H_l, W_l), or the same as a list of pairs


def spatial_shapes_of(maps: list[torch.Tensor]) -> torch.Tensor:
    """[(B, C, h_l, w_l)] maps -> (L, 2) long tensor of their (h_l, w_l), computed from the maps' sizes."""
    return shapes_tensor([tuple(m.shape[-2:]) for m in maps], maps[0].device)


def shapes_tensor(shapes: list[tuple[int, int]], device: torch.device | str | None = None) -> torch.Tensor:
    """[(h_l, w_l)] -> (L, 2) long tensor.

    Built from one scalar per size, not `torch.as_tensor` of a Python list: under torch.export a list of sizes
    becomes a constant of the example's shapes, and a graph made at one image size would then read the wrong
    rows at every other (vitlab ≤ 0.1.0's Deformable DETR graphs did); the scalars stay symbolic."""
    return torch.stack([torch.stack([torch.scalar_tensor(size, dtype=torch.long, device=device) for size in pair])
                        for pair in shapes])


def level_start_index(spatial_shapes: torch.Tensor) -> torch.Tensor:
    """(L, 2) shapes -> (L,) offset of each level's first pixel in the flattened sequence."""
    sizes = spatial_shapes[:, 0] * spatial_shapes[:, 1]
    return torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])


def _corner_rows_and_weights(value_shape: tuple[int, ...], spatial_shapes: torch.Tensor,
                             sampling_locations: torch.Tensor,
                             attention_weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The export path's lookup: for each query and head, the rows of the (B·S·heads, head_dim) value table its
    samples read and the weight of each, (B·Q·heads, L·P·4) both; corners outside their map weigh 0."""
    batch, length, heads, _ = value_shape
    _, queries, _, levels, points, _ = sampling_locations.shape
    shapes = spatial_shapes.to(sampling_locations.device)
    heights, widths = (shapes[:, axis, None].to(sampling_locations.dtype) for axis in (0, 1))  # (L, 1)
    # align_corners=False: pixel centres at +0.5
    px = sampling_locations[..., 0] * widths - 0.5  # (B, Q, heads, L, P)
    py = sampling_locations[..., 1] * heights - 0.5
    x0, y0 = px.floor(), py.floor()
    fx, fy = px - x0, py - y0
    # the four corners (x0, y0), (x0+1, y0), (x0, y0+1), (x0+1, y0+1), each axis written out: (B, Q, heads, L, P, 4)
    x = torch.stack([x0, x0 + 1, x0, x0 + 1], -1)
    y = torch.stack([y0, y0, y0 + 1, y0 + 1], -1)
    bilinear = torch.stack([(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy], -1)
    inside = (x >= 0) & (x < widths[..., None]) & (y >= 0) & (y < heights[..., None])
    weights = attention_weights[..., None] * bilinear * inside  # (B, Q, heads, L, P, 4)
    # a corner outside its map weighs 0 already; any row in its level will do
    x = x.long().clamp(min=0).minimum(shapes[:, 1, None, None] - 1)
    y = y.long().clamp(min=0).minimum(shapes[:, 0, None, None] - 1)
    pixel_index = level_start_index(shapes)[:, None, None] + y * shapes[:, 1, None, None] + x  # in 0 … S-1
    image = torch.arange(batch, device=px.device).view(batch, 1, 1, 1, 1, 1)
    head = torch.arange(heads, device=px.device).view(1, 1, heads, 1, 1, 1)
    rows = (image * length + pixel_index) * heads + head  # row of value.reshape(B·S·heads, head_dim)
    samples = levels * points * 4  # corners
    return rows.reshape(batch * queries * heads, samples), weights.reshape(batch * queries * heads, samples)


def _padded_layout(shapes: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """First pixel and width of each level in the padded maps (one pixel of zeros around each level)."""
    starts, widths, start = [], [], 0
    for height, width in shapes:
        starts.append(start)
        widths.append(width + 2)
        start += (height + 2) * (width + 2)
    return starts, widths


def _pad_levels(value: torch.Tensor, shapes: list[tuple[int, int]]) -> torch.Tensor:
    """(B, S, heads, head_dim) -> (B, S_padded, heads, head_dim), each level inside a border of zeros."""
    batch, _, heads, head_dim = value.shape
    levels, start = [], 0
    for height, width in shapes:
        level = value[:, start:start + height * width].view(batch, height, width, heads, head_dim)
        levels.append(F.pad(level, (0, 0, 0, 0, 1, 1, 1, 1)).flatten(1, 2))
        start += height * width
    return torch.cat(levels, 1)


def _unpad_levels(padded: torch.Tensor, shapes: list[tuple[int, int]]) -> torch.Tensor:
    """The inverse of `_pad_levels`: the borders cut off."""
    batch, _, heads, head_dim = padded.shape
    levels, start = [], 0
    for height, width in shapes:
        size = (height + 2) * (width + 2)
        level = padded[:, start:start + size].view(batch, height + 2, width + 2, heads, head_dim)
        levels.append(level[:, 1:-1, 1:-1].flatten(1, 2))
        start += size
    return torch.cat(levels, 1)


class _DeformableSampling(torch.autograd.Function):
    """The core's sum with the backward written out (see the module's docstring)."""

    @staticmethod
    def forward(ctx, value: torch.Tensor, sampling_locations: torch.Tensor, attention_weights: torch.Tensor,
                shapes: list[tuple[int, int]]) -> torch.Tensor:
        batch, _, heads, head_dim = value.shape
        _, queries, _, levels, points, _ = sampling_locations.shape
        device = value.device
        table = _pad_levels(value, shapes)
        padded_length = table.shape[1]
        table = table.view(-1, head_dim)  # row (image·S_padded + pixel)·heads + head
        starts, widths = _padded_layout(shapes)
        width_height = sampling_locations.new_tensor([[w, h] for h, w in shapes])  # (L, 2) as (W, H)
        pixel = sampling_locations * width_height[:, None, :] - 0.5  # align_corners=False: centres at +0.5
        # beyond one pixel outside a map every corner is border, so clamping there changes nothing
        clamped = torch.minimum(pixel.clamp(min=-1.0), width_height[:, None, :])
        top_left = torch.minimum(clamped.floor(), width_height[:, None, :] - 1)  # in -1 … W-1, so tl+1 ≤ W
        fraction = clamped - top_left  # (B, Q, heads, L, P, 2)
        fx, fy = fraction.unbind(-1)
        bilinear = torch.stack([(1 - fx) * (1 - fy), fx * (1 - fy), (1 - fx) * fy, fx * fy], -1)
        x, y = (top_left.long() + 1).unbind(-1)  # padded coordinates
        level_start = torch.tensor(starts, device=device)[:, None]
        level_width = torch.tensor(widths, device=device)[:, None]
        image = torch.arange(batch, device=device).view(batch, 1, 1, 1, 1)
        head = torch.arange(heads, device=device).view(1, 1, heads, 1, 1)
        top_left_row = (image * padded_length + level_start + y * level_width + x) * heads + head  # (B,Q,M,L,P)
        corner_step = torch.tensor([[0, 1, w, w + 1] for w in widths], device=device) * heads  # (L, 4)
        rows = (top_left_row[..., None] + corner_step[:, None, :]).view(batch * queries * heads, -1)
        weights = (attention_weights[..., None] * bilinear).to(table.dtype)  # (B, Q, heads, L, P, 4)
        out = F.embedding_bag(rows, table, mode="sum", per_sample_weights=weights.view(rows.shape))
        ctx.save_for_backward(table, rows, top_left_row, bilinear, weights, attention_weights, fraction, pixel,
                              width_height)
        ctx.shapes = shapes
        ctx.value_shape = value.shape
        return out.view(batch, queries, heads * head_dim)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor):
        table, rows, top_left_row, bilinear, weights, attention_weights, fraction, pixel, width_height = \
            ctx.saved_tensors
        batch, _, heads, head_dim = ctx.value_shape
        grad = grad_out.reshape(rows.shape[0], head_dim).to(table.dtype).contiguous()  # one row per query·head
        grad_value = grad_locations = grad_weights = None
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            dots = _row_dots(grad, table, rows).view(bilinear.shape).to(bilinear.dtype)  # ⟨∂out, V[corner]⟩
            grad_weights = (dots * bilinear).sum(-1)
            d00, d10, d01, d11 = dots.unbind(-1)
            fx, fy = fraction.unbind(-1)
            d_fraction = torch.stack([(d10 - d00) * (1 - fy) + (d11 - d01) * fy,
                                      (d01 - d00) * (1 - fx) + (d11 - d10) * fx], -1)
            moving = (pixel > -1) & (pixel < width_height[:, None, :])  # where the clamp let the point move
            grad_locations = d_fraction * attention_weights[..., None] * moving * width_height[:, None, :]
        if ctx.needs_input_grad[0]:
            grad_value = _unpad_levels(_scatter_to_corners(grad, top_left_row, weights, table.shape[0], ctx.shapes,
                                                           batch, heads), ctx.shapes)
        return grad_value, grad_locations, grad_weights, None


def _row_dots(grad: torch.Tensor, table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """⟨grad[i], table[rows[i, j]]⟩ for every (i, j): (N, head_dim), (R, head_dim), (N, K) -> (N, K)."""
    if grad.dtype not in (torch.float32, torch.float64):  # sampled_addmm has no half-precision kernel
        return torch.bmm(table[rows], grad[:, :, None]).squeeze(-1)
    count, per_row = rows.shape
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        pattern = torch.sparse_csr_tensor(torch.arange(0, count * per_row + 1, per_row, device=rows.device),
                                          rows.reshape(-1), grad.new_zeros(count * per_row),
                                          (count, table.shape[0]), check_invariants=False)
        return torch.sparse.sampled_addmm(pattern, grad, table.t(), beta=0.0).values().view(count, per_row)


def _scatter_to_corners(grad: torch.Tensor, top_left_row: torch.Tensor, weights: torch.Tensor, table_rows: int,
                        shapes: list[tuple[int, int]], batch: int, heads: int) -> torch.Tensor:
    """Σ over the samples reading a row of weight · grad of the sample's query: the padded values' gradient,
    (B, S_padded, heads, head_dim). grad (B·Q·heads, head_dim); top_left_row (B, Q, heads, L, P); weights
    (B, Q, heads, L, P, 4)."""
    head_dim = grad.shape[1]
    per_query = top_left_row.shape[3] * top_left_row.shape[4]  # L·P samples in each query·head's bag
    keys = top_left_row.reshape(-1)
    order = (keys.int() if table_rows < 2 ** 31 else keys).argsort()  # 32-bit keys sort in about half the time
    counts = torch.bincount(keys[order], minlength=table_rows)
    offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    query_row = order // per_query
    corner_weights = weights.reshape(-1, 4)[order].t().contiguous()
    # at_top_left[c][r]: what the samples whose top-left corner is row r give to their corner c
    at_top_left = [F.embedding_bag(query_row, grad, offsets, mode="sum", per_sample_weights=corner_weights[c],
                                   include_last_offset=True).view(batch, -1, heads, head_dim) for c in range(4)]
    total = at_top_left[0].clone()
    start = 0
    for height, width in shapes:
        size = (height + 2) * (width + 2)
        level = [t[:, start:start + size].view(batch, height + 2, width + 2, heads, head_dim) for t in at_top_left]
        out = total[:, start:start + size].view(batch, height + 2, width + 2, heads, head_dim)
        out[:, :, 1:] += level[1][:, :, :-1]  # corner (x+1, y)
        out[:, 1:] += level[2][:, :-1]  # corner (x, y+1)
        out[:, 1:, 1:] += level[3][:, :-1, :-1]  # corner (x+1, y+1)
        start += size
    return total


def _check_shapes(value: torch.Tensor, sampling_locations: torch.Tensor, attention_weights: torch.Tensor) -> None:
    batch, _, heads, _ = value.shape
    queries = sampling_locations.shape[1]
    if sampling_locations.shape[-1] != 2 or sampling_locations.shape[:3] != (batch, queries, heads):
        raise ValueError(f"sampling_locations must be (B={batch}, Q, heads={heads}, L, P, 2), got "
                         f"{tuple(sampling_locations.shape)}")
    if attention_weights.shape != sampling_locations.shape[:-1]:
        raise ValueError(f"attention_weights must be {tuple(sampling_locations.shape[:-1])} (one per sampling "
                         f"point), got {tuple(attention_weights.shape)}")


def multi_scale_deformable_attention_reference(value: torch.Tensor, spatial_shapes: torch.Tensor,
                                               sampling_locations: torch.Tensor,
                                               attention_weights: torch.Tensor) -> torch.Tensor:
    """Eq. 3 as the paper's code computes it: each level's value map read at the sampling points with one
    `F.grid_sample`, then the samples weighted and summed over levels and points.

    grid_sample's bilinear reading with zero padding and align_corners=False is V^l(x) of the paper: pixel i's
    centre at (i + ½)/W, and outside the map zeros. Every sample is materialised, (B·heads, head_dim, Q, L, P) in
    all, and autograd differentiates through grid_sample: the readable path, and the definition the fast one is held
    to. Shapes as in `multi_scale_deformable_attention`: value (B, S, heads, head_dim), spatial_shapes (L, 2) as
    (H, W), sampling_locations (B, Q, heads, L, P, 2) as (x, y) in [0, 1], attention_weights (B, Q, heads, L, P)
    -> (B, Q, heads·head_dim).
    """
    _check_shapes(value, sampling_locations, attention_weights)
    return _sample_by_grid(value, _level_list(spatial_shapes, value.shape[1]), sampling_locations, attention_weights)


def _level_list(spatial_shapes: LevelShapes, length: int) -> list[tuple[int, int]]:
    """The level shapes as Python numbers (read back from a tensor), checked against the values' S pixels."""
    if isinstance(spatial_shapes, torch.Tensor):
        spatial_shapes = spatial_shapes.tolist()
    shapes = [(int(h), int(w)) for h, w in spatial_shapes]
    if sum(h * w for h, w in shapes) != length:
        raise ValueError(f"the levels {shapes} hold {sum(h * w for h, w in shapes)} pixels, but value has "
                         f"S={length}")
    return shapes


def _sample_by_grid(value: torch.Tensor, shapes: list[tuple[int, int]], sampling_locations: torch.Tensor,
                    attention_weights: torch.Tensor) -> torch.Tensor:
    """The reference's sum: one `grid_sample` per level, the samples weighted and summed. `shapes` may be symbolic
    (an exported graph's: one GridSample node a level, for any image size)."""
    batch, _, heads, head_dim = value.shape
    _, queries, _, levels, points, _ = sampling_locations.shape
    grid = 2 * sampling_locations - 1  # grid_sample's coordinates: -1 and 1 are the maps' outer edges
    weights = attention_weights.transpose(1, 2).reshape(batch * heads, 1, queries, levels, points)
    out = value.new_zeros(())
    for level, level_value in enumerate(value.split([h * w for h, w in shapes], dim=1)):
        height, width = shapes[level]
        # one map per image and head: (B, H·W, heads, head_dim) -> (B·heads, head_dim, H, W)
        maps = level_value.permute(0, 2, 3, 1).reshape(batch * heads, head_dim, height, width)
        # where each query's points fall on this level: (B, Q, heads, P, 2) -> (B·heads, Q, P, 2)
        points_xy = grid[:, :, :, level].transpose(1, 2).reshape(batch * heads, queries, points, 2)
        sampled = F.grid_sample(maps, points_xy, mode="bilinear", padding_mode="zeros", align_corners=False)
        out = out + (sampled * weights[:, :, :, level]).sum(-1)  # (B·heads, head_dim, Q, P) -> (…, Q)
    # heads side by side, as the fast path and the output projection have them: -> (B, Q, heads·head_dim)
    return out.view(batch, heads * head_dim, queries).transpose(1, 2)


def multi_scale_deformable_attention(value: torch.Tensor, spatial_shapes: LevelShapes,
                                     sampling_locations: torch.Tensor,
                                     attention_weights: torch.Tensor) -> torch.Tensor:
    """Σ over levels and points of the attention weight times the bilinearly sampled value, per head: the fast
    path (the module docstring), equal to `multi_scale_deformable_attention_reference` up to float rounding.

    value (B, S, heads, head_dim); spatial_shapes (L, 2) as (H, W), or the list of (H, W) pairs (the maps' own
    sizes, symbolic in an exported graph); sampling_locations (B, Q, heads, L, P, 2) in [0, 1]; attention_weights
    (B, Q, heads, L, P) -> (B, Q, heads·head_dim).
    """
    _check_shapes(value, sampling_locations, attention_weights)
    batch, length, heads, head_dim = value.shape
    queries = sampling_locations.shape[1]
    if torch.compiler.is_exporting() or torch.onnx.is_in_onnx_export() or torch.jit.is_tracing():
        if not isinstance(spatial_shapes, torch.Tensor):
            # one GridSample a level, the form ONNX Runtime and OpenVINO run fastest
            # (benchmarks/results/deform_attn_forms.md), its sizes the maps' own, symbolic
            return _sample_by_grid(value, list(spatial_shapes), sampling_locations, attention_weights)
        # only the shapes' tensor: a gather of the corners (one graph for every size: a Python list of the tensor's
        # values would hold the traced size's), which every runtime has
        rows, weights = _corner_rows_and_weights(value.shape, spatial_shapes, sampling_locations, attention_weights)
        table = value.reshape(batch * length * heads, head_dim)
        out = (table[rows] * weights[..., None].to(table.dtype)).sum(1)  # (B·Q·heads, head_dim)
        return out.view(batch, queries, heads * head_dim)
    if torch.compiler.is_compiling():
        # torch.compile keeps the core one opaque op of its graph, run as it is: traced, the gather's symbolic
        # indexing took inductor minutes a graph, and reading the level shapes back (a graph break) recompiled the
        # graphs around it at every image size. Training keeps its own backward between graphs
        if torch.is_grad_enabled():
            return _sample_eagerly(value, spatial_shapes, sampling_locations, attention_weights)
        if not isinstance(spatial_shapes, torch.Tensor):
            spatial_shapes = shapes_tensor(list(spatial_shapes), value.device)
        return _deformable_sampling_op(value, spatial_shapes, sampling_locations, attention_weights)
    return _sample(value, spatial_shapes, sampling_locations, attention_weights)


def _sample(value: torch.Tensor, spatial_shapes: LevelShapes, sampling_locations: torch.Tensor,
            attention_weights: torch.Tensor) -> torch.Tensor:
    """The fast path's sum (the module docstring), eagerly: the level shapes as Python numbers."""
    shapes = _level_list(spatial_shapes, value.shape[1])
    return _DeformableSampling.apply(value, sampling_locations, attention_weights, shapes)


# torch.compiler.disable imports torch._dynamo (a second and more of every `import vitlab`); torch's own lazy form
# imports it at the first call, which only a compiled graph makes
_sample_eagerly = (getattr(torch, "_disable_dynamo", None) or torch.compiler.disable)(_sample)


@torch.library.custom_op("vitlab::multi_scale_deformable_attention", mutates_args=())
def _deformable_sampling_op(value: torch.Tensor, spatial_shapes: torch.Tensor, sampling_locations: torch.Tensor,
                            attention_weights: torch.Tensor) -> torch.Tensor:
    """The fast path's sum as an operator torch.compile does not look into (inference: no autograd formula)."""
    return _sample(value, spatial_shapes, sampling_locations, attention_weights)


@_deformable_sampling_op.register_fake
def _(value: torch.Tensor, spatial_shapes: torch.Tensor, sampling_locations: torch.Tensor,
      attention_weights: torch.Tensor) -> torch.Tensor:
    batch, _, heads, head_dim = value.shape
    return value.new_empty(batch, sampling_locations.shape[1], heads * head_dim)

class MSDeformAttn(nn.Module):
    """Multi-scale deformable attention with its projections: queries predict where (offsets) and how much
    (weights) to look on each level around their reference points.

    dim: model width; n_levels: feature maps; n_heads: heads (dim divisible by it); n_points: samples per head
    and level. Parameter names are the official code's (sampling_offsets, attention_weights, value_proj,
    output_proj), which are also transformers'.
    """

    def __init__(self, dim: int = 256, n_levels: int = 4, n_heads: int = 8, n_points: int = 4) -> None:
        super().__init__()
        if dim % n_heads:
            raise ValueError(f"dim ({dim}) must be divisible by n_heads ({n_heads})")
        self.dim, self.n_levels, self.n_heads, self.n_points = dim, n_levels, n_heads, n_points
        self.sampling_offsets = nn.Linear(dim, n_heads * n_levels * n_points * 2)
        self.attention_weights = nn.Linear(dim, n_heads * n_levels * n_points)
        self.value_proj = nn.Linear(dim, dim)
        self.output_proj = nn.Linear(dim, dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The paper's start: head m's points lie along direction 2πm/heads, point p at p+1 pixels of its level
        (a ring of directions, each a line of points), with uniform attention over them."""
        nn.init.zeros_(self.sampling_offsets.weight)
        angles = torch.arange(self.n_heads, dtype=torch.float32) * (2 * math.pi / self.n_heads)
        directions = torch.stack([angles.cos(), angles.sin()], -1)
        directions = directions / directions.abs().max(-1, keepdim=True).values  # onto the unit square's edge
        steps = torch.arange(1, self.n_points + 1, dtype=torch.float32)
        grid = directions[:, None, None, :] * steps[None, None, :, None]  # (heads, 1, P, 2)
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(grid.expand(-1, self.n_levels, -1, -1).reshape(-1))
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)
        for projection in (self.value_proj, self.output_proj):
            nn.init.xavier_uniform_(projection.weight)
            nn.init.zeros_(projection.bias)

    def forward(self, query: torch.Tensor, reference_points: torch.Tensor, value: torch.Tensor,
                spatial_shapes: LevelShapes, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """query (B, Q, dim) with its position already added; reference_points (B, Q, L, 2) as (x, y) or
        (B, Q, L, 4) as boxes (cx, cy, w, h), in [0, 1] of each level's valid area; value (B, S, dim) the
        flattened maps; spatial_shapes (L, 2), or the maps' [(H_l, W_l)] (an exported graph then samples each
        level with one GridSample); padding_mask (B, S) True at padding -> (B, Q, dim)."""
        batch, queries, _ = query.shape
        heads, levels, points = self.n_heads, self.n_levels, self.n_points
        value = self.value_proj(value)
        if padding_mask is not None:
            value = value.masked_fill(padding_mask[..., None], 0.0)
        value = value.view(batch, value.shape[1], heads, self.dim // heads)
        offsets = self.sampling_offsets(query).view(batch, queries, heads, levels, points, 2)
        weights = self.attention_weights(query).view(batch, queries, heads, levels * points).softmax(-1)
        weights = weights.view(batch, queries, heads, levels, points)
        if reference_points.shape[-1] == 2:  # offsets in pixels of each level
            shapes = spatial_shapes if isinstance(spatial_shapes, torch.Tensor) else shapes_tensor(
                list(spatial_shapes), offsets.device)
            width_height = shapes.flip(-1).to(offsets.dtype)
            locations = reference_points[:, :, None, :, None, :] + offsets / width_height[None, None, None, :, None]
        elif reference_points.shape[-1] == 4:  # offsets in fractions of the box's half-size, P points spread out
            centre, size = reference_points[:, :, None, :, None, :2], reference_points[:, :, None, :, None, 2:]
            locations = centre + offsets / points * size * 0.5
        else:
            raise ValueError(f"reference_points must end in 2 (points) or 4 (boxes), got "
                             f"{tuple(reference_points.shape)}")
        return self.output_proj(multi_scale_deformable_attention(value, spatial_shapes, locations, weights))


class DeformableEncoderBlock(nn.Module):
    """Deformable DETR's encoder layer, post-norm: each pixel of every level attends to sampled points of all the
    levels around itself, then an FFN.

    x = LN(x + MSDeformAttn(x + pos, ref, x)); x = LN(x + FFN(x)). x, pos (B, S, D); ref (B, S, L, 2).
    """

    def __init__(self, dim: int = 256, ffn_dim: int = 1024, dropout: float = 0.1, n_levels: int = 4,
                 n_heads: int = 8, n_points: int = 4) -> None:
        super().__init__()
        self.self_attn = MSDeformAttn(dim, n_levels, n_heads, n_points)
        self.drop1 = nn.Dropout(dropout)
        self.norm1 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, ffn_dim, act_layer=nn.ReLU, drop=dropout)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, pos: torch.Tensor, reference_points: torch.Tensor,
                spatial_shapes: LevelShapes, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norm1(x + self.drop1(self.self_attn(x + pos, reference_points, x, spatial_shapes, padding_mask)))
        return self.norm2(x + self.mlp(x))


class DeformableDecoderBlock(nn.Module):
    """Deformable DETR's decoder layer, post-norm: the object queries attend to each other as in DETR, then to
    sampled points of the encoder's maps around their reference points, then an FFN.

    x = LN(x + SelfAttn(x + q_pos, x + q_pos, x)); x = LN(x + MSDeformAttn(x + q_pos, ref, memory));
    x = LN(x + FFN(x)). x, q_pos (B, N, D); ref (B, N, L, 2 or 4); memory (B, S, D).
    """

    def __init__(self, dim: int = 256, ffn_dim: int = 1024, dropout: float = 0.1, n_levels: int = 4,
                 n_heads: int = 8, n_points: int = 4) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(dim, n_heads, qkv_bias=True, attn_drop=dropout, proj_drop=0.0)
        self.drop1 = nn.Dropout(dropout)
        self.norm1 = nn.LayerNorm(dim)
        self.cross_attn = MSDeformAttn(dim, n_levels, n_heads, n_points)
        self.drop2 = nn.Dropout(dropout)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, ffn_dim, act_layer=nn.ReLU, drop=dropout)
        self.norm3 = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, query_pos: torch.Tensor, reference_points: torch.Tensor,
                memory: torch.Tensor, spatial_shapes: LevelShapes,
                memory_padding_mask: torch.Tensor | None = None, self_mask: torch.Tensor | None = None
                ) -> torch.Tensor:
        """self_mask: which queries each query may attend to, broadcastable to (B, heads, N, N), True = may (or
        None: all)."""
        qk = x + query_pos
        x = self.norm1(x + self.drop1(self.self_attn(qk, qk, x, attn_mask=self_mask)))
        x = self.norm2(x + self.drop2(self.cross_attn(x + query_pos, reference_points, memory, spatial_shapes,
                                                      memory_padding_mask)))
        return self.norm3(x + self.mlp(x))
