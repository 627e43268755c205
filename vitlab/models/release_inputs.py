"""How each release's images were prepared when its authors scored it, as the library that hosts it prepares them:
a Preprocessing record (vitlab/data/preprocessing.py) as plain data, since models/ sits below data/.

    timm_eval(224, 0.9, INCEPTION)   timm's eval transform: the shorter side to floor(224 / 0.9) with Pillow's
                                     bicubic, the centre 224 × 224, normalised with the release's mean and std
    DETR_COCO                        transformers' DETR processor: the shorter side to 800, the longer at most 1333,
                                     torchvision's bilinear, ImageNet's mean and std
    mmseg_test(rescale=(2049, 1025)) an mm* repository's single-scale test pipeline: kept ratio, within the bounds,
                                     OpenCV's bilinear (no antialiasing), ImageNet's mean and std
    TAMING_256                       taming-transformers' ImageNet images: shorter side 256 (albumentations, OpenCV's
                                     bilinear), the centre 256 × 256, to [-1, 1]
"""

from __future__ import annotations

import math
from typing import Any

IMAGENET = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
INCEPTION = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}  # what timm calls IMAGENET_INCEPTION_MEAN / _STD


def timm_eval(size: int, crop_pct: float, stats: dict[str, Any], interpolation: str = "bicubic") -> dict[str, Any]:
    """timm's `create_transform(is_training=False, crop_mode="center")` for a pretrained config of this input size,
    crop_pct, interpolation, mean and std (Pillow resamples: timm transforms PIL images)."""
    return {"resize": math.floor(size / crop_pct), "crop": size, "interpolation": interpolation, **stats,
            "resampler": "pil"}


DETR_COCO = {"resize": 800, "max_size": 1333, "interpolation": "bilinear", **IMAGENET, "resampler": "torch",
             "crop_offset": "floor"}  # no crop: as transformers records it


def mmseg_test(**size: Any) -> dict[str, Any]:
    """mmsegmentation's test pipeline (`Resize(keep_ratio=True)` + `Normalize` with its ImageNet statistics in 0-255
    units): `rescale=(long, short)` as mmcv's imrescale bounds an image, or `resize=short`."""
    return {**size, "interpolation": "bilinear", "antialias": False, **IMAGENET, "resampler": "torch"}


TAMING_256 = {"resize": 256, "crop": 256, "interpolation": "bilinear", "antialias": False, **INCEPTION,
              "resampler": "torch"}
