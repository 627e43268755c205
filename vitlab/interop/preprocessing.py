"""The preprocessing a checkpoint was made for, read from what its library writes beside the weights: never guessed.

    timm           config.json's `pretrained_cfg` (input_size, crop_pct, crop_mode, interpolation, mean, std):
                   timm's eval transform, with Pillow's resampling
    transformers   preprocessor_config.json (size, resample, do_center_crop, crop_size, image_mean, image_std):
                   its image processor, whose default backend resizes uint8 tensors with torchvision
    vitlab         its safetensors metadata's `preprocessing`
    a release      `Release.preprocessing`, the values of the library that hosts it

    preprocessing_for("vit_base_patch16_224.augreg2_in21k_ft_in1k")   # a Preprocessing, or None where none is known
"""

from __future__ import annotations

import math
import os
from typing import Any

from ..checkpoint import recorded_preprocessing
from ..data.preprocessing import Preprocessing
from ..reading import read_json
from .hub import HF_PROCESSOR_FILE, fetch, release_named

PIL_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}  # PIL.Image.Resampling's values, as transformers saves them


def preprocessing_for(source: str | os.PathLike) -> Preprocessing | None:
    """What `source` (a release tag, hf-hub:org/name, a file or folder) records of its preprocessing; None where
    nothing does (a bare state dict)."""
    release = release_named(source)
    if release is not None and release.preprocessing:
        return Preprocessing.from_dict(release.preprocessing)
    path = fetch(source)
    folder = path if path.is_dir() else path.parent
    weights = path if path.is_file() else folder / "model.safetensors"  # a folder's: what vitlab push writes
    recorded = recorded_preprocessing(weights) if weights.is_file() and weights.suffix == ".safetensors" else None
    if recorded:
        return Preprocessing.from_dict(recorded)
    if (folder / HF_PROCESSOR_FILE).is_file():
        return from_transformers(read_json(folder / HF_PROCESSOR_FILE, "a transformers preprocessor_config.json"))
    if (folder / "config.json").is_file():
        config = read_json(folder / "config.json", "a Hugging Face config.json")
        if isinstance(config.get("pretrained_cfg"), dict):
            return from_timm(config["pretrained_cfg"])
    return None


def from_timm(cfg: dict[str, Any]) -> Preprocessing | None:
    """timm's eval transform for a pretrained config (what `resolve_data_config` + `create_transform` make of it);
    None for a crop mode other than the centre one."""
    mode = cfg.get("crop_mode", "center")
    if mode not in ("center", "squash") or "input_size" not in cfg:
        return None
    channels, height, width = cfg["input_size"]
    crop_pct = cfg.get("crop_pct") or 0.875  # timm's default eval size, not its larger test_input_size
    if height == width and mode == "center":  # the shorter side; "squash": both sides, the ratio not kept
        resize: int | tuple[int, int] = math.floor(height / crop_pct)
    else:
        resize = (math.floor(height / crop_pct), math.floor(width / crop_pct))
    interpolation = cfg.get("interpolation", "bilinear")
    return Preprocessing(resize=resize, crop=(height, width),
                         interpolation=interpolation if interpolation in ("nearest", "bilinear") else "bicubic",
                         mean=tuple(cfg.get("mean", (0.485, 0.456, 0.406))),
                         std=tuple(cfg.get("std", (0.229, 0.224, 0.225))), channels=channels, resampler="pil")


# the processors that read a bare number as the shorter side (get_size_dict(default_to_square=False)); every other
# one, ViT's and DeiT's among them, resizes to a square of that side. DETR's also cap the longer side (max_size)
SHORTER_SIDE_PROCESSORS = ("Bit", "CLIP", "Detr", "DeformableDetr", "ConditionalDetr", "Yolos", "MobileNet")


