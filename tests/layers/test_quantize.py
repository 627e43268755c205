"""The vector quantiser against brute force, its loss and gradients against the formulas written out by hand (both
placements of β), against taming-transformers' VectorQuantizer2, and its remedies against codebook collapse."""

import math

import pytest
import torch

from vitlab.layers.quantize import VectorQuantizer, code_statistics, kmeans


def quantizer(num_codes=8, dim=4, **kwargs):
    torch.manual_seed(0)
    vq = VectorQuantizer(num_codes, dim, **kwargs)
    with torch.no_grad():
        vq.embedding.weight.normal_()  # spread the codes so that every test input has a clear nearest one
    return vq


def test_nearest_code_by_brute_force_and_straight_through():
    vq = quantizer().eval()
    z = torch.randn(2, 4, 3, 5, requires_grad=True)
    out = vq(z)
    vectors = z.detach().permute(0, 2, 3, 1).reshape(-1, 4)
    expected = torch.cdist(vectors, vq.embedding.weight.detach()).argmin(dim=1).view(2, 3, 5)
    assert out.indices.shape == (2, 3, 5) and out.indices.dtype == torch.long
    assert torch.equal(out.indices, expected)
    codes = vq.embedding.weight.detach()[expected].permute(0, 3, 1, 2)
    assert torch.allclose(out.z_q.detach(), codes, atol=1e-6)  # z + (e − z): e up to rounding
    assert torch.equal(vq.lookup(out.indices), codes)
    # straight through: the decoder's gradient reaches z unchanged
    g = torch.randn_like(z)
    (out.z_q * g).sum().backward()
    assert torch.equal(z.grad, g)


@pytest.mark.parametrize("legacy", [False, True])
def test_loss_gradients_follow_the_placement_of_beta(legacy):
    beta = 0.25
    vq = quantizer(beta=beta, legacy=legacy).eval()
    z = torch.randn(2, 4, 3, 3, requires_grad=True)
    out = vq(z)
    e = vq.embedding.weight.detach()[out.indices].permute(0, 3, 1, 2)  # (B, D, H, W)
    n = z.numel()
    # the value is the same for both placements: (1 + β) · mean((z − e)²)
    assert math.isclose(out.loss.item(), (1 + beta) * torch.mean((z.detach() - e) ** 2).item(), rel_tol=1e-6)
    out.loss.backward()
    encoder_weight, codebook_weight = (1.0, beta) if legacy else (beta, 1.0)
    # d/dz of w · mean((z − sg[e])²) = w · 2 (z − e) / n
    assert torch.allclose(z.grad, encoder_weight * 2 * (z.detach() - e) / n, atol=1e-7)
    # d/de_j of w · mean((e − sg[z])²) = w · 2 Σ_{positions picking j} (e_j − z) / n
    expected = torch.zeros_like(vq.embedding.weight)
    diff = (e - z.detach()).permute(0, 2, 3, 1).reshape(-1, 4)
    expected.index_add_(0, out.indices.reshape(-1), codebook_weight * 2 * diff / n)
    assert torch.allclose(vq.embedding.weight.grad, expected, atol=1e-7)


@pytest.mark.parametrize("legacy", [False, True])
def test_equals_taming_vector_quantizer2(legacy):
    taming_quantize = pytest.importorskip("taming.modules.vqvae.quantize")
    vq = quantizer(num_codes=16, dim=6, beta=0.25, legacy=legacy).eval()
    theirs = taming_quantize.VectorQuantizer2(16, 6, beta=0.25, legacy=legacy, sane_index_shape=True)
    theirs.load_state_dict({"embedding.weight": vq.embedding.weight.detach().clone()})
    z = torch.randn(3, 6, 4, 4)
    z_mine, z_theirs = z.clone().requires_grad_(), z.clone().requires_grad_()
    mine = vq(z_mine)
    z_q, loss, (_, _, indices) = theirs(z_theirs)
    assert torch.equal(mine.indices, indices)
    assert torch.allclose(mine.z_q, z_q, atol=1e-6)
    assert torch.allclose(mine.loss, loss, atol=1e-7)
    g = torch.randn_like(z)
    ((mine.z_q * g).sum() + mine.loss).backward()
    ((z_q * g).sum() + loss).backward()
    assert torch.allclose(z_mine.grad, z_theirs.grad, atol=1e-7)
    assert torch.allclose(vq.embedding.weight.grad, theirs.embedding.weight.grad, atol=1e-7)


