"""Multi-scale deformable attention against a loop-by-loop bilinear reference, its own grid_sample formulation
(multi_scale_deformable_attention_reference) and transformers', autograd's numerical gradients, and onnxruntime."""

import math

import pytest
import torch

from vitlab.layers.deform_attn import (
    MSDeformAttn,
    level_start_index,
    multi_scale_deformable_attention,
    multi_scale_deformable_attention_reference,
)

SHAPES = torch.tensor([[6, 5], [3, 3], [2, 1]])  # (H, W) of three levels, not square, one a single column


def brute_force(value, spatial_shapes, locations, weights):
    """The definition, one sample at a time: bilinear interpolation between the four pixel centres around
    (x·W − ½, y·H − ½), pixels outside the map read as zero."""
    B, S, M, D = value.shape
    _, Q, _, L, P, _ = locations.shape
    starts = level_start_index(spatial_shapes).tolist()
    out = torch.zeros(B, Q, M, D, dtype=value.dtype)
    for b in range(B):
        for q in range(Q):
            for m in range(M):
                for level, (H, W) in enumerate(spatial_shapes.tolist()):
                    grid = value[b, starts[level]:starts[level] + H * W, m].reshape(H, W, D)
                    for p in range(P):
                        x = locations[b, q, m, level, p, 0].item() * W - 0.5
                        y = locations[b, q, m, level, p, 1].item() * H - 0.5
                        x0, y0 = math.floor(x), math.floor(y)
                        sample = torch.zeros(D, dtype=value.dtype)
                        for xi, yi in ((x0, y0), (x0 + 1, y0), (x0, y0 + 1), (x0 + 1, y0 + 1)):
                            if 0 <= xi < W and 0 <= yi < H:
                                sample += (1 - abs(x - xi)) * (1 - abs(y - yi)) * grid[yi, xi]
                        out[b, q, m] += weights[b, q, m, level, p] * sample
    return out.reshape(B, Q, M * D)


def random_inputs(B=2, Q=5, M=2, D=3, P=3, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    S = int(SHAPES.prod(-1).sum())
    value = torch.randn(B, S, M, D, generator=generator, dtype=dtype)
    # beyond [0, 1] too, so that the zero padding at every edge is exercised
    locations = torch.rand(B, Q, M, len(SHAPES), P, 2, generator=generator, dtype=dtype) * 1.4 - 0.2
    weights = torch.rand(B, Q, M, len(SHAPES), P, generator=generator, dtype=dtype)
    return value, SHAPES, locations, weights


def test_equals_the_bilinear_definition():
    inputs = random_inputs()
    torch.testing.assert_close(multi_scale_deformable_attention(*inputs), brute_force(*inputs), atol=1e-5, rtol=1e-5)


def test_the_grid_sample_reference_is_the_bilinear_definition():
    inputs = random_inputs()
    torch.testing.assert_close(multi_scale_deformable_attention_reference(*inputs), brute_force(*inputs), atol=1e-5,
                               rtol=1e-5)


def test_the_fast_path_equals_the_grid_sample_reference_forward_and_backward():
    """The fast path (padded levels, embedding_bag, the backward written out) against the package's own per-level
    grid_sample path with autograd through it, in float64, with points inside, across and outside every edge."""
    value, shapes, locations, weights = random_inputs(B=2, Q=9, M=4, D=8, P=4, dtype=torch.float64, seed=5)
    fast = [t.clone().requires_grad_() for t in (value, locations, weights)]
    reference = [t.clone().requires_grad_() for t in (value, locations, weights)]
    out = multi_scale_deformable_attention(fast[0], shapes, fast[1], fast[2])
    expected = multi_scale_deformable_attention_reference(reference[0], shapes, reference[1], reference[2])
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)
    upstream = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    (out * upstream).sum().backward()
    (expected * upstream).sum().backward()
    for name, mine, theirs in zip(("value", "locations", "weights"), fast, reference):
        torch.testing.assert_close(mine.grad, theirs.grad, atol=1e-10, rtol=1e-10, msg=name)
    # and in float32, the dtype models run in
    value, shapes, locations, weights = random_inputs(B=2, Q=7, M=4, D=8, P=4, seed=7)
    torch.testing.assert_close(multi_scale_deformable_attention(value, shapes, locations, weights),
                               multi_scale_deformable_attention_reference(value, shapes, locations, weights),
                               atol=1e-5, rtol=1e-5)


def test_equals_transformers_grid_sample_path():
    from transformers.models.deformable_detr.modeling_deformable_detr import MultiScaleDeformableAttention

    value, shapes, locations, weights = random_inputs(B=3, Q=7, M=4, D=8, P=4, seed=1)
    theirs = MultiScaleDeformableAttention()(value, shapes, [tuple(s) for s in shapes.tolist()],
                                             level_start_index(shapes), locations, weights, 64)
    torch.testing.assert_close(multi_scale_deformable_attention(value, shapes, locations, weights), theirs,
                               atol=1e-5, rtol=1e-5)


def test_gradients_match_finite_differences():
    value, shapes, locations, weights = random_inputs(B=1, Q=2, M=2, D=2, P=2, dtype=torch.float64, seed=2)
    inputs = tuple(t.requires_grad_() for t in (value, locations, weights))
    assert torch.autograd.gradcheck(lambda v, loc, w: multi_scale_deformable_attention(v, shapes, loc, w), inputs)


