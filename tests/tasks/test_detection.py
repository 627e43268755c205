"""Detection with DETR: the matcher against brute force and the official one, the set loss and the post-processing
against the official code, COCO AP on known answers, one batch overfitted, and the command line end to end."""

import itertools
from pathlib import Path

import pytest
import torch
from torchvision.ops import box_convert, generalized_box_iou

import vitlab
from vitlab.models.detection_output import DetectionOutput
from vitlab.models.detr_criterion import SetCriterion
from vitlab.models.detr_matcher import HungarianMatcher
from vitlab.models.detr_postprocess import postprocess
from vitlab.tasks.detection.coco_eval import coco_metrics
from vitlab.tasks.detection.task import normalized_targets

from ..models.detr_reference import official


def random_boxes(n, generator):
    """n normalised (cx, cy, w, h) boxes inside the image."""
    wh = 0.05 + 0.4 * torch.rand(n, 2, generator=generator)
    centre = wh / 2 + (1 - wh) * torch.rand(n, 2, generator=generator)
    return torch.cat([centre, wh], dim=1)


def random_outputs(B=3, N=6, K=4, layers=3, seed=0):
    generator = torch.Generator().manual_seed(seed)

    def layer():
        logits = torch.randn(B, N, K + 1, generator=generator)
        return DetectionOutput(logits, random_boxes(B * N, generator).view(B, N, 4))

    final = layer()
    final.aux_outputs = [layer() for _ in range(layers - 1)]
    return final


