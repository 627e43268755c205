"""Vector quantisation: the bottleneck of VQ-VAE (van den Oord et al. 2017) and VQGAN (Esser et al. 2021).

Each latent vector z (one per position of a (B, D, H, W) map) is replaced by its nearest code in a learned
codebook e_1 … e_K, by squared L2 distance:

    k = argmin_j ‖z − e_j‖²,        z_q = e_k

argmin has no gradient, so the decoder's gradient is copied from z_q to z unchanged, the straight-through
estimator: z_q = z + sg[e_k − z] is e_k in the forward pass and z's identity in the backward pass. The codebook
and the encoder are pulled together by the quantiser's loss (VQ-VAE eq. 3, VQGAN eq. 4), mean-reduced:

    L_VQ = ‖sg[z] − e‖²  +  β ‖z − sg[e]‖²
           codebook term      commitment term: the encoder commits to its code

taming-transformers and diffusers apply β to the other term (taming #46, #57): ‖z − sg[e]‖² + β ‖sg[z] − e‖².
Both sums have the same value, but the gradients differ: the paper's pulls the codes at full strength and the
encoder at β, the other way round. `legacy=True` gives their placement, so their models train as they did.

A codebook "collapses" when most codes are never picked: they get no gradient and stay where they started.
Two remedies, both off by default (the official code has neither):
- `kmeans_init`: on the first training batch, the codes are set to k-means centroids of that batch's latents,
  so that every code starts where the data is;
- `restart_every=W`: codes that no latent picked during the last W training steps are moved onto latents of
  the current batch (randomly chosen), so they start being picked and trained again.

Shapes: B batch, D code width (`dim`), H×W latent grid, K codes (`num_codes`), N = B·H·W latent vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


@dataclass
class QuantizerOutput:
    """z_q (B, D, H, W): the codes, straight-through; indices (B, H, W); loss: L_VQ (a scalar); perplexity:
    exp of the entropy of the batch's code frequencies (K when every code is used equally, 1 when one code is);
    usage: the fraction of the K codes that the batch used."""

    z_q: torch.Tensor
    indices: torch.Tensor
    loss: torch.Tensor
    perplexity: torch.Tensor
    usage: torch.Tensor


def code_statistics(indices: torch.Tensor, num_codes: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """indices (any shape) -> (counts (K,), perplexity, usage) of the codes they use."""
    counts = torch.bincount(indices.reshape(-1), minlength=num_codes).float()
    return (counts, *usage_of_counts(counts))


def usage_of_counts(counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """How often each code was picked (K,) -> (perplexity, usage)."""
    probs = counts / counts.sum().clamp(min=1)
    entropy = -(probs * torch.log(probs.clamp(min=1e-10))).sum()
    return entropy.exp(), (counts > 0).float().mean()


def kmeans(points: torch.Tensor, k: int, iterations: int = 10, generator: torch.Generator | None = None
           ) -> torch.Tensor:
    """Lloyd's k-means: points (N, D) -> k centroids (k, D), started from k random points (with replacement when
    N < k); a cluster that loses all its points keeps its centroid."""
    n = points.shape[0]
    if n >= k:
        start = torch.randperm(n, generator=generator, device="cpu")[:k]
    else:
        start = torch.randint(n, (k,), generator=generator, device="cpu")
    centroids = points[start.to(points.device)].clone()
    for _ in range(iterations):
        assign = squared_distances(points, centroids).argmin(dim=1)  # (N,)
        sums = torch.zeros_like(centroids).index_add_(0, assign, points)
        counts = torch.bincount(assign, minlength=k).unsqueeze(1).to(points.dtype)
        centroids = torch.where(counts > 0, sums / counts.clamp(min=1), centroids)
    return centroids


def squared_distances(z: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """z (N, D), codes (K, D) -> (N, K) of ‖z − e‖² = ‖z‖² + ‖e‖² − 2 z·e, one matmul."""
    return z.pow(2).sum(1, keepdim=True) + codes.pow(2).sum(1) - 2 * z @ codes.t()


class VectorQuantizer(nn.Module):
    """Nearest-code quantisation of z (B, D, H, W) with a codebook `embedding.weight` (K, D).

    The codebook's name is taming's and diffusers' (`quantize.embedding.weight`). Two buffers travel with the
    weights so that a resumed run carries on where it stopped: `initialized` (the k-means start has been done) and
    `code_counts` (K,), how often each code was picked in the current restart window.
    """

    def __init__(self, num_codes: int, dim: int, beta: float = 0.25, legacy: bool = False,
                 kmeans_init: bool = False, restart_every: int = 0, kmeans_iterations: int = 10) -> None:
        super().__init__()
        if num_codes < 1 or dim < 1:
            raise ValueError(f"a codebook needs at least one code of width at least 1, got {num_codes} × {dim}")
        if restart_every < 0:
            raise ValueError(f"restart_every counts training steps (0 = never restart), got {restart_every}")
        self.num_codes, self.dim, self.beta, self.legacy = num_codes, dim, beta, legacy
        self.kmeans_init, self.restart_every, self.kmeans_iterations = kmeans_init, restart_every, kmeans_iterations
        self.embedding = nn.Embedding(num_codes, dim)
        nn.init.uniform_(self.embedding.weight, -1.0 / num_codes, 1.0 / num_codes)  # taming's start
        self.register_buffer("initialized", torch.tensor(not kmeans_init))
        self.register_buffer("code_counts", torch.zeros(num_codes))
        self.register_buffer("window_steps", torch.zeros((), dtype=torch.long))

    def forward(self, z: torch.Tensor) -> QuantizerOutput:
        """z (B, D, H, W) -> QuantizerOutput. In training, first the k-means start and the dead-code restarts."""
        B, D, H, W = z.shape
        if self.dim != D:
            raise ValueError(f"expected latents with {self.dim} channels (the code width), got shape {tuple(z.shape)}")
        flat = z.permute(0, 2, 3, 1).reshape(-1, D)  # (N, D), one latent vector per position
        if self.training:
            self._maintain_codebook(flat.detach())
        # the nearest code in float32: under bf16 autocast, near ties would go to the wrong code
        with torch.autocast(z.device.type, enabled=False):
            indices = squared_distances(flat.float(), self.embedding.weight.float()).argmin(dim=1)  # (N,)
        e = self.embedding(indices).to(z.dtype).view(B, H, W, D).permute(0, 3, 1, 2)  # (B, D, H, W)
        codebook_term = torch.mean((e - z.detach()) ** 2)  # ‖sg[z] − e‖²: moves the codes
        commitment_term = torch.mean((z - e.detach()) ** 2)  # ‖z − sg[e]‖²: moves the encoder
        if self.legacy:
            loss = commitment_term + self.beta * codebook_term
        else:
            loss = codebook_term + self.beta * commitment_term
        z_q = z + (e - z).detach()  # straight-through: the value of e, the gradient of z
        counts, perplexity, usage = code_statistics(indices, self.num_codes)
        if self.training and self.restart_every:
            self.code_counts += counts
            self.window_steps += 1
        return QuantizerOutput(z_q, indices.view(B, H, W), loss, perplexity, usage)

    def lookup(self, indices: torch.Tensor) -> torch.Tensor:
        """indices (B, H, W) -> the codes (B, D, H, W)."""
        if indices.ndim != 3:
            raise ValueError(f"expected code indices of shape (B, H, W), got {tuple(indices.shape)}")
        if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= self.num_codes):
            raise ValueError(f"code indices must lie in [0, {self.num_codes}), got {int(indices.min())} to "
                             f"{int(indices.max())}")
        return self.embedding(indices).permute(0, 3, 1, 2)

    # -- against collapse -------------------------------------------------------------------------------------
    @torch.no_grad()
    def _maintain_codebook(self, latents: torch.Tensor) -> None:
        """latents (N, D): the current batch's. Processes of a torchrun launch agree on the codebook: rank 0's
        choices are broadcast, and the counts are summed over processes."""
        if not bool(self.initialized):
            centroids = kmeans(latents.float(), self.num_codes, self.kmeans_iterations)
            self._set_codes(torch.arange(self.num_codes, device=latents.device), centroids)
            self.initialized.fill_(True)
        if self.restart_every and int(self.window_steps) >= self.restart_every:
            counts = self.code_counts.clone()
            if dist.is_available() and dist.is_initialized():
                dist.all_reduce(counts)
            dead = torch.nonzero(counts == 0).flatten()
            if len(dead):
                picks = torch.randint(latents.shape[0], (len(dead),), device=latents.device)
                self._set_codes(dead, latents[picks].float())
            self.code_counts.zero_()
            self.window_steps.zero_()

    def _set_codes(self, which: torch.Tensor, values: torch.Tensor) -> None:
        if dist.is_available() and dist.is_initialized():
            dist.broadcast(values, src=0)
        self.embedding.weight[which] = values.to(self.embedding.weight.dtype)

    def extra_repr(self) -> str:
        return (f"num_codes={self.num_codes}, dim={self.dim}, beta={self.beta}, legacy={self.legacy}, "
                f"kmeans_init={self.kmeans_init}, restart_every={self.restart_every}")
