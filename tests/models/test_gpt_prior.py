"""The GPT prior: causal (a code's logits depend only on the codes before it), conditioned by its start token,
cached sampling equal to recomputed sampling, and top-k / top-p filtering against their definitions."""

import pytest
import torch

from vitlab.models import create_model
from vitlab.models.gpt_prior import GPTPriorConfig, filter_logits


def tiny(**kwargs):
    torch.manual_seed(0)
    config = GPTPriorConfig(num_codes=16, grid=(3, 4), num_classes=3, dim=32, depth=2, num_heads=4, **kwargs)
    return config.build().eval()


def test_logits_depend_only_on_earlier_codes():
    model = tiny()
    codes = torch.randint(16, (2, 12))
    labels = torch.tensor([0, 2])
    logits = model(codes, labels)
    assert logits.shape == (2, 12, 16)
    changed = codes.clone()
    changed[:, 7] = (changed[:, 7] + 1) % 16
    other = model(changed, labels)
    # position i predicts code i from codes < i: changing code 7 changes the predictions of codes 8 … 11 only
    assert torch.allclose(logits[:, :8], other[:, :8], atol=1e-6)
    assert not torch.allclose(logits[:, 8:], other[:, 8:], atol=1e-4)
    # and the class, through the start token, changes every prediction
    assert not torch.allclose(model(codes, torch.tensor([1, 1]))[:, 0], logits[:, 0], atol=1e-4)


def test_the_training_logits_are_the_step_by_step_ones():
    model = tiny()
    codes = torch.randint(16, (2, 12))
    labels = torch.tensor([1, 0])
    logits = model(codes, labels)
    caches = model.new_caches()
    for t in range(12):
        token = model.start_embed(labels)[:, None] if t == 0 else model.tok_embed(codes[:, t - 1:t])
        step = model.transform(token, start=t, caches=caches)[:, -1]
        assert torch.allclose(step, logits[:, t], atol=1e-5)


@pytest.mark.parametrize("options", [dict(), dict(temperature=0.7, top_k=5), dict(top_p=0.8), dict(temperature=0)])
def test_cached_sampling_gives_the_recomputed_codes(options):
    model = tiny()
    labels = torch.tensor([0, 1, 2, 2])
    cached = model.generate(labels, use_cache=True, generator=torch.Generator().manual_seed(5), **options)
    recomputed = model.generate(labels, use_cache=False, generator=torch.Generator().manual_seed(5), **options)
    assert cached.shape == (4, 3, 4)
    assert torch.equal(cached, recomputed)


def test_a_temperature_is_zero_or_a_finite_positive_number_the_logits_survive():
    """A tiny temperature is near-greedy; one so small that the scaled logits overflow, NaN or infinity, is refused
    with the reason rather than failing in the draw."""
    model, labels = tiny(), torch.tensor([0, 1])
    near_greedy = model.generate(labels, temperature=1e-7, generator=torch.Generator().manual_seed(0))
    assert torch.equal(near_greedy, model.generate(labels, temperature=0))
    with pytest.raises(ValueError, match="too small for these logits"):
        model.generate(labels, temperature=1e-45)
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match=r"0 \(greedy\) or a finite positive number"):
            model.generate(labels, temperature=bad)


def test_top_k_and_top_p_by_definition():
    logits = torch.log(torch.tensor([[0.05, 0.4, 0.1, 0.3, 0.15]]))
    kept = filter_logits(logits, top_k=2).isfinite()
    assert kept.tolist() == [[False, True, False, True, False]]
    # sorted: 0.4, 0.3, 0.15, 0.1, 0.05; 0.4 + 0.3 = 0.7 < 0.75, so 0.15 is needed too
    kept = filter_logits(logits, top_p=0.75).isfinite()
    assert kept.tolist() == [[False, True, False, True, True]]
    assert filter_logits(logits, top_p=0.3).isfinite().tolist() == [[False, True, False, False, False]]
    assert filter_logits(logits, top_k=5, top_p=1.0).isfinite().all()


def test_samples_follow_a_learnt_class_pattern():
    """Trained for a few hundred steps on two deterministic sequences, one per class, greedy sampling writes them."""
    torch.manual_seed(0)
    model = tiny().train()
    patterns = torch.stack([torch.arange(12) % 16, (torch.arange(12) * 3 + 1) % 16])
    labels = torch.tensor([0, 1])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        loss = torch.nn.functional.cross_entropy(model(patterns, labels).flatten(0, 1), patterns.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    assert torch.equal(model.generate(labels, temperature=0).flatten(1), patterns)


def test_bad_lengths_and_labels_say_what_was_expected():
    model = tiny()
    with pytest.raises(ValueError, match="12 codes per image"):
        model(torch.zeros(1, 11, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        model.generate(torch.tensor([3]))


def test_registered_preset():
    model = create_model("gpt_prior_small")
    assert model.seq_len == 64 and model.config.num_classes == 10 and model.config.num_codes == 256
