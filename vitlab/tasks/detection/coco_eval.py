"""COCO's detection metrics through pycocotools: AP averaged over IoU 0.50:0.95, AP at 0.50 and 0.75, AP of
small / medium / large objects, and average recall at 1, 10 and 100 detections per image."""

from __future__ import annotations

import contextlib
import copy
import io
from typing import Any

import numpy as np

# COCOeval.stats, in its order
METRIC_KEYS = ("map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_10", "mar_100",
               "mar_small", "mar_medium", "mar_large")


def coco_metrics(ground_truth: dict[str, Any], detections: list[dict[str, Any]],
                 image_ids: list[int] | None = None) -> dict[str, float]:
    """ground_truth: a COCO instances dict; detections: [{"image_id", "category_id", "bbox": [x, y, w, h] pixels,
    "score"}]; image_ids: the images evaluated (default: all). Returns METRIC_KEYS -> value (-1 where COCO has
    no object of that size, as pycocotools reports it)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):  # pycocotools prints its progress and table
        gt = COCO()
        gt.dataset = copy.deepcopy(ground_truth)
        gt.dataset.setdefault("info", {})
        gt.createIndex()
        dt = gt.loadRes(detections) if detections else COCO()
        evaluator = COCOeval(gt, dt, iouType="bbox")
        if image_ids is not None:
            evaluator.params.imgIds = sorted(image_ids)
        if not detections:
            return dict.fromkeys(METRIC_KEYS, 0.0)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return {key: float(value) for key, value in zip(METRIC_KEYS, np.asarray(evaluator.stats))}


def format_table(metrics: dict[str, float]) -> str:
    """The COCO summary as people read it."""
    rows = [("AP @[IoU=0.50:0.95]", "map"), ("AP @[IoU=0.50]", "map_50"), ("AP @[IoU=0.75]", "map_75"),
            ("AP small", "map_small"), ("AP medium", "map_medium"), ("AP large", "map_large"),
            ("AR @1", "mar_1"), ("AR @10", "mar_10"), ("AR @100", "mar_100")]
    return "\n".join(f"  {label:<22} {metrics[key]:.3f}" for label, key in rows if key in metrics)