def random_targets(counts, K=4, seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [{"labels": torch.randint(0, K, (m,), generator=generator), "boxes": random_boxes(m, generator)}
            for m in counts]


def test_matcher_batched_equals_one_image_at_a_time_and_brute_force():
    outputs, targets = random_outputs(B=3, N=5), random_targets([3, 0, 4])
    matcher = HungarianMatcher()
    batched = matcher(outputs.logits, outputs.pred_boxes, targets)
    for b, target in enumerate(targets):
        alone = matcher(outputs.logits[b:b + 1], outputs.pred_boxes[b:b + 1], [target])[0]
        assert torch.equal(batched[b][0], alone[0]) and torch.equal(batched[b][1], alone[1])
        cost = matcher.cost_matrix(outputs.logits[b], outputs.pred_boxes[b], target["labels"], target["boxes"])
        M = len(target["labels"])
        assert len(batched[b][0]) == M
        if M == 0:
            continue
        # every way of giving the M objects M distinct predictions of the N
        best = min(sum(cost[p, j] for j, p in enumerate(chosen)) for chosen in itertools.permutations(range(5), M))
        found = cost[batched[b][0], batched[b][1]].sum()
        torch.testing.assert_close(found, best)


def test_matcher_with_no_objects_at_all():
    outputs = random_outputs(B=2)
    for rows, cols in HungarianMatcher()(outputs.logits, outputs.pred_boxes, random_targets([0, 0])):
        assert len(rows) == len(cols) == 0


def test_matcher_equals_the_official_one():
    outputs, targets = random_outputs(B=3, N=8), random_targets([2, 5, 1])
    theirs = official()["matcher"].HungarianMatcher(1, 5, 2)(
        {"pred_logits": outputs.logits, "pred_boxes": outputs.pred_boxes}, targets)
    for (r1, c1), (r2, c2) in zip(HungarianMatcher(1, 5, 2)(outputs.logits, outputs.pred_boxes, targets), theirs):
        assert torch.equal(r1, r2) and torch.equal(c1, c2)


def test_giou_of_identical_and_far_apart_boxes():
    box = torch.tensor([[10.0, 10.0, 50.0, 40.0]])
    far = torch.tensor([[200.0, 200.0, 220.0, 230.0]])
    assert generalized_box_iou(box, box).item() == pytest.approx(1.0)
    assert generalized_box_iou(box, far).item() < 0


@pytest.mark.parametrize("counts", [[3, 1, 4], [0, 2, 0]])
def test_set_criterion_equals_the_official_losses(counts):
    m = official()
    outputs, targets = random_outputs(B=3, N=6, K=4), random_targets(counts)
    weights = {"loss_ce": 1, "loss_bbox": 5, "loss_giou": 2}
    reference = m["detr"].SetCriterion(4, m["matcher"].HungarianMatcher(1, 5, 2), weights, eos_coef=0.1,
                                       losses=["labels", "boxes", "cardinality"])

    def as_dict(o):
        return {"pred_logits": o.logits, "pred_boxes": o.pred_boxes}

    theirs = reference({**as_dict(outputs), "aux_outputs": [as_dict(a) for a in outputs.aux_outputs]}, targets)
    ours = SetCriterion(4, HungarianMatcher(1, 5, 2), eos_coef=0.1)(outputs, targets)
    for key in ("loss_ce", "loss_bbox", "loss_giou", "loss_ce_0", "loss_bbox_1", "loss_giou_1", "cardinality_error"):
        torch.testing.assert_close(ours[key], theirs[key], atol=1e-5, rtol=1e-5)
    if sum(counts):
        torch.testing.assert_close(ours["class_error"], theirs["class_error"], atol=1e-4, rtol=1e-4)
    total = sum(weights[k.rstrip("_0123456789")] * v for k, v in theirs.items() if k.startswith("loss_"))
    torch.testing.assert_close(ours["loss"], total, atol=1e-5, rtol=1e-5)


def test_postprocess_equals_the_official_one():
    outputs = random_outputs(B=2, N=7, K=3)
    sizes = torch.tensor([[100, 150], [64, 48]])
    theirs = official()["detr"].PostProcess()({"pred_logits": outputs.logits, "pred_boxes": outputs.pred_boxes}, sizes)
    for mine, their in zip(postprocess(outputs, sizes), theirs):
        order = their["scores"].argsort(descending=True)
        torch.testing.assert_close(mine["scores"], their["scores"][order])
        torch.testing.assert_close(mine["boxes"], their["boxes"][order])
        assert torch.equal(mine["labels"], their["labels"][order])


def ground_truth_file():
    """Two images, three objects of two categories with ids 3 and 7 (not contiguous)."""
    anns = [{"id": 1, "image_id": 1, "category_id": 3, "bbox": [10, 10, 30, 20], "area": 600, "iscrowd": 0},
            {"id": 2, "image_id": 1, "category_id": 7, "bbox": [50, 40, 20, 30], "area": 600, "iscrowd": 0},
            {"id": 3, "image_id": 2, "category_id": 7, "bbox": [5, 5, 40, 40], "area": 1600, "iscrowd": 0}]
    return {"images": [{"id": 1, "width": 100, "height": 80, "file_name": "a.png"},
                       {"id": 2, "width": 64, "height": 64, "file_name": "b.png"}],
            "annotations": anns, "categories": [{"id": 3, "name": "a"}, {"id": 7, "name": "b"}]}


def test_coco_metrics_of_perfect_wrong_and_no_detections():
    gt = ground_truth_file()
    perfect = [{"image_id": a["image_id"], "category_id": a["category_id"], "bbox": a["bbox"], "score": 0.9}
               for a in gt["annotations"]]
    assert coco_metrics(gt, perfect)["map"] == pytest.approx(1.0)
    wrong_class = [{**d, "category_id": 10 - d["category_id"]} for d in perfect]  # 3 <-> 7
    assert coco_metrics(gt, wrong_class)["map_50"] == pytest.approx(0.0)
    # shifted by half a box: IoU 1/3, a hit at no threshold from 0.5
    shifted = [{**d, "bbox": [d["bbox"][0] + d["bbox"][2] / 2, *d["bbox"][1:]]} for d in perfect]
    assert coco_metrics(gt, shifted)["map_50"] == pytest.approx(0.0)
    assert coco_metrics(gt, [])["map"] == 0.0


def tiny_detr(num_classes=3, num_queries=6):
    torch.manual_seed(0)
    return vitlab.create_model("detr_small", num_classes=num_classes, dim=64, num_heads=4, enc_layers=1,
                               dec_layers=2, ffn_dim=128, num_queries=num_queries, dropout=0.0)


@pytest.mark.slow
def test_one_batch_overfits():
    """Two images, three objects: the loss goes to near zero and the boxes land on the targets."""
    torch.manual_seed(0)
    images = torch.randn(2, 3, 64, 64)
    targets = [{"labels": torch.tensor([0, 2]), "boxes": torch.tensor([[0.3, 0.3, 0.2, 0.3], [0.7, 0.6, 0.3, 0.2]])},
               {"labels": torch.tensor([1]), "boxes": torch.tensor([[0.5, 0.5, 0.4, 0.4]])}]
    model = tiny_detr()
    criterion = SetCriterion(3, HungarianMatcher())
    # at 2e-3 the loss falls to about 1.5 % of its first value in 150 steps (1e-3 needed 300 for 1.3 %)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    first = None
    for _ in range(150):
        losses = criterion(model(images), targets)
        first = first if first is not None else losses["loss"].item()
        optimizer.zero_grad()
        losses["loss"].backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        outputs = model(images)
        losses = criterion(outputs, targets)
    assert losses["loss"].item() < 0.05 * first, (first, losses["loss"].item())
    for b, target in enumerate(targets):
        rows, cols = criterion.matcher(outputs.logits[b:b + 1], outputs.pred_boxes[b:b + 1], [target])[0]
        assert torch.equal(outputs.logits[b, rows].argmax(-1), target["labels"][cols])
        iou = torch.diag(generalized_box_iou(box_convert(outputs.pred_boxes[b, rows], "cxcywh", "xyxy"),
                                             box_convert(target["boxes"][cols], "cxcywh", "xyxy")))
        assert (iou > 0.8).all(), iou
        # the unmatched queries say "no object"
        unmatched = [q for q in range(6) if q not in rows.tolist()]
        assert (outputs.logits[b, unmatched].argmax(-1) == 3).all()


class Oracle(torch.nn.Module):
    """A 'detector' that answers each batch with the loader's own ground truth, batch by batch, in order."""

    def __init__(self, loader, num_classes, num_queries=8):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))  # a device to be on
        self.answers = []
        for _, _, targets in loader:
            logits = torch.full((len(targets), num_queries, num_classes + 1), -10.0)
            logits[..., -1] = 10.0
            boxes = torch.full((len(targets), num_queries, 4), 0.5)
            for b, t in enumerate(normalized_targets(targets)):
                m = len(t["labels"])
                logits[b, :m, -1] = -10.0
                logits[b, torch.arange(m), t["labels"]] = 10.0
                boxes[b, :m] = t["boxes"]
            self.answers.append(DetectionOutput(logits, boxes))

    def forward(self, images, padding_mask=None):
        return self.answers.pop(0)


