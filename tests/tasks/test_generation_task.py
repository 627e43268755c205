"""VQGAN's stage-1 losses against their formulas (the adaptive weight by autograd), the two-optimizer training step
against the same objective computed here by hand, and the GAN term's start."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from vitlab.models import create_model
from vitlab.tasks.generation import VQGANTask, VQGANTaskConfig
from vitlab.tasks.generation.losses import adaptive_weight, generator_loss, hinge_d_loss


def test_hinge_loss_by_hand():
    real = torch.tensor([2.0, 0.5, -1.0])  # relu(1 − x): 0, 0.5, 2
    fake = torch.tensor([-2.0, 0.0])  # relu(1 + x): 0, 1
    assert math.isclose(hinge_d_loss(real, fake).item(), 0.5 * (2.5 / 3 + 1.0 / 2), rel_tol=1e-6)
    assert generator_loss(fake).item() == 1.0


def test_adaptive_weight_is_the_ratio_of_gradient_norms_at_the_last_layer():
    torch.manual_seed(0)
    last = nn.Parameter(torch.randn(4, 3))
    x = torch.randn(5, 3)
    out = x @ last.t()
    rec = out.abs().mean()
    g = -(out ** 3).mean()
    # each gradient on its own, by autograd
    (rec_grad,) = torch.autograd.grad(rec, last, retain_graph=True)
    (g_grad,) = torch.autograd.grad(g, last, retain_graph=True)
    expected = rec_grad.norm() / (g_grad.norm() + 1e-4)
    weight = adaptive_weight(rec, g, last)
    assert torch.allclose(weight, expected, rtol=1e-6)
    assert not weight.requires_grad
    # a GAN term that does not move the last layer: λ = ‖∇L_rec‖ / δ, clamped to 10⁴
    flat = (last * 0).sum()
    assert torch.allclose(adaptive_weight(rec, flat, last), rec_grad.norm() / 1e-4, rtol=1e-6)
    assert adaptive_weight(100 * rec, flat, last).item() == 1e4


class RecordingStepper:
    """The loop's Stepper contract (backward, step, skip, steps_taken), recording each optimizer's gradients."""

    def __init__(self, modules, steps_taken=0):
        self.modules, self.taken, self.grads, self.skipped = modules, steps_taken, {}, []

    def backward(self, loss):
        loss.backward()

    def step(self, name):
        self.grads[name] = {n: (p.grad.clone() if p.grad is not None else None)
                            for n, p in self.modules[name].named_parameters()}
        for p in self.modules[name].parameters():
            p.grad = None

    def skip(self, name):
        self.skipped.append(name)

    def steps_taken(self, name="model"):
        return self.taken


def small_vqgan():
    torch.manual_seed(0)
    return create_model("vqgan_small", kmeans_init=False, restart_every=0).train()


@pytest.mark.parametrize("gan_on", [False, True])
def test_train_step_against_the_objective_by_hand(gan_on):
    task = VQGANTask(VQGANTaskConfig(disc_start=10, disc_weight=0.8, codebook_weight=1.0))
    model = small_vqgan()
    reference = small_vqgan()
    reference.load_state_dict(model.state_dict())
    x = torch.rand(4, 1, 32, 32) * 2 - 1
    stepper = RecordingStepper(task.optimized_modules(model), steps_taken=10 if gan_on else 9)
    losses = task.train_step(model, (x, torch.zeros(4, dtype=torch.long)), stepper)
    assert set(losses) == {"loss", "loss_rec", "loss_vq", "loss_g", "loss_d", "gan_weight", "perplexity", "usage"}

    # the same objective, written out here on a copy of the model
    out = reference(x)
    rec = (x - out.reconstruction).abs().mean()
    total = rec + out.quantizer_loss
    if gan_on:
        g = -reference.discriminator(out.reconstruction).mean()
        rec_grad = torch.autograd.grad(rec, reference.last_layer, retain_graph=True)[0]
        g_grad = torch.autograd.grad(g, reference.last_layer, retain_graph=True)[0]
        weight = 0.8 * rec_grad.norm() / (g_grad.norm() + 1e-4)
        total = total + weight.detach() * g
        assert torch.allclose(losses["gan_weight"], weight, rtol=1e-5)
    reference.zero_grad()
    total.backward()
    assert torch.allclose(losses["loss"], total.detach(), rtol=1e-6)
    for name, p in reference.named_parameters():
        if name.startswith("discriminator."):
            continue
        assert torch.allclose(stepper.grads["autoencoder"][name], p.grad, atol=1e-6), name

    if not gan_on:
        assert stepper.skipped == ["discriminator"] and "discriminator" not in stepper.grads
        assert losses["loss_g"] == 0 and losses["loss_d"] == 0
        return
    # the discriminator's step sees only its hinge loss: none of the generator pass's gradient
    reference.zero_grad()
    d_loss = hinge_d_loss(reference.discriminator(x), reference.discriminator(out.reconstruction.detach()))
    d_loss.backward()
    assert torch.allclose(losses["loss_d"], d_loss.detach(), rtol=1e-6)
    for name, p in reference.discriminator.named_parameters():
        assert torch.allclose(stepper.grads["discriminator"][name], p.grad, atol=1e-6), name


def test_options_are_checked():
    with pytest.raises(ValueError, match="disc_start"):
        VQGANTaskConfig(disc_start=-1)
    with pytest.raises(ValueError, match="model must be a VQGAN"):
        VQGANTask(VQGANTaskConfig(model="gpt_prior_small")).build_model()
