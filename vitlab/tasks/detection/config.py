"""The options of detection with DETR and Deformable DETR: the data, the model, the matching costs and the loss
weights. The defaults are the papers' (costs and weights 1 / 5 / 2, no-object weight 0.1, backbone at a tenth of
the lr; Deformable DETR's class cost and weight 2, for its focal loss)."""

from __future__ import annotations

from dataclasses import dataclass

from ...engine.options import check, option
from ..weights_options import WEIGHTS_BY_NAME, strict_option


@dataclass(frozen=True)
class DetectionConfig:
    data: str | None = option(None, "a COCO-format folder: images/{train,val}/ + annotations/instances_{train,val}"
                              ".json (vitlab make-scenes), or COCO's train2017/ + val2017/", metavar="DIR",
                              default_text="none, give one", group="data")
    model: str | None = option(None, "a registered detector (vitlab models 'detr*' or 'deformable_detr*')",
                               default_text="detr_small; with --weights TAG: the release's", group="model")
    weights: str | None = option(None, "start from these weights: a vitlab file or run, an official DETR .pth, "
                                 "a Hugging Face DetrForObjectDetection folder"
                                 + WEIGHTS_BY_NAME, metavar="PATH",
                                 default_text="random", group="model")
    strict: bool = strict_option()
    backbone_weights: str | None = option(None, "start the backbone from a ResNet classifier's weights (a "
                                          "torchvision or timm file, a vitlab resnet run); --weights wins",
                                          metavar="PATH", default_text="random", group="model")
    num_queries: int | None = option(None, "object queries", default_text="the model's", group="model")
    dropout: float | None = option(None, "dropout in the transformer", default_text="the model's", group="model")
    max_size: int | None = option(None, "resize each image so its longer side is this many pixels",
                                    default_text="as it is", group="data")
    hflip: bool = option(True, "random horizontal flips in training", flag="--no-hflip", group="data")
    backbone_lr: float = option(1e-5, "learning rate of the CNN backbone (the rest trains at --lr)")
    # the official recipe's 0.1
    lr_linear_proj_mult: float = option(0.1, "Deformable DETR: the sampling offsets' and reference points' lr, "
                                        "× --lr")
    eos_coef: float = option(0.1, "weight of the no-object class in the cross-entropy")
    cost_class: float | None = option(None, "matching cost of the class probability",
                                      default_text="the model's: 1 for DETR, 2 for Deformable DETR")
    cost_bbox: float = option(5.0, "matching cost of the L1 box distance")
    cost_giou: float = option(2.0, "matching cost of the generalised IoU")
    class_weight: float | None = option(None, "loss weight of the class term (DETR's cross-entropy, Deformable "
                                        "DETR's focal loss)", default_text="the model's: 1 for DETR, 2 for "
                                        "Deformable DETR")
    bbox_weight: float = option(5.0, "loss weight of the L1 box loss")
    giou_weight: float = option(2.0, "loss weight of the GIoU loss")
    aux_loss: bool = option(True, "supervise every decoder layer, each with its own matching", flag="--no-aux-loss")
    # inference never has the denoising groups
    dn_groups: int = option(0, "denoising training (DN-DETR): this many groups of noised training objects beside the "
                            "queries, trained to give back the clean ones (no matching); 0: off")
    dn_box_noise: float = option(0.4, "denoising: a noised box's centre moves up to this share of half its side "
                                 "and each side scales by up to this share")
    dn_label_noise: float = option(0.2, "denoising: the chance that a noised object's class is replaced by a "
                                   "random one")
    eval_batch_size: int = option(32, "images per batch in evaluation")
    val_fraction: float = option(0.1, "share of the training images held out to select the best checkpoint where "
                                      "the folder has no val split", group="data")
    skip_bad_images: bool = option(False, "skip unreadable images and images missing on disk (counted) instead of "
                                   "stopping", group="data")
    skip_bad_annotations: bool = option(False, "skip bad annotations and image entries (counted) instead of "
                                        "stopping", group="data")

    def __post_init__(self) -> None:
        check(self.backbone_lr >= 0, "backbone_lr", ">= 0 (0 freezes the backbone)", self.backbone_lr)
        check(self.lr_linear_proj_mult >= 0, "lr_linear_proj_mult", ">= 0", self.lr_linear_proj_mult)
        check(0 < self.eos_coef <= 1, "eos_coef", "in (0, 1]", self.eos_coef)
        for name in ("cost_class", "cost_bbox", "cost_giou", "class_weight", "bbox_weight", "giou_weight"):
            value = getattr(self, name)
            check(value is None or value >= 0, name, ">= 0", value)
        check(self.num_queries is None or self.num_queries > 0, "num_queries", "positive", self.num_queries)
        check(self.dropout is None or 0 <= self.dropout < 1, "dropout", "in [0, 1)", self.dropout)
        check(self.max_size is None or self.max_size >= 32, "max_size", ">= 32 pixels", self.max_size)
        check(self.eval_batch_size > 0, "eval_batch_size", "positive", self.eval_batch_size)
        check(self.dn_groups >= 0, "dn_groups", ">= 0 (0: no denoising)", self.dn_groups)
        check(0 <= self.dn_box_noise <= 1, "dn_box_noise", "in [0, 1]", self.dn_box_noise)
        check(0 <= self.dn_label_noise <= 1, "dn_label_noise", "in [0, 1]", self.dn_label_noise)
        check(0 < self.val_fraction < 1, "val_fraction", "in (0, 1)", self.val_fraction)


@dataclass(frozen=True)
class DetectionEvalOptions:
    """`vitlab eval` of a detection run."""

    data: str | None = option(None, "a COCO-format folder with the run's categories", metavar="DATA",
                              default_text="the run's own val split")
    batch_size: int | None = option(None, "evaluation batch size", default_text="the run's --eval-batch-size")


@dataclass(frozen=True)
class DetectionServeOptions:
    """The server's form fields of a detection run."""

    threshold: float = option(0.5, "return detections scoring above this, in [0, 1)")

    def __post_init__(self) -> None:
        check(0.0 <= self.threshold < 1.0, "threshold", "in [0, 1)", self.threshold)


@dataclass(frozen=True)
class DetectionPredictOptions(DetectionServeOptions):
    """`vitlab predict` of a detection run."""

    out: str | None = option(None, "write each image with its boxes drawn here, as NAME.png", metavar="DIR",
                             default_text="write nothing")