def test_evaluation_of_the_ground_truth_is_perfect(tmp_path):
    """The whole evaluation path (post-processing to pixels, labels back to category ids, image ids, pycocotools)
    scores the ground truth itself at AP 1."""
    from vitlab.cli.main import main
    from vitlab.engine.config import LoopConfig
    from vitlab.tasks.detection import DetectionConfig, DetectionTask

    mini = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"
    assert main(["make-scenes", "--out", str(tmp_path), "--train", "4", "--val", "6", "--test", "2", "--size", "64",
                 "--scale", "16-32", "--data-dir", str(mini), "--allow-partial-data"]) == 0
    task = DetectionTask(DetectionConfig(data=str(tmp_path), eval_batch_size=4), LoopConfig(batch_size=2))
    data = task.build_data()
    for part in (data.val, data.test):
        metrics = task.evaluate(Oracle(part, task.train_set.num_classes), part)
        assert metrics["map"] == pytest.approx(1.0) and metrics["mar_100"] == pytest.approx(1.0)


def test_without_a_val_split_validation_images_are_held_out_of_training(tmp_path):
    """A COCO folder with train and test only: a seeded share of the training images validates (scored against the
    training annotations, restricted to those images), the rest trains, and test/ is the test part."""
    from vitlab.cli.main import main
    from vitlab.engine.config import LoopConfig
    from vitlab.tasks.detection import DetectionConfig, DetectionTask

    mini = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"
    assert main(["make-scenes", "--out", str(tmp_path), "--train", "10", "--val", "0", "--test", "2", "--size", "64",
                 "--scale", "16-32", "--data-dir", str(mini), "--allow-partial-data"]) == 0
    task = DetectionTask(DetectionConfig(data=str(tmp_path), eval_batch_size=4, val_fraction=0.3),
                         LoopConfig(batch_size=2))
    data = task.build_data()
    train_ids = {image["id"] for image in task.train_set.images}
    val_ids = {image["id"] for image in task.val_set.images}
    assert (len(train_ids), len(val_ids), len(task.test_set)) == (7, 3, 2) and not train_ids & val_ids
    assert task.split["val_from"] == "train" and task.run_info()["data"]["split"]["seed"] == 0
    metrics = task.evaluate(Oracle(data.val, task.train_set.num_classes), data.val)
    assert metrics["map"] == pytest.approx(1.0) and metrics["mar_100"] == pytest.approx(1.0)


