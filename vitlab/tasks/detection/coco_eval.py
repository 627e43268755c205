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
                 image_ids: list[int] | None = None, per_class: bool = False) -> dict[str, Any]:
    """ground_truth: a COCO instances dict; detections: [{"image_id", "category_id", "bbox": [x, y, w, h] pixels,
    "score"}]; image_ids: the images evaluated (default: all). Returns METRIC_KEYS -> value (-1 where COCO has
    no object of that size, as pycocotools reports it); with `per_class`, also "per_class": [{"category_id",
    "name", "ap", "ap_50"}] in the annotation file's own ids and names (ap -1 for a category with no object)."""
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
            empty: dict[str, Any] = dict.fromkeys(METRIC_KEYS, 0.0)
            if per_class:
                empty["per_class"] = [{"category_id": c["id"], "name": c["name"], "ap": 0.0, "ap_50": 0.0}
                                      for c in ground_truth["categories"]]
            return empty
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    metrics: dict[str, Any] = {key: float(value) for key, value in zip(METRIC_KEYS, np.asarray(evaluator.stats))}
    if per_class:
        metrics["per_class"] = _per_class(evaluator, gt)
    return metrics


def _per_class(evaluator: Any, gt: Any) -> list[dict[str, Any]]:
    """Each category's AP over IoU 0.50:0.95 and at 0.50 (all areas, 100 detections), from the precision table
    pycocotools accumulated: (IoU thresholds, recall points, categories, areas, max detections)."""
    precision = evaluator.eval["precision"][:, :, :, 0, -1]
    rows = []
    for k, category_id in enumerate(evaluator.params.catIds):
        values, at_50 = precision[:, :, k], precision[0, :, k]
        rows.append({"category_id": int(category_id), "name": gt.cats[category_id]["name"],
                     "ap": float(values[values > -1].mean()) if (values > -1).any() else -1.0,
                     "ap_50": float(at_50[at_50 > -1].mean()) if (at_50 > -1).any() else -1.0})
    return rows


def format_table(metrics: dict[str, float]) -> str:
    """The COCO summary as people read it."""
    rows = [("AP @[IoU=0.50:0.95]", "map"), ("AP @[IoU=0.50]", "map_50"), ("AP @[IoU=0.75]", "map_75"),
            ("AP small", "map_small"), ("AP medium", "map_medium"), ("AP large", "map_large"),
            ("AR @1", "mar_1"), ("AR @10", "mar_10"), ("AR @100", "mar_100")]
    lines = [f"  {label:<22} {metrics[key]:.3f}" for label, key in rows if key in metrics]
    if metrics.get("per_class"):
        lines += ["per category (the annotation file's ids and names):",
                  f"  {'id':>4}  {'name':<20} {'AP':>6} {'AP50':>6}"]
        lines += [f"  {row['category_id']:>4}  {row['name']:<20} {row['ap']:>6.3f} {row['ap_50']:>6.3f}"
                  for row in metrics["per_class"]]
    return "\n".join(lines)
