"""MAE (He et al., CVPR 2022, "Masked Autoencoders Are Scalable Vision Learners"): a ViT pretrained without
labels, by hiding most of an image's patches and reconstructing their pixels.

    tokens = patches(x) E + E_pos[patches]               the ViT's own patch embedding and positions (ViT eq. 1)
    keep a random (1 − r) share of the N patches         §3 "masking": r = 0.75, uniform, drawn per image
    z = ViT([x_class + E_pos[class]; tokens kept])       §3 "encoder": only the visible patches go in
    u = [W_d z; m, …, m] in the patches' order + E_dec   §3 "decoder": one learned mask token m in every hidden slot
    ŷ = Linear(LN(Blocks_dec(u)))                        each patch's p·p·C values
    loss = mean over the hidden patches of mean((ŷ − y')²)  §3 "reconstruction target"

where y' is each patch's pixels normalised by that patch's own mean and variance (`norm_pix_loss`, the paper's
better target; the variance unbiased, plus 1e-6, as the official code computes it), or the pixels as they are.

Only the encoder is used afterwards: SETR and ViT start from an MAE run with `--weights`, which reads its
encoder and leaves the decoder. The decoder is narrow and shallow (the paper: 512 wide, 8 blocks, for a ViT-L
encoder); it sees every position but costs little. The key names are the official code's (facebookresearch/mae,
models_mae.py): the encoder's are timm's ViT names, and `mask_token`, `decoder_embed`, `decoder_pos_embed`,
`decoder_blocks`, `decoder_norm`, `decoder_pred`. Two choices differ from it: the encoder's position embedding is
the ViT's learned one (started at the paper's fixed 2-D sine–cosine values), so that it loads into a ViT or a SETR
whose positions learn; the decoder's is fixed sine–cosine, as the paper's.

Glossary: B batch, C channels, p patch side, h × w patch grid, N = h·w patches, K = N − hidden kept, P prefix (class)
tokens, D encoder width, D_d decoder width.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import torch
from torch import nn

from ..layers.blocks import EncoderBlock
from ..layers.pos_embed import sincos_pos_embed
from .family import Paper
from .registry import register_config, register_model
from .vit import VisionTransformer, ViTConfig


@dataclass
class MAEOutput:
    """loss: the reconstruction loss () over the hidden patches; pred (B, N, p·p·C): every patch's reconstruction
    (in the target's space: normalised per patch with norm_pix_loss); mask (B, N): 1 where a patch was hidden."""

    loss: torch.Tensor
    pred: torch.Tensor
    mask: torch.Tensor


@register_config
@dataclass(frozen=True)
class MAEConfig(ViTConfig):
    """A ViT config (the encoder's) with the decoder and the masking that pretrain it."""

    family: ClassVar[str] = "mae"
    tasks: ClassVar[tuple[str, ...]] = ("mim",)
    title: ClassVar[str] = "MAE"
    description: ClassVar[str] = ("MAE (He et al., CVPR 2022): a ViT pretrained by reconstructing the pixels of "
                                  "randomly hidden patches from the visible ones; its encoder starts ViT or SETR")
    paper: ClassVar[Paper | None] = Paper(
        "Masked Autoencoders Are Scalable Vision Learners",
        "He, Kaiming and others", "CVPR", 2022, "2111.06377")
    releases: ClassVar[dict] = {}
    not_exportable: ClassVar[str | None] = ("a masked autoencoder draws a random mask in its forward and is only "
                                            "trained; export the ViT or SETR its encoder starts")

    num_classes: int = 0  # the encoder has no head
    decoder_dim: int = 512
    decoder_depth: int = 8
    decoder_heads: int = 16
    mask_ratio: float = 0.75  # the share of patches hidden
    norm_pix_loss: bool = True  # reconstruct each patch normalised by its own mean and variance

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.mask_ratio < 1:
            raise ValueError(f"mask_ratio must be in (0, 1), got {self.mask_ratio}")
        if self.decoder_dim % self.decoder_heads:
            raise ValueError(f"decoder_dim={self.decoder_dim} is not divisible by decoder_heads={self.decoder_heads}")
        if self.num_classes:
            raise ValueError(f"a masked autoencoder has no classifier: num_classes must be 0, got {self.num_classes}")

    def build(self) -> MaskedAutoencoder:
        return MaskedAutoencoder(self)


class MaskedAutoencoder(VisionTransformer):
    """images (B, C, H, W) -> MAEOutput. The ViT it extends is the encoder, its keys the ViT's own."""

    config: MAEConfig

    def __init__(self, config: MAEConfig) -> None:
        super().__init__(config)
        grid, P = self.patch_embed.grid_size, self.num_prefix_tokens
        if config.pos_embed == "learn":  # the paper's fixed sine–cosine table, as the start of a learned one
            with torch.no_grad():
                self.pos_embed.copy_(sincos_pos_embed(grid, config.dim, P, layout="blocks"))
        ph, pw = self.patch_embed.patch_size
        D_d = config.decoder_dim
        self.decoder_embed = nn.Linear(config.dim, D_d)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, D_d))
        self.register_buffer("decoder_pos_embed", sincos_pos_embed(grid, D_d, P, layout="blocks"))
        self.decoder_blocks = nn.ModuleList(
            EncoderBlock(D_d, config.decoder_heads, config.mlp_ratio, qkv_bias=True,
                         norm_layer=partial(nn.LayerNorm, eps=config.norm_eps), fused_attn=config.fused_attn)
            for _ in range(config.decoder_depth)
        )
        self.decoder_norm = nn.LayerNorm(D_d, eps=config.norm_eps)
        self.decoder_pred = nn.Linear(D_d, ph * pw * config.in_chans)
        nn.init.normal_(self.mask_token, std=0.02)
        for module in (*self.decoder_blocks.modules(), self.decoder_embed, self.decoder_pred):
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    # ---- pixels <-> patches --------------------------------------------------------------------------------
    def patchify(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, h·p, w·p) -> (B, N, p·p·C), each patch's pixels row by row, channels last (the official
        order, so that its `decoder_pred` maps on)."""
        B, C, H, W = images.shape
        ph, pw = self.patch_embed.patch_size
        h, w = H // ph, W // pw
        x = images.reshape(B, C, h, ph, w, pw).permute(0, 2, 4, 3, 5, 1)  # (B, h, w, ph, pw, C)
        return x.reshape(B, h * w, ph * pw * C)

    def unpatchify(self, patches: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """(B, N, p·p·C) and the grid (h, w) -> images (B, C, h·p, w·p)."""
        B = patches.shape[0]
        ph, pw = self.patch_embed.patch_size
        h, w = grid
        C = patches.shape[-1] // (ph * pw)
        x = patches.reshape(B, h, w, ph, pw, C).permute(0, 5, 1, 3, 2, 4)  # (B, C, h, ph, w, pw)
        return x.reshape(B, C, h * ph, w * pw)

    # ---- §3 masking ----------------------------------------------------------------------------------------
    def random_masking(self, B: int, N: int, mask_ratio: float, noise: torch.Tensor | None = None,
                       generator: torch.Generator | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Which patches each image keeps: sort uniform noise (B, N) and keep the K = ⌊N·(1 − r)⌋ smallest.
        Returns keep (B, K) the kept patches' indices, restore (B, N) the permutation that puts [kept; hidden]
        back in the patches' order, and mask (B, N) 1 where hidden."""
        device = self.mask_token.device
        if noise is None:
            noise = torch.rand(B, N, generator=generator, device=generator.device if generator else device)
        noise = noise.to(device)
        K = int(N * (1 - mask_ratio))
        shuffle = noise.argsort(dim=1)  # (B, N): the patches, kept ones first
        restore = shuffle.argsort(dim=1)
        mask = torch.ones(B, N, device=device)
        mask[:, :K] = 0
        return shuffle[:, :K], restore, torch.gather(mask, 1, restore)

    # ---- §3 encoder and decoder ----------------------------------------------------------------------------
    def forward_encoder(self, images: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W), keep (B, K) -> the encoded [prefix; kept patches] (B, P + K, D)."""
        B, _, H, W = images.shape
        P = self.num_prefix_tokens
        positions = self.pos_embed_for(self.patch_embed.grid_for(H, W))  # (1, P + N, D)
        tokens = self.patch_embed(images) + positions[:, P:]  # (B, N, D)
        kept = torch.gather(tokens, 1, keep[..., None].expand(-1, -1, tokens.shape[-1]))  # (B, K, D)
        if P:
            kept = torch.cat([self.prefix_tokens(B) + positions[:, :P], kept], dim=1)
        x = self.pos_drop(kept)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def forward_decoder(self, latent: torch.Tensor, restore: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """latent (B, P + K, D), restore (B, N) -> every patch's reconstruction (B, N, p·p·C)."""
        P = self.num_prefix_tokens
        x = self.decoder_embed(latent)  # (B, P + K, D_d)
        B, N, D_d = x.shape[0], restore.shape[1], x.shape[-1]
        patches = torch.cat([x[:, P:], self.mask_token.expand(B, N - (x.shape[1] - P), D_d)], dim=1)  # (B, N, D_d)
        patches = torch.gather(patches, 1, restore[..., None].expand(-1, -1, D_d))  # back in the patches' order
        positions = self.decoder_pos_embed if grid == self.patch_embed.grid_size else \
            sincos_pos_embed(grid, D_d, P, layout="blocks").to(x)
        x = torch.cat([x[:, :P], patches], dim=1) + positions
        for block in self.decoder_blocks:
            x = block(x)
        return self.decoder_pred(self.decoder_norm(x))[:, P:]

    def reconstruction_target(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, C, H, W) -> what the decoder is trained to give, (B, N, p·p·C)."""
        target = self.patchify(images)
        if self.config.norm_pix_loss:
            mean, var = target.mean(dim=-1, keepdim=True), target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1e-6) ** 0.5
        return target

    def reconstruction_loss(self, images: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The mean squared error per patch, averaged over the hidden patches only."""
        per_patch = (pred - self.reconstruction_target(images)).square().mean(dim=-1)  # (B, N)
        return (per_patch * mask).sum() / mask.sum()

    def forward(self, images: torch.Tensor, mask_ratio: float | None = None, noise: torch.Tensor | None = None,
                generator: torch.Generator | None = None) -> MAEOutput:
        """images (B, C, H, W) -> MAEOutput. The mask is drawn from `generator` (the global generator when None),
        or given by `noise` (B, N): the patches with the smallest noise are kept."""
        B, _, H, W = images.shape
        grid = self.patch_embed.grid_for(H, W)
        keep, restore, mask = self.random_masking(B, grid[0] * grid[1], mask_ratio or self.config.mask_ratio,
                                                  noise, generator)
        pred = self.forward_decoder(self.forward_encoder(images, keep), restore, grid)
        return MAEOutput(self.reconstruction_loss(images, pred, mask), pred, mask)

    def reconstruct(self, images: torch.Tensor, output: MAEOutput) -> torch.Tensor:
        """The picture MAE's figures show: the visible patches as they are, the hidden ones as reconstructed (the
        per-patch normalisation undone with the true patch's mean and variance). (B, C, H, W)."""
        patches = self.patchify(images)
        pred = output.pred
        if self.config.norm_pix_loss:
            mean, var = patches.mean(dim=-1, keepdim=True), patches.var(dim=-1, keepdim=True)
            pred = pred * (var + 1e-6) ** 0.5 + mean
        mixed = torch.where(output.mask[..., None].bool(), pred, patches)
        ph, pw = self.patch_embed.patch_size
        return self.unpatchify(mixed, (images.shape[-2] // ph, images.shape[-1] // pw))

    def no_weight_decay(self) -> set[str]:
        return super().no_weight_decay() | {"mask_token"}


# ---- presets -------------------------------------------------------------------------------------------------
@register_model
def mae_vit_base_patch16_224() -> MAEConfig:
    """The paper's ViT-B/16 with its decoder (512 wide, 8 blocks, 16 heads), 75 % hidden."""
    return MAEConfig(img_size=224, patch_size=16, dim=768, depth=12, num_heads=12)


@register_model
def mae_vit_large_patch16_224() -> MAEConfig:
    return MAEConfig(img_size=224, patch_size=16, dim=1024, depth=24, num_heads=16)


@register_model
def mae_small() -> MAEConfig:
    """The encoder of setr_*_small (a 6-block ViT of width 192 on 8-pixel patches of 128-pixel images), with a
    decoder of 2 blocks 128 wide: pretrains it on the scenes on 2 cores."""
    return MAEConfig(img_size=128, patch_size=8, dim=192, depth=6, num_heads=3, decoder_dim=128, decoder_depth=2,
                     decoder_heads=4)
