"""mIoU, per-class IoU and pixel accuracy from one confusion matrix, against torchmetrics on random masks with
ignored pixels."""

import math

import pytest
import torch

from vitlab.tasks.segmentation.metrics import confusion_matrix, scores


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_torchmetrics_with_ignored_pixels_and_an_absent_class(seed):
    from torchmetrics.classification import MulticlassAccuracy, MulticlassJaccardIndex

    generator = torch.Generator().manual_seed(seed)
    K = 6
    target = torch.randint(0, K - 1, (4, 17, 23), generator=generator)  # class 5 never in the ground truth
    prediction = torch.where(torch.rand(4, 17, 23, generator=generator) < 0.6, target,
                             torch.randint(0, K - 1, (4, 17, 23), generator=generator))  # …nor predicted
    target[torch.rand(4, 17, 23, generator=generator) < 0.1] = 255
    # accumulated batch by batch, as an evaluation does
    matrix = sum(confusion_matrix(prediction[i], target[i], K) for i in range(4))
    got = scores(matrix)
    miou = MulticlassJaccardIndex(num_classes=K, ignore_index=255, average="macro")
    per_class = MulticlassJaccardIndex(num_classes=K, ignore_index=255, average="none")
    accuracy = MulticlassAccuracy(num_classes=K, ignore_index=255, average="micro")
    for metric in (miou, per_class, accuracy):
        for i in range(4):
            metric.update(prediction[i], target[i])
    assert got["miou"] == pytest.approx(float(miou.compute()), abs=1e-6)
    assert got["pixel_acc"] == pytest.approx(float(accuracy.compute()), abs=1e-6)
    expected = per_class.compute()
    assert math.isnan(got["iou_per_class"][5])  # absent: no IoU (torchmetrics reports 0 there and leaves it out)
    assert got["iou_per_class"][:5] == pytest.approx(expected[:5].tolist(), abs=1e-6)


def test_by_hand():
    prediction = torch.tensor([0, 0, 1, 1, 2, 2])
    target = torch.tensor([0, 1, 1, 1, 255, 0])
    matrix = confusion_matrix(prediction, target, 3)
    assert matrix.tolist() == [[1, 0, 1], [1, 2, 0], [0, 0, 0]]
    got = scores(matrix)
    # IoU_0 = 1 / (2 + 2 - 1), IoU_1 = 2 / (2 + 3 - 2), IoU_2 = 0 / (1 + 0 - 0)
    assert got["iou_per_class"] == pytest.approx([1 / 3, 2 / 3, 0.0])
    assert got["miou"] == pytest.approx(1 / 3) and got["pixel_acc"] == pytest.approx(3 / 5)
    with pytest.raises(ValueError, match="outside 0 … 2"):
        confusion_matrix(prediction, torch.tensor([0, 1, 3, 1, 0, 0]), 3)
