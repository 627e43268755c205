"""The label sets releases were trained on, read from torchvision's weight metadata (shipped with it: nothing is
downloaded), so that a released model names its classes.

    imagenet_1k()   ImageNet-1k's 1,000 class names, in the index order of every ImageNet-1k classifier's head
    coco_91()       COCO's 91 category slots as DETR's heads index them: slot i is COCO category id i, "N/A" where
                    COCO has no category (0 and the ten gaps, 12, 26, 29, ...), as Hugging Face's id2label writes it
    ade20k_150()    ADE20K's 150 classes, cityscapes_19() Cityscapes' 19, as SETR's releases index them (below: the
                    authors' lists, which torchvision does not ship)
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


# ADE20K's 150 classes (SceneParsing), and Cityscapes' 19 classes in trainId order, as SETR's configurations index
# them: the lists of fudan-zvg/SETR's mmseg/datasets/ade.py and cityscapes.py at 1361561, identical to
# open-mmlab/mmsegmentation's (ade.py at b05a26e, cityscapes.py at 3f8d34e); ADE20K's "bed " without its trailing
# space. Pascal Context is not here: SETR's releases have 60 outputs ("background" and 59 classes) whose order its own
# name list and its label converter disagree on, so those releases name no classes.
ADE20K_150 = (
    "wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed", "windowpane", "grass", "cabinet",
    "sidewalk", "person", "earth", "door", "table", "mountain", "plant", "curtain", "chair", "car", "water",
    "painting", "sofa", "shelf", "house", "sea", "mirror", "rug", "field", "armchair", "seat", "fence", "desk",
    "rock", "wardrobe", "lamp", "bathtub", "railing", "cushion", "base", "box", "column", "signboard",
    "chest of drawers", "counter", "sand", "sink", "skyscraper", "fireplace", "refrigerator", "grandstand", "path",
    "stairs", "runway", "case", "pool table", "pillow", "screen door", "stairway", "river", "bridge", "bookcase",
    "blind", "coffee table", "toilet", "flower", "book", "hill", "bench", "countertop", "stove", "palm",
    "kitchen island", "computer", "swivel chair", "boat", "bar", "arcade machine", "hovel", "bus", "towel",
    "light", "truck", "tower", "chandelier", "awning", "streetlight", "booth", "television receiver", "airplane",
    "dirt track", "apparel", "pole", "land", "bannister", "escalator", "ottoman", "bottle", "buffet", "poster",
    "stage", "van", "ship", "fountain", "conveyer belt", "canopy", "washer", "plaything", "swimming pool", "stool",
    "barrel", "basket", "waterfall", "tent", "bag", "minibike", "cradle", "oven", "ball", "food", "step", "tank",
    "trade name", "microwave", "pot", "animal", "bicycle", "lake", "dishwasher", "screen", "blanket", "sculpture",
    "hood", "sconce", "vase", "traffic light", "tray", "ashcan", "fan", "pier", "crt screen", "plate", "monitor",
    "bulletin board", "shower", "radiator", "glass", "clock", "flag",
)
CITYSCAPES_19 = (
    "road", "sidewalk", "building", "wall", "fence", "pole", "traffic light", "traffic sign", "vegetation",
    "terrain", "sky", "person", "rider", "car", "truck", "bus", "train", "motorcycle", "bicycle",
)


def ade20k_150() -> tuple[str, ...]:
    return ADE20K_150


def cityscapes_19() -> tuple[str, ...]:
    return CITYSCAPES_19