def test_perplexity_and_usage_by_hand():
    counts, perplexity, usage = code_statistics(torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]), 8)
    assert counts.tolist() == [2, 2, 2, 2, 0, 0, 0, 0]
    assert math.isclose(perplexity.item(), 4.0, rel_tol=1e-6)  # four codes used equally often
    assert usage.item() == 0.5
    _, perplexity, usage = code_statistics(torch.zeros(10, dtype=torch.long), 8)
    assert math.isclose(perplexity.item(), 1.0, rel_tol=1e-6) and usage.item() == 1 / 8


def test_a_dead_code_is_moved_onto_the_data():
    vq = quantizer(num_codes=4, dim=2, restart_every=2).train()
    with torch.no_grad():
        vq.embedding.weight.copy_(torch.tensor([[0.0, 0.0], [1.0, 1.0], [-1.0, 1.0], [1000.0, 1000.0]]))
    # latents near the first three codes (each picked): code 3 is never picked
    near = vq.embedding.weight.detach()[torch.arange(64) % 3] + 0.05 * torch.randn(64, 2)
    z = near.view(4, 4, 4, 2).permute(0, 3, 1, 2)
    live = vq.embedding.weight[:3].detach().clone()
    for _ in range(2):
        assert 3 not in vq(z).indices
    assert vq.code_counts[3] == 0 and vq.window_steps == 2
    vq(z)  # the window is full: code 3 restarts on a latent of this batch
    moved = vq.embedding.weight[3].detach()
    latents = z.permute(0, 2, 3, 1).reshape(-1, 2)
    assert torch.isclose(latents, moved).all(dim=1).any(), "the restarted code sits on one of the batch's latents"
    assert torch.equal(vq.embedding.weight[:3].detach(), live), "codes in use stay where they are"
    assert vq.window_steps == 1  # the new window counts the step that did the restart
    assert 3 in vq.eval()(z).indices  # and the moved code is picked again


def test_no_restart_in_evaluation_or_when_off():
    vq = quantizer(num_codes=4, dim=2, restart_every=1)
    with torch.no_grad():
        vq.embedding.weight[3] = 1000.0
    before = vq.embedding.weight.detach().clone()
    vq.eval()
    for _ in range(3):
        vq(torch.randn(2, 2, 3, 3))
    assert torch.equal(vq.embedding.weight.detach(), before)
    off = quantizer(num_codes=4, dim=2).train()
    with torch.no_grad():
        off.embedding.weight[3] = 1000.0
    before = off.embedding.weight.detach().clone()
    for _ in range(3):
        off(torch.randn(2, 2, 3, 3))
    assert torch.equal(off.embedding.weight.detach(), before)


def test_kmeans_start_puts_every_code_on_the_data():
    torch.manual_seed(0)
    centres = torch.tensor([[5.0, 5.0], [-5.0, 5.0], [5.0, -5.0], [-5.0, -5.0]])
    points = centres.repeat_interleave(50, 0) + 0.1 * torch.randn(200, 2)
    found = kmeans(points, 4, iterations=10)
    # each true centre has a centroid close to it (k-means started from 4 random points may still split a
    # cluster in rare draws; this seed does not)
    assert torch.cdist(centres, found).min(dim=1).values.max() < 0.2
    vq = VectorQuantizer(4, 2, kmeans_init=True).train()
    assert not vq.initialized
    z = points.view(8, 25, 2).permute(0, 2, 1).reshape(8, 2, 5, 5)
    out = vq(z)
    assert vq.initialized and out.usage.item() == 1.0
    assert torch.cdist(centres, vq.embedding.weight.detach()).min(dim=1).values.max() < 0.2
    before = vq.embedding.weight.detach().clone()
    vq(z)  # only the first training batch starts the codebook
    assert torch.equal(before, vq.embedding.weight.detach())


def test_wrong_width_and_out_of_range_indices_say_what_was_expected():
    vq = quantizer(num_codes=8, dim=4)
    with pytest.raises(ValueError, match="4 channels"):
        vq(torch.randn(1, 3, 2, 2))
    with pytest.raises(ValueError, match=r"\[0, 8\)"):
        vq.lookup(torch.full((1, 2, 2), 8))
