"""Default training recipes: what `vitlab train` does when given only the data.

The Fashion-MNIST recipe was sized by measurement on 2 CPU cores to reach ≥ 90 % test accuracy within 15
minutes of training (benchmarks/fashion_mnist_recipe.py; the README has the table).
"""

from __future__ import annotations

from typing import Any

# DeiT's recipe pieces (Touvron et al. 2021, Table 8), each off unless asked for: `vitlab train --randaugment 9
# --mixup 0.8 --cutmix 1.0 --random-erasing 0.25 --repeated-aug 3 --ema-decay 0.9998 --distill hard --teacher RUN`.
DEIT_OFF: dict[str, Any] = {
    "randaugment": 0,  # magnitude M of RandAugment; 0 = off (DeiT: 9)
    "randaugment_ops": 2,  # operations N per image
    "random_erasing": 0.0,  # probability; 0 = off (DeiT: 0.25)
    "mixup": 0.0,  # Beta(α, α); 0 = off (DeiT: 0.8)
    "cutmix": 0.0,  # Beta(α, α); 0 = off (DeiT: 1.0)
    "repeated_aug": 1,  # copies of each image per epoch; 1 = off (DeiT: 3)
    "ema_decay": 0.0,  # 0 = off (DeiT: 0.99996 over 300 ImageNet epochs)
    "layer_decay": None,  # layer-wise lr decay for fine-tuning; None = off (e.g. 0.75)
    "distill": "none",  # "none" | "soft" | "hard"
    "distill_alpha": 0.5,
    "distill_tau": 1.0,
}

RECIPES: dict[str, dict[str, Any]] = {
    # Measured: in a 15-minute budget the model underfits (train ≈ test accuracy), so augmentation beyond flips
    # only slows learning (1 epoch: 80.0 % without shifts vs 71.5 % with 2-pixel shifts), and fewer, wider
    # tokens buy more accuracy per second than many narrow ones.
    "fashion-mnist": {
        "model": "vit_mini_convstem_28",
        "epochs": 8,
        "batch_size": 128,
        "lr": 2e-3,
        "weight_decay": 0.05,
        "warmup_epochs": 1.0,
        "label_smoothing": 0.1,
        "clip_grad": 1.0,
        "drop_path": 0.0,
        "crop_padding": 0,
        "hflip": True,
        "img_size": 28,
        **DEIT_OFF,
    },
    # your own images: a small ViT at a CPU-friendly resolution; override --model/--img-size for more
    "folder": {
        "model": "vit_tiny_patch16_224",
        "epochs": 20,
        "batch_size": 64,
        "lr": 1e-3,
        "weight_decay": 0.05,
        "warmup_epochs": 2.0,
        "label_smoothing": 0.1,
        "clip_grad": 1.0,
        "drop_path": 0.1,
        "crop_padding": None,
        "hflip": True,
        "img_size": 224,
        **DEIT_OFF,
    },
}


def recipe_for(data: str) -> dict[str, Any]:
    from ..data.registry import FASHION_MNIST_NAMES

    return dict(RECIPES["fashion-mnist" if data.lower() in FASHION_MNIST_NAMES else "folder"])
