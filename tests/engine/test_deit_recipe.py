"""DeiT's recipe pieces, each against its formula worked out here: distillation losses, EMA, layer decay, the
repeated-augmentation order, and every augmentation option on a real batch."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.transforms import v2

import vitlab
from vitlab.engine.augment import mixup_cutmix, rand_augment, random_erasing
from vitlab.engine.ema import ModelEma
from vitlab.engine.optim import build_optimizer
from vitlab.engine.samplers import EpochSampler
from vitlab.models import DistilledOutput
from vitlab.tasks.classification.distill import DistillationLoss


def softmax_rows(logits, tau=1.0):
    rows = []
    for row in logits.tolist():
        exps = [math.exp(v / tau) for v in row]
        rows.append([e / sum(exps) for e in exps])
    return rows


class Teacher(nn.Module):
    """A linear teacher on flattened images: something with parameters that must not learn."""

    def __init__(self, features=12, classes=5):
        super().__init__()
        self.fc = nn.Linear(features, classes)

    def forward(self, x):
        return self.fc(x.flatten(1))


def batch(seed=0, B=6, K=5):
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(B, 3, 2, 2, generator=g)
    y_cls, y_dist = torch.randn(B, K, generator=g), torch.randn(B, K, generator=g)
    labels = torch.randint(0, K, (B,), generator=g)
    return images, y_cls, y_dist, labels


def test_soft_distillation_is_the_papers_formula():
    torch.manual_seed(0)
    teacher = Teacher()
    images, y_cls, y_dist, labels = batch()
    alpha, tau = 0.3, 3.0
    loss = DistillationLoss(teacher, "soft", alpha, tau)(images, DistilledOutput(y_cls, y_dist), labels)
    # by hand: (1 − α)·CE(ψ(Z_s), y) + α·τ²·mean_b Σ_c ψ(Z_t/τ)_c · log(ψ(Z_t/τ)_c / ψ(Z_s'/τ)_c)
    p_cls = softmax_rows(y_cls)
    ce = -sum(math.log(p_cls[b][labels[b]]) for b in range(6)) / 6
    p_t, p_s = softmax_rows(teacher(images).detach(), tau), softmax_rows(y_dist, tau)
    kl = sum(sum(t * math.log(t / s) for t, s in zip(p_t[b], p_s[b])) for b in range(6)) / 6  # per image
    assert loss.item() == pytest.approx((1 - alpha) * ce + alpha * tau**2 * kl, rel=1e-5)


def test_hard_distillation_is_the_papers_formula():
    torch.manual_seed(0)
    teacher = Teacher()
    images, y_cls, y_dist, labels = batch(1)
    loss = DistillationLoss(teacher, "hard", alpha=0.5)(images, DistilledOutput(y_cls, y_dist), labels)
    teacher_labels = [max(range(5), key=row.__getitem__) for row in teacher(images).tolist()]
    p_cls, p_dist = softmax_rows(y_cls), softmax_rows(y_dist)
    ce_true = -sum(math.log(p_cls[b][labels[b]]) for b in range(6)) / 6
    ce_teacher = -sum(math.log(p_dist[b][teacher_labels[b]]) for b in range(6)) / 6
    assert loss.item() == pytest.approx(0.5 * ce_true + 0.5 * ce_teacher, rel=1e-5)


def test_no_distillation_trains_both_heads_on_the_labels_and_one_head_plainly():
    images, y_cls, y_dist, labels = batch(2)
    criterion = DistillationLoss(label_smoothing=0.1)
    both = criterion(images, DistilledOutput(y_cls, y_dist), labels)
    smoothed = [F.cross_entropy(y, labels, label_smoothing=0.1) for y in (y_cls, y_dist)]
    assert both.item() == pytest.approx(((smoothed[0] + smoothed[1]) / 2).item(), rel=1e-6)
    assert criterion(images, y_cls, labels).item() == pytest.approx(smoothed[0].item(), rel=1e-6)


def test_two_heads_come_as_a_distilled_output_not_a_tuple():
    images, y_cls, y_dist, labels = batch(5)
    criterion = DistillationLoss()
    with pytest.raises(TypeError, match="DistilledOutput"):
        criterion(images, (y_cls, y_dist), labels)
    # the fields are the heads: swapping them changes a distillation loss (the teacher term reads dist_logits only)
    teacher = Teacher()
    soft = DistillationLoss(teacher, "soft", alpha=1.0)
    expected = F.kl_div(F.log_softmax(y_dist, -1), F.log_softmax(teacher(images), -1), reduction="batchmean",
                        log_target=True)
    assert soft(images, DistilledOutput(y_cls, y_dist), labels).item() == pytest.approx(expected.item(), rel=1e-5)
    assert soft(images, DistilledOutput(y_dist, y_cls), labels).item() != pytest.approx(expected.item(), rel=1e-3)


def test_a_student_without_distillation_token_distils_through_its_only_head():
    torch.manual_seed(0)
    teacher = Teacher()
    images, y_cls, _, labels = batch(3)
    loss = DistillationLoss(teacher, "hard", alpha=0.25)(images, y_cls, labels)
    expected = 0.75 * F.cross_entropy(y_cls, labels) + 0.25 * F.cross_entropy(y_cls, teacher(images).argmax(-1))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_the_teacher_receives_no_gradient_and_stays_in_eval_mode():
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.Dropout(0.5), nn.Linear(8, 5))
    criterion = DistillationLoss(teacher, "soft", 0.5, 2.0).train()
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    images, _, _, labels = batch(4)
    student = nn.Linear(12, 5)
    loss = criterion(images, student(images.flatten(1)), labels)
    loss.backward()
    assert all(p.grad is None for p in teacher.parameters())
    assert all(p.grad is not None for p in student.parameters())
    # eval mode: dropout off, so the teacher's answer is the same every time
    with torch.no_grad():
        assert torch.equal(teacher(images), teacher(images))


def test_distillation_needs_a_teacher():
    with pytest.raises(ValueError, match="needs a teacher"):
        DistillationLoss(None, "hard")


def test_ema_follows_its_formula_and_copies_integer_buffers():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    theta0 = model[0].weight.detach().clone()
    ema = ModelEma(model, decay=0.9)
    values = [theta0]
    for _ in range(2):
        with torch.no_grad():
            model[0].weight.add_(torch.randn_like(model[0].weight))
        model(torch.randn(4, 3))  # training mode: BatchNorm counts a batch
        values.append(model[0].weight.detach().clone())
        ema.update(model)
    d = 0.9
    expected = d * d * values[0] + d * (1 - d) * values[1] + (1 - d) * values[2]
    torch.testing.assert_close(ema.module[0].weight, expected)
    assert ema.module[1].num_batches_tracked.item() == 2
    assert not any(p.requires_grad for p in ema.module.parameters())


def test_layer_decay_scales_each_blocks_learning_rate():
    model = vitlab.create_model("vit_tiny_patch7_28", depth=3)
    optimizer = build_optimizer(model, lr=1.0, weight_decay=0.05, layer_decay=0.5)
    lr_of = {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}
    L = 3
    assert lr_of[id(model.pos_embed)] == 0.5 ** (L + 1)
    assert lr_of[id(model.patch_embed.proj.weight)] == 0.5 ** (L + 1)
    for i in range(L):
        assert lr_of[id(model.blocks[i].attn.qkv.weight)] == 0.5 ** (L - i)
    assert lr_of[id(model.head.weight)] == 1.0 and lr_of[id(model.norm.weight)] == 1.0
    decays = {id(p): group["weight_decay"] for group in optimizer.param_groups for p in group["params"]}
    assert decays[id(model.blocks[0].attn.qkv.bias)] == 0.0 and decays[id(model.blocks[0].attn.qkv.weight)] == 0.05


def test_repeated_augmentation_shows_each_image_r_times_in_a_row():
    order = EpochSampler(10, seed=3, repeats=3).order().tolist()
    assert len(order) == 10
    runs = [order[i : i + 3] for i in range(0, 9, 3)]
    assert all(len(set(run)) == 1 for run in runs)  # the 3 copies are neighbours, so they share a batch
    assert len(set(order)) == 4  # ⌈10 / 3⌉ distinct images this epoch
    assert EpochSampler(10, seed=3, repeats=3).order().tolist() == order  # fixed by (seed, epoch)


def test_distributed_shards_cover_the_combined_order():
    whole = EpochSampler(10, seed=1).order()
    shards = [EpochSampler(10, seed=1, num_replicas=2, rank=r).order() for r in range(2)]
    assert sorted(torch.cat(shards).tolist()) == sorted(whole.tolist())
    # a step of 2 ranks with batch 2 covers the same images as a step of one process with batch 4
    assert sorted(torch.cat([s[:2] for s in shards]).tolist()) == sorted(whole[:4].tolist())


@pytest.fixture
def real_batch(mini_dir):
    from vitlab.data.idx import read_idx

    images = torch.from_numpy(read_idx(mini_dir / "train-images-idx3-ubyte.gz")[:16].copy())
    labels = torch.from_numpy(read_idx(mini_dir / "train-labels-idx1-ubyte.gz")[:16].copy()).long()
    return images[:, None].float() / 255, labels  # (16, 1, 28, 28) in [0, 1]


def test_randaugment_and_random_erasing_change_real_images(real_batch):
    images, _ = real_batch
    torch.manual_seed(0)
    out = rand_augment(2, 9)(images)
    assert out.shape == images.shape and out.dtype == images.dtype
    assert (out - images).abs().flatten(1).amax(1).gt(0).float().mean() > 0.5  # most images changed
    erased = random_erasing(1.0)(images)
    changed = (erased != images)[:, 0]  # (B, H, W)
    assert changed.flatten(1).any(1).all()  # p = 1: every image loses a box
    for mask in changed:  # ... and the changed pixels lie in one axis-aligned box
        rows, cols = mask.any(1).nonzero().flatten(), mask.any(0).nonzero().flatten()
        box = mask[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
        assert box.float().mean() > 0.9  # noise may equal the pixel by chance, rarely


@pytest.mark.parametrize("num_ops, magnitude", [(2, 9), (3, 30)])
def test_batched_randaugment_equals_torchvision_image_by_image(real_batch, num_ops, magnitude):
    # Same seed, same choices: each image as torchvision's v2.RandAugment makes it alone. Only Sharpness's
    # convolution rounds differently over a batch (1 ulp), hence the tolerance.
    gray, _ = real_batch
    colour = torch.rand(48, 3, 20, 24, generator=torch.Generator().manual_seed(1))  # Color acts, H != W
    reference = v2.RandAugment(num_ops=num_ops, magnitude=magnitude)
    for images in (gray, colour):
        for seed in range(3):
            torch.manual_seed(seed)
            expected = torch.stack([reference(image) for image in images])
            stream_after_reference = torch.random.get_rng_state()
            torch.manual_seed(seed)
            got = rand_augment(num_ops, magnitude)(images)
            torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
            assert torch.equal(torch.random.get_rng_state(), stream_after_reference)  # no draw more or less


def constant_images():
    """10 images, image b filled with the value b + 1 and labelled b: every pixel tells whose it is."""
    return torch.arange(1.0, 11.0).view(10, 1, 1, 1).expand(10, 1, 28, 28).clone(), torch.arange(10)


def test_mixup_is_a_convex_combination_with_matching_targets():
    images, labels = constant_images()
    torch.manual_seed(0)
    mixed, targets = mixup_cutmix(0.8, 0.0, 10)(images, labels)
    partner = labels.roll(1)  # torchvision pairs each image with its neighbour in the batch
    lam = targets[torch.arange(10), labels]
    torch.testing.assert_close(targets[torch.arange(10), partner], 1 - lam)
    torch.testing.assert_close(targets.sum(1), torch.ones(10))
    expected = lam.view(10, 1, 1, 1) * images + (1 - lam).view(10, 1, 1, 1) * images.roll(1, 0)
    torch.testing.assert_close(mixed, expected)


def test_cutmix_targets_equal_the_pasted_area():
    images, labels = constant_images()
    torch.manual_seed(1)
    mixed, targets = mixup_cutmix(0.0, 1.0, 10)(images, labels)
    partner = labels.roll(1)
    pasted = mixed == images.roll(1, 0)  # (10, 1, 28, 28): pixels that came from the partner
    share = pasted.flatten(1).float().mean(1)
    torch.testing.assert_close(targets[torch.arange(10), partner], share)
    torch.testing.assert_close(targets[torch.arange(10), labels], 1 - share)
    assert 0 < share[0] < 1


def test_mixup_cutmix_off_is_none():
    assert mixup_cutmix(0.0, 0.0, 10) is None
    with pytest.raises(ValueError, match="mixup and cutmix are Beta"):
        mixup_cutmix(-1.0, 0.0, 10)
