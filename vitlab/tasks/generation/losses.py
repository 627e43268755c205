"""VQGAN's stage-1 losses (Esser et al. 2021, §3.1, eq. 5–7):

    L = L_rec + λ · L_GAN + L_VQ
    L_rec = ‖x − x̂‖₁ (+ w_p · LPIPS(x, x̂) when a perceptual loss is plugged in)
    L_GAN, the generator's: −mean D(x̂);   the discriminator's hinge loss: ½ (mean relu(1 − D(x)) + mean relu(1 + D(x̂)))
    λ = ‖∇_{G_L} L_rec‖ / (‖∇_{G_L} L_GAN‖ + δ),  δ = 1e-4, clamped to [0, 10⁴], times disc_weight

G_L is the decoder's last layer. λ balances the two gradients where they meet, so that neither term drowns the
other whatever their scales; it is a constant for the backward pass (detached). The GAN terms start only after
`disc_start` steps: a discriminator set loose on blurry early reconstructions wins at once and its gradient pushes
the decoder away from the data (taming #44, #93).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def hinge_d_loss(logits_real: torch.Tensor, logits_fake: torch.Tensor) -> torch.Tensor:
    """½ (mean relu(1 − D(x)) + mean relu(1 + D(x̂))): real patches pushed above +1, fakes below −1."""
    return 0.5 * (F.relu(1.0 - logits_real).mean() + F.relu(1.0 + logits_fake).mean())


def generator_loss(logits_fake: torch.Tensor) -> torch.Tensor:
    """−mean D(x̂): the decoder is rewarded where the discriminator takes its output for real."""
    return -logits_fake.mean()


def adaptive_weight(rec_loss: torch.Tensor, g_loss: torch.Tensor, last_layer: torch.Tensor,
                    delta: float = 1e-4, max_weight: float = 1e4) -> torch.Tensor:
    """λ = ‖∇ rec_loss‖ / (‖∇ g_loss‖ + δ) at `last_layer`, clamped to [0, max_weight] and detached.

    The two gradients are taken with `retain_graph=True`: the total loss is backpropagated afterwards."""
    rec_grad = torch.autograd.grad(rec_loss, last_layer, retain_graph=True)[0]
    g_grad = torch.autograd.grad(g_loss, last_layer, retain_graph=True)[0]
    weight = rec_grad.norm() / (g_grad.norm() + delta)
    return weight.clamp(0.0, max_weight).detach()