def from_transformers(processor: dict[str, Any]) -> Preprocessing:
    """A transformers image processor's saved configuration as it preprocesses (its default, torchvision backend).
    A size saved as a bare number (older configs, many of the Hub's) is read as its processor class reads it."""
    size, resize, max_size = processor.get("size") or {}, None, None
    kind = str(processor.get("image_processor_type") or processor.get("feature_extractor_type") or "")
    if isinstance(size, int):
        if kind.startswith(SHORTER_SIDE_PROCESSORS):
            size = {"shortest_edge": size} | ({"longest_edge": processor.get("max_size") or 1333}
                                               if "Detr" in kind or "Yolos" in kind else {})
        else:
            size = {"height": size, "width": size}
    elif isinstance(size, list | tuple) and len(size) == 2:  # (height, width), as get_size_dict reads a pair
        size = {"height": size[0], "width": size[1]}
    if processor.get("do_resize", True):
        if "shortest_edge" in size:
            resize, max_size = size["shortest_edge"], size.get("longest_edge")
        elif "height" in size and "width" in size:
            resize = (size["height"], size["width"])
        elif size.get("max_height") is not None and size.get("max_height") == size.get("max_width"):
            max_size = size["max_height"]  # a DETR processor's: the image fitted into the square, its ratio kept
        else:
            raise ValueError(f"{HF_PROCESSOR_FILE}: a size of {size} is not one vitlab reads (shortest_edge, "
                             f"height and width, or a square max_height and max_width)")
    crop = None
    if processor.get("do_center_crop"):
        crop_size = processor.get("crop_size") or {}
        crop = ((crop_size["height"], crop_size["width"]) if isinstance(crop_size, dict) else
                (crop_size, crop_size) if isinstance(crop_size, int) else tuple(crop_size))
    stats = {"mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0)}
    if processor.get("do_normalize", True):
        stats = {"mean": tuple(processor.get("image_mean", (0.5,) * 3)), "std": tuple(processor.get("image_std",
                                                                                                   (0.5,) * 3))}
    # a grey model's processor (vitlab writes one for a one-channel run): one mean, no conversion to RGB
    grey = len(stats["mean"]) == 1 and not processor.get("do_convert_rgb", True)
    return Preprocessing(resize=resize, max_size=max_size, crop=crop,
                         interpolation=PIL_RESAMPLE.get(processor.get("resample", 2), "bicubic"), **stats,
                         channels=1 if grey else 3, resampler="torch", crop_offset="floor")


# ---- the other way: a preprocessing record as transformers' image processor saves itself ---------------------------
RESAMPLE_OF = {name: code for code, name in PIL_RESAMPLE.items()}


def to_transformers(preprocessing: dict[str, Any], detector: str | None = None) -> dict[str, Any]:
    """A preprocessing record as a transformers `preprocessor_config.json`: a classifier's (ViT's processor, BiT's
    for a shorter side and a centre crop) or, with `detector` naming the processor class ("DetrImageProcessor"), a
    detector's, which resizes and pads. Raises ValueError for a rule no processor of that kind follows."""
    import warnings

    rule = Preprocessing.from_dict(preprocessing)
    processor: dict[str, Any] = {"do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                                 "image_mean": list(rule.mean), "image_std": list(rule.std),
                                 "resample": RESAMPLE_OF[rule.interpolation], "do_convert_rgb": rule.channels == 3}
    refused = ValueError(f"transformers' image processors have no form of this preprocessing ({preprocessing}); "
                         f"vitlab's own format (vitlab push) keeps it")
    if rule.rescale is not None:
        raise refused
    if detector is not None:  # resized, never cropped; a batch padded at the bottom and right, with its pixel mask
        if rule.crop is not None:
            raise refused
        processor |= {"image_processor_type": detector, "format": "coco_detection", "do_pad": True,
                      "do_convert_annotations": True, "do_resize": rule.resize is not None or rule.max_size is not None}
        if isinstance(rule.resize, tuple):
            processor["size"] = {"height": rule.resize[0], "width": rule.resize[1]}
        elif rule.resize is not None:
            if rule.max_size is None:  # transformers' DETR processors cap the longer side always
                raise refused
            processor["size"] = {"shortest_edge": rule.resize, "longest_edge": rule.max_size}
        elif rule.max_size is not None:  # the longer side to max_size, the ratio kept
            processor["size"] = {"max_height": rule.max_size, "max_width": rule.max_size}
        if processor["do_resize"] and rule.resampler == "float":
            warnings.warn("transformers' processors resize 8-bit pixels where this preprocessing resizes unrounded "
                          "ones (as a detection run's data does): a resized image differs by less than one grey "
                          "level", stacklevel=4)
        return processor
    processor["image_processor_type"] = "ViTImageProcessor"
    if rule.crop is not None and rule.crop_offset != "floor" and isinstance(rule.resize, int):
        warnings.warn("transformers' processors place a centre crop by flooring an odd margin where this "
                      "preprocessing rounds it: some images will be cropped a pixel apart", stacklevel=4)
    if isinstance(rule.resize, int) and rule.crop is not None:  # shorter side, then the centre: BiT's processor
        processor |= {"image_processor_type": "BitImageProcessor", "do_resize": True,
                      "size": {"shortest_edge": rule.resize}, "do_center_crop": True,
                      "crop_size": {"height": rule.crop[0], "width": rule.crop[1]}}
    elif isinstance(rule.resize, tuple) and rule.crop is None:
        processor |= {"do_resize": True, "size": {"height": rule.resize[0], "width": rule.resize[1]}}
    else:
        raise refused
    return processor
