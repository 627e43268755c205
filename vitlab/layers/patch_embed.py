"""Patch preparation and the linear projection of patches (ViT paper §3.1, eq. 1).

An image (B, C, H, W) is cut into a grid of h × w patches of ph × pw pixels (h = H / ph, w = W / pw; neither the
image nor the patch need be square), each patch flattened to C·ph·pw numbers, and projected linearly to D:

    tokens = flatten(patches) @ Eᵀ + b,     E: (D, C·ph·pw)

A Conv2d with kernel = stride = patch computes exactly the same map (its weight is E reshaped to
(D, C, ph, pw)); it is the default because it avoids materialising the flattened patches.
"""

from __future__ import annotations

import torch
from torch import nn


def to_2tuple(value: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    if len(value) != 2:
        raise ValueError(f"expected an int or a pair (height, width), got {value!r}")
    return (int(value[0]), int(value[1]))


def patchify(images: torch.Tensor, patch_size: tuple[int, int]) -> torch.Tensor:
    """Cut images into non-overlapping patches and flatten each one.

    images: (B, C, H, W) -> patches: (B, h·w, C·ph·pw), patches in row-major grid order and the numbers of
    each patch ordered (channel, row, column), the order of a Conv2d weight (D, C, ph, pw) flattened.
    """
    B, C, H, W = images.shape
    ph, pw = patch_size
    h, w = H // ph, W // pw
    x = images.reshape(B, C, h, ph, w, pw)  # split rows into (h, ph) and columns into (w, pw)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, h, w, C, ph, pw): grid first, patch contents last
    return x.reshape(B, h * w, C * ph * pw)


def unpatchify(patches: torch.Tensor, patch_size: tuple[int, int], grid_size: tuple[int, int]) -> torch.Tensor:
    """Inverse of `patchify`: (B, h·w, C·ph·pw) -> (B, C, h·ph, w·pw)."""
    B, N, P = patches.shape
    ph, pw = patch_size
    h, w = grid_size
    C = P // (ph * pw)
    x = patches.reshape(B, h, w, C, ph, pw).permute(0, 3, 1, 4, 2, 5)  # (B, C, h, ph, w, pw)
    return x.reshape(B, C, h * ph, w * pw)


class PatchEmbed(nn.Module):
    """Image (B, C, H, W) -> patch tokens (B, h·w, D).

    projection="conv": Conv2d(C, D, kernel=stride=patch), weight (D, C, ph, pw) — timm's layout.
    projection="linear": Linear(C·ph·pw, D) on `patchify`'d patches, weight (D, C·ph·pw).
    `strict_img_size=False` accepts any image whose sides are multiples of the patch (for resolution changes).
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        patch_size: int | tuple[int, int] = 16,
        in_chans: int = 3,
        embed_dim: int = 768,
        projection: str = "conv",
        bias: bool = True,
        strict_img_size: bool = True,
    ) -> None:
        super().__init__()
        self.img_size = to_2tuple(img_size)
        self.patch_size = to_2tuple(patch_size)
        for side, (size, patch) in zip(("height", "width"), zip(self.img_size, self.patch_size)):
            if size % patch != 0:
                raise ValueError(
                    f"image {side} {size} is not a multiple of the patch {side} {patch}; "
                    f"use an image size divisible by the patch size {self.patch_size}"
                )
        self.grid_size = (self.img_size[0] // self.patch_size[0], self.img_size[1] // self.patch_size[1])
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.in_chans = in_chans
        self.embed_dim = embed_dim
        self.strict_img_size = strict_img_size
        self.projection = projection
        if projection == "conv":
            self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=self.patch_size, stride=self.patch_size, bias=bias)
        elif projection == "linear":
            self.proj = nn.Linear(in_chans * self.patch_size[0] * self.patch_size[1], embed_dim, bias=bias)
        else:
            raise ValueError(f"projection must be 'conv' or 'linear', got {projection!r}")

    def check_input(self, images: torch.Tensor) -> None:
        if images.ndim != 4:
            raise ValueError(f"expected images of shape (B, C, H, W), got a tensor of shape {tuple(images.shape)}")
        B, C, H, W = images.shape
        if self.in_chans != C:
            raise ValueError(
                f"expected {self.in_chans} input channels, got {C} (input shape {tuple(images.shape)}); "
                f"convert the images or build the model with in_chans={C}"
            )
        ph, pw = self.patch_size
        if H % ph or W % pw:
            raise ValueError(
                f"image size {H}×{W} is not a multiple of the patch size {ph}×{pw}; "
                f"resize or crop to a multiple, e.g. {self.img_size[0]}×{self.img_size[1]}"
            )
        if self.strict_img_size and self.img_size != (H, W):
            raise ValueError(
                f"expected images of size {self.img_size[0]}×{self.img_size[1]}, got {H}×{W}; resize them, or build "
                f"the model with img_size=({H}, {W}) (position embeddings are resampled) or dynamic_img_size=True"
            )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images: (B, C, H, W) -> tokens (B, h·w, D)."""
        self.check_input(images)
        if self.projection == "linear":
            return self.proj(patchify(images, self.patch_size))
        x = self.proj(images)  # (B, D, h, w)
        return x.flatten(2).transpose(1, 2)  # (B, h·w, D)

    def grid_for(self, height: int, width: int) -> tuple[int, int]:
        return (height // self.patch_size[0], width // self.patch_size[1])


def stem_grid(size: int, stages: int) -> int:
    """Side of the feature map after `stages` Conv3x3(stride 2, padding 1) layers: each gives ceil(size / 2)."""
    for _ in range(stages):
        size = (size + 1) // 2
    return size


class ConvStemPatchEmbed(PatchEmbed):
    """A small convolutional stem in place of the single patch projection (the ViT paper's hybrid, §3.1;
    Xiao et al. 2021, "Early convolutions help transformers see better").

    Each stage is Conv3x3(stride 2) → BatchNorm → ReLU and halves the resolution (rounding up); a final 1×1
    convolution is the linear projection to D. The stages must bring the image to the grid of `patch_size`:
    two stages for 4×4 patches of a 28×28 image (28 → 14 → 7), three for 7×7 patches (28 → 14 → 7 → 4).
    images (B, C, H, W) -> tokens (B, h·w, D), h = H / ph, w = W / pw.
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 28,
        patch_size: int | tuple[int, int] = 4,
        in_chans: int = 1,
        embed_dim: int = 192,
        stem_channels: tuple[int, ...] = (32, 64),
        strict_img_size: bool = True,
    ) -> None:
        super().__init__(img_size, patch_size, in_chans, embed_dim, projection="conv", strict_img_size=strict_img_size)
        stages = len(stem_channels)
        reached = (stem_grid(self.img_size[0], stages), stem_grid(self.img_size[1], stages))
        if reached != self.grid_size:
            raise ValueError(
                f"a convolutional stem of {stages} stride-2 stages turns {self.img_size[0]}×{self.img_size[1]} images "
                f"into a {reached[0]}×{reached[1]} grid, but patch_size {self.patch_size} needs "
                f"{self.grid_size[0]}×{self.grid_size[1]}; change the number of stem_channels or the patch_size"
            )
        layers: list[nn.Module] = []
        channels = in_chans
        for width in stem_channels:
            layers += [nn.Conv2d(channels, width, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(width),
                       nn.ReLU(inplace=True)]
            channels = width
        self.stem = nn.Sequential(*layers)
        self.proj = nn.Conv2d(channels, embed_dim, kernel_size=1)  # the linear projection of each grid cell
        self.projection = "convstem"

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """images: (B, C, H, W) -> tokens (B, h·w, D)."""
        self.check_input(images)
        x = self.proj(self.stem(images))  # (B, D, h, w)
        return x.flatten(2).transpose(1, 2)
