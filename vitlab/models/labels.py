"""The label sets releases were trained on, read from torchvision's weight metadata (shipped with it: nothing is
downloaded), so that a released model names its classes.

    imagenet_1k()   ImageNet-1k's 1,000 class names, in the index order of every ImageNet-1k classifier's head
    coco_91()       COCO's 91 category slots as DETR's heads index them: slot i is COCO category id i, "N/A" where
                    COCO has no category (0 and the ten gaps, 12, 26, 29, ...), as Hugging Face's id2label writes it
"""

from __future__ import annotations

from functools import cache

NO_CATEGORY = "N/A"


@cache
def imagenet_1k() -> tuple[str, ...]:
    from torchvision.models import ViT_B_16_Weights

    return tuple(ViT_B_16_Weights.IMAGENET1K_V1.meta["categories"])


@cache
def coco_91() -> tuple[str, ...]:
    from torchvision.models.detection import FasterRCNN_ResNet50_FPN_Weights

    slots = FasterRCNN_ResNet50_FPN_Weights.COCO_V1.meta["categories"]  # slot 0: torchvision's "__background__"
    return (NO_CATEGORY, *slots[1:])
