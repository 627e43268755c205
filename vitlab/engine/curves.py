"""Training curves from a run's metrics rows: one panel per quantity, training and held-out values together.

A key `train_X` and a key `test_X` (or `test_X_ema`) are the same quantity X and share a panel; bookkeeping keys
(step, epoch, lr, times, throughputs) and non-numbers (per-length tables) are not drawn. The x axis is the
epoch where the rows have one, else the optimizer step.
"""

from __future__ import annotations

from typing import IO, Any

SKIP = ("step", "epoch", "lr", "elapsed_s")
SKIP_SUFFIXES = ("_per_s", "_time_s")


def _quantity(key: str) -> tuple[str, str] | None:
    """'train_loss' -> ('loss', 'train'), 'test_acc_ema' -> ('acc', 'test (EMA)'), 'lr' -> None."""
    if key in SKIP or key.endswith(SKIP_SUFFIXES) or key.startswith("selected_"):
        return None
    for prefix in ("train", "test", "val"):
        if key.startswith(prefix + "_"):
            name, label = key[len(prefix) + 1:], prefix
            if name.endswith("_ema"):
                name, label = name[:-4], f"{prefix} (EMA)"
            return name, label
    return key, "train"


def plot_metrics(rows: list[dict[str, Any]], file: str | IO[bytes]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_key = "epoch" if all("epoch" in row for row in rows) else "step"
    panels: dict[str, dict[str, list[tuple[float, float]]]] = {}
    for row in rows:
        for key, value in row.items():
            quantity = _quantity(key)
            if quantity is None or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            name, label = quantity
            panels.setdefault(name, {}).setdefault(label, []).append((row[x_key], value))
    count = max(len(panels), 1)
    fig, axes = plt.subplots(1, count, figsize=(5 * count, 4), squeeze=False)
    # margins fixed in inches (room for tick labels and a title) instead of tight_layout, which measured every
    # label's extent and took two thirds of the drawing's time: the picture is drawn at every checkpoint
    width = 5 * count
    fig.subplots_adjust(left=0.8 / width, right=1 - 0.2 / width, bottom=0.55 / 4, top=1 - 0.4 / 4, wspace=0.3)
    for ax, (name, lines) in zip(axes[0], panels.items()):
        for label, points in lines.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], "o-", label=label)
        ax.set(xlabel=x_key, ylabel=name, title=name)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.savefig(file, dpi=100, format="png")
    plt.close(fig)