def test_gradients_equal_transformers_autograd_through_grid_sample():
    """The written-out backward against autograd through transformers' per-level grid_sample, at a size where the
    points fall inside, across and outside every map's edge."""
    from transformers.models.deformable_detr.modeling_deformable_detr import MultiScaleDeformableAttention

    value, shapes, locations, weights = random_inputs(B=2, Q=9, M=4, D=8, P=4, dtype=torch.float64, seed=3)
    ours = [t.clone().requires_grad_() for t in (value, locations, weights)]
    theirs = [t.clone().requires_grad_() for t in (value, locations, weights)]
    upstream = torch.randn(2, 9, 32, dtype=torch.float64)
    (multi_scale_deformable_attention(ours[0], shapes, ours[1], ours[2]) * upstream).sum().backward()
    out = MultiScaleDeformableAttention()(theirs[0], shapes, [tuple(s) for s in shapes.tolist()],
                                          level_start_index(shapes), theirs[1], theirs[2], 64)
    (out * upstream).sum().backward()
    for name, mine, reference in zip(("value", "locations", "weights"), ours, theirs):
        torch.testing.assert_close(mine.grad, reference.grad, atol=1e-10, rtol=1e-10, msg=name)


def test_gradient_for_the_inputs_that_ask_and_half_precision():
    value, shapes, locations, weights = random_inputs(B=1, Q=4, M=2, D=4, P=2, seed=4)
    locations.requires_grad_()  # frozen values and weights: only the locations get a gradient
    multi_scale_deformable_attention(value, shapes, locations, weights).sum().backward()
    assert value.grad is None and weights.grad is None and locations.grad.abs().sum() > 0

    full = [t.clone().requires_grad_() for t in (value, locations.detach(), weights)]
    half = [t.clone().bfloat16().requires_grad_() for t in (value, locations.detach(), weights)]
    multi_scale_deformable_attention(full[0], shapes, full[1], full[2]).sum().backward()
    out = multi_scale_deformable_attention(half[0], shapes, half[1], half[2])
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    for a, b in zip(full, half):
        assert b.grad.dtype == torch.bfloat16
        torch.testing.assert_close(b.grad.float(), a.grad, atol=0.1, rtol=0.05)


def test_module_starts_as_the_paper_and_samples_where_it_says():
    attn = MSDeformAttn(dim=16, n_levels=3, n_heads=4, n_points=2)
    bias = attn.sampling_offsets.bias.view(4, 3, 2, 2)
    # head 0 looks right, head 1 down (angle π/2), head 2 left; point p at p + 1 pixels; the same on every level
    torch.testing.assert_close(bias[0, :, 1], torch.tensor([[2.0, 0.0]] * 3))
    torch.testing.assert_close(bias[1, 0, 0], torch.tensor([0.0, 1.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(bias[2, 2, 0], torch.tensor([-1.0, 0.0]), atol=1e-6, rtol=0)
    assert not attn.attention_weights.weight.any() and not attn.attention_weights.bias.any()

    # the module's output equals the core given the offsets and weights computed by hand from the formulas
    torch.manual_seed(0)
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.3)
    S = int(SHAPES.prod(-1).sum())
    query, value = torch.randn(2, 4, 16), torch.randn(2, S, 16)
    mask = torch.zeros(2, S, dtype=torch.bool)
    mask[1, -3:] = True
    for ref in (torch.rand(2, 4, 3, 2), torch.rand(2, 4, 3, 4) * 0.5 + 0.25):
        out = attn(query, ref, value, SHAPES, mask)
        v = attn.value_proj(value).masked_fill(mask[..., None], 0).view(2, S, 4, 4)
        offsets = attn.sampling_offsets(query).view(2, 4, 4, 3, 2, 2)
        w = attn.attention_weights(query).view(2, 4, 4, 6).softmax(-1).view(2, 4, 4, 3, 2)
        if ref.shape[-1] == 2:
            loc = ref[:, :, None, :, None] + offsets / SHAPES.flip(-1)[None, None, None, :, None]
        else:
            loc = ref[:, :, None, :, None, :2] + offsets / 2 * ref[:, :, None, :, None, 2:] / 2
        torch.testing.assert_close(out, attn.output_proj(brute_force(v, SHAPES, loc, w)), atol=1e-5, rtol=1e-5)


def test_bad_shapes_are_explained():
    value, shapes, locations, weights = random_inputs()
    with pytest.raises(ValueError, match="hold 41 pixels, but value has S=40"):
        multi_scale_deformable_attention(value[:, :-1], shapes, locations, weights)
    with pytest.raises(ValueError, match="one per sampling point"):
        multi_scale_deformable_attention(value, shapes, locations, weights[..., :-1])
    with pytest.raises(ValueError, match=r"end in 2 .* or 4"):
        MSDeformAttn(8, 3, 2, 3)(torch.zeros(1, 2, 8), torch.zeros(1, 2, 3, 3), torch.zeros(1, 41, 8), shapes)


def test_onnx_export_runs_in_onnxruntime_with_equal_outputs(tmp_path):
    import onnxruntime

    torch.manual_seed(0)
    attn = MSDeformAttn(dim=16, n_levels=3, n_heads=4, n_points=2).eval()
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.3)
    S = int(SHAPES.prod(-1).sum())
    inputs = (torch.randn(2, 4, 16), torch.rand(2, 4, 3, 2), torch.randn(2, S, 16), SHAPES)
    path = tmp_path / "msda.onnx"
    torch.onnx.export(attn, inputs, str(path), input_names=["query", "reference_points", "value", "shapes"],
                      dynamo=True, verbose=False)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}
    (out,) = session.run(None, feeds)
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(out), attn(*inputs), atol=1e-5, rtol=1e-5)
