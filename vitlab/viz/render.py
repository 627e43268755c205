"""Pictures of attention: a strip of panels [input | rollout over the input | one panel per head], composed
with Pillow so its pixel size is exact: each panel is the input image's size times an integer `scale`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ..atomic import atomic_write


def panel_scale(width: int, height: int, min_side: int = 224) -> int:
    """Small images (28×28) are enlarged by a whole factor so the maps can be seen; large ones are kept."""
    return max(1, math.ceil(min_side / min(width, height)))


def colorize(heat: np.ndarray, cmap: str = "inferno") -> np.ndarray:
    """(h, w) in [0, 1] -> (h, w, 3) uint8."""
    import matplotlib

    return (matplotlib.colormaps[cmap](np.clip(heat, 0, 1))[..., :3] * 255).astype(np.uint8)


def upsample(attention_map: torch.Tensor, size: tuple[int, int]) -> np.ndarray:
    """(h, w) -> (H, W) in [0, 1], bilinear."""
    x = F.interpolate(attention_map[None, None].float(), size=size, mode="bilinear", align_corners=False)
    return x[0, 0].clamp(0, 1).numpy()


def attention_panels(image: Image.Image, rollout: torch.Tensor, head_maps: torch.Tensor, alpha: float = 0.6,
                     ) -> list[Image.Image]:
    """image: the input as the user gave it; rollout: (h, w); head_maps: (heads, h, w). Returns 2 + heads RGB
    panels, each image.size × scale: the input, the rollout over it, then each head's map over it."""
    scale = panel_scale(*image.size)
    W, H = image.size[0] * scale, image.size[1] * scale
    base = np.asarray(image.convert("RGB").resize((W, H), Image.NEAREST)).astype(np.float32)
    panels = [base.astype(np.uint8)]
    for heat in [rollout, *head_maps]:
        overlay = (1 - alpha) * base + alpha * colorize(upsample(heat, (H, W)))
        panels.append(overlay.clip(0, 255).astype(np.uint8))
    return [Image.fromarray(panel) for panel in panels]


def attention_strip(image: Image.Image, rollout: torch.Tensor, head_maps: torch.Tensor, alpha: float = 0.6,
                    ) -> Image.Image:
    """The panels of `attention_panels` side by side, as one RGB image."""
    panels = attention_panels(image, rollout, head_maps, alpha)
    return Image.fromarray(np.concatenate([np.asarray(panel) for panel in panels], axis=1))


def save_png(picture: Image.Image, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: picture.save(f, format="PNG"))
    return path
