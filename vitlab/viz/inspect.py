"""The ViT paper's pictures of a trained model (Figure 7): how similar the position embeddings of the patch
positions are to each other, and the principal components of the patch-embedding filters."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..atomic import atomic_write

FIG_DPI = 100


def position_similarity(model: nn.Module) -> torch.Tensor:
    """Cosine similarity of each patch position's embedding with every other: (h, w, h, w)."""
    if model.pos_embed is None:
        raise ValueError("this model has no position embeddings (pos_embed='none'); there is nothing to compare")
    h, w = model.patch_embed.grid_size
    patches = model.pos_embed[0, model.num_prefix_tokens:].detach().float()  # (h·w, D)
    unit = patches / patches.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    return (unit @ unit.T).reshape(h, w, h, w)


def patch_filter_components(model: nn.Module, count: int = 28) -> tuple[torch.Tensor, str]:
    """Principal components of the linear patch-embedding filters, as images (count, C, ph, pw).

    For a hybrid (convolutional stem) model the first stem convolution's filters stand in, since its
    patches are not projected by one linear map; the returned title says which.
    """
    embed = model.patch_embed
    if getattr(embed, "projection", "conv") == "convstem":
        weight = embed.stem[0].weight.detach().float()  # (C1, C, 3, 3)
        title = "first stem convolution: principal components"
    else:
        weight = embed.proj.weight.detach().float()
        if weight.ndim == 2:  # the Linear view: (D, C·ph·pw)
            weight = weight.reshape(weight.shape[0], model.config.in_chans, *embed.patch_size)
        title = "patch-embedding filters: principal components"
    D = weight.shape[0]
    flat = weight.reshape(D, -1)
    flat = flat - flat.mean(dim=0, keepdim=True)
    _, _, components = torch.linalg.svd(flat, full_matrices=False)  # rows: directions, by explained variance
    count = min(count, components.shape[0])
    return components[:count].reshape(count, *weight.shape[1:]), title


def plot_position_similarity(model: nn.Module, path: str | Path, panel_inches: float = 0.8) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    similarity = position_similarity(model)
    h, w = similarity.shape[:2]
    fig, axes = plt.subplots(h, w, figsize=(max(w * panel_inches, 4.0), h * panel_inches + 0.4), squeeze=False)
    for r in range(h):
        for c in range(w):
            axes[r][c].imshow(similarity[r, c].numpy(), vmin=-1, vmax=1, cmap="viridis")
            axes[r][c].set_xticks([])
            axes[r][c].set_yticks([])
    fig.suptitle("position embedding similarity (row, column of the patch)", fontsize=8)
    return _save(fig, path)


def plot_filter_components(model: nn.Module, path: str | Path, count: int = 28, per_row: int = 7) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    components, title = patch_filter_components(model, count)
    rows = -(-len(components) // per_row)
    fig, axes = plt.subplots(rows, per_row, figsize=(per_row, rows + 0.4), squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.set_xticks([])
        ax.set_yticks([])
        if i < len(components):
            image = components[i]
            image = (image - image.min()) / (image.max() - image.min()).clamp(min=1e-12)
            shown = image[0] if image.shape[0] == 1 else image[:3].permute(1, 2, 0)
            ax.imshow(shown.numpy(), cmap="gray" if image.shape[0] == 1 else None)
        else:
            ax.axis("off")
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def _save(fig, path: str | Path) -> Path:
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # no tight bounding box: the pixel size is figsize × dpi
    atomic_write(path, lambda f: fig.savefig(f, dpi=FIG_DPI, format=path.suffix.lstrip(".") or "png"))
    plt.close(fig)
    return path