# COCO 2017's 80 category ids: 1-90 with ten unused
COCO_IDS = [i for i in range(1, 91) if i not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)]


@pytest.mark.parametrize("scheme", ["from 0", "from 1", "gaps as COCO's"])
def test_category_ids_are_the_annotation_files_own_in_every_answer(tmp_path, scheme):
    """Inside, classes are contiguous; `vitlab eval`'s figures, its per-category table and the results file it
    writes use the annotation file's own ids. An oracle's boxes score AP 1 through vitlab's evaluation, and through
    pycocotools' own COCOeval reading the written file against the annotation file."""
    import json

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    from vitlab.cli.main import main
    from vitlab.engine.config import LoopConfig
    from vitlab.tasks.detection import DetectionConfig, DetectionTask
    from vitlab.tasks.detection.inference import evaluate_run, named_detections

    mini = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"
    assert main(["make-scenes", "--out", str(tmp_path / "scenes"), "--train", "4", "--val", "6", "--test", "0",
                 "--size", "64", "--scale", "16-32", "--data-dir", str(mini), "--allow-partial-data"]) == 0
    files = sorted((tmp_path / "scenes" / "annotations").glob("*.json"))
    original = [c["id"] for c in json.loads(files[0].read_text())["categories"]]
    new_ids = {"from 0": list(range(len(original))), "from 1": list(range(1, len(original) + 1)),
               "gaps as COCO's": COCO_IDS[10:10 + len(original)]}[scheme]  # 11, 13, 14, ...: across a gap
    renumber = dict(zip(original, new_ids))
    for path in files:
        coco = json.loads(path.read_text())
        coco["categories"] = [{**c, "id": renumber[c["id"]]} for c in coco["categories"]]
        coco["annotations"] = [{**a, "category_id": renumber[a["category_id"]]} for a in coco["annotations"]]
        path.write_text(json.dumps(coco))
    task = DetectionTask(DetectionConfig(data=str(tmp_path / "scenes"), eval_batch_size=4), LoopConfig(batch_size=2))
    data = task.build_data()
    assert task.train_set.label_to_category == new_ids  # contiguous inside, the file's ids outside
    (tmp_path / "run").mkdir()
    saved = {"data": task.run_info()["data"]}
    result = evaluate_run(task, Oracle(data.val, task.train_set.num_classes), saved, tmp_path / "run", split="val")
    assert result["map"] == pytest.approx(1.0)
    present = {a["category_id"] for a in task.val_set.coco["annotations"]}
    assert [row["category_id"] for row in result["per_class"]] == new_ids
    assert all(row["ap"] == pytest.approx(1.0) for row in result["per_class"] if row["category_id"] in present)
    written = json.loads(Path(result["results_file"]).read_text())
    assert {d["category_id"] for d in written if d["score"] > 0.5} == present  # the oracle's boxes, not its padding
    ground_truth = COCO(str(task.val_set.annotations_file))
    evaluator = COCOeval(ground_truth, ground_truth.loadRes(result["results_file"]), iouType="bbox")
    evaluator.evaluate()
    evaluator.accumulate()
    evaluator.summarize()
    assert evaluator.stats[0] == pytest.approx(1.0)
    # what `vitlab predict --json`, the server and vitlab.pipeline say of a detection: the file's id and name
    found = {"labels": torch.tensor([0, 2]), "scores": torch.tensor([0.9, 0.8]), "boxes": torch.zeros(2, 4)}
    said = named_detections(torch.nn.Identity(), saved, found)
    assert [(d["category_id"], d["label"]) for d in said] == [(new_ids[0], saved["data"]["classes"][0]),
                                                             (new_ids[2], saved["data"]["classes"][2])]
