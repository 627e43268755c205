"""Confusion matrices as text and as a picture."""

from __future__ import annotations

from pathlib import Path

from ...atomic import atomic_write


def confusion_text(confusion: list[list[int]], classes: list[str], width: int = 6) -> str:
    short = [name[:width] for name in classes]
    lines = [" " * 14 + "".join(f"{name:>{width + 1}}" for name in short)]
    for name, row in zip(classes, confusion):
        lines.append(f"{name[:13]:<14}" + "".join(f"{count:>{width + 1}}" for count in row))
    return "\n".join(lines)


def plot_confusion(confusion: list[list[int]], classes: list[str], path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    matrix = np.asarray(confusion)
    size = max(4.0, 0.6 * len(classes) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(classes)), classes, rotation=45, ha="right")
    ax.set_yticks(range(len(classes)), classes)
    ax.set(xlabel="predicted", ylabel="true", title="confusion matrix")
    threshold = matrix.max() / 2 if matrix.size else 0
    for (row, col), count in np.ndenumerate(matrix):
        ax.text(col, row, str(count), ha="center", va="center", fontsize=8,
                color="white" if count > threshold else "black")
    fig.tight_layout()
    path = Path(path)
    atomic_write(path, lambda f: fig.savefig(f, dpi=100, format="png"))
    plt.close(fig)
    return path
