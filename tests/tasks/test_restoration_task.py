"""The restoration task's parts: the contrastive term against its formula written out, the batches of one task
each, the photograph layouts, starting from a checkpoint by task name, the EDSR baseline and the do-nothing
baseline."""

import math

import numpy as np
import pytest
import torch
from PIL import Image

from vitlab.checkpoint import save_weights
from vitlab.data.degradations import baseline, bicubic_upscale
from vitlab.data.restoration import RestorationPatches, TaskBatchLoader
from vitlab.models import create_model
from vitlab.tasks.restoration.config import RestorationConfig, parse_degradations
from vitlab.tasks.restoration.task import find_photographs, load_start, supervised_contrastive


def test_contrastive_term_equals_its_formula():
    torch.manual_seed(0)
    features = torch.randn(6, 5)
    labels = torch.tensor([0, 1, 0, 2, 1, 0])  # item 3 has no positive: it is no anchor
    tau = 0.5
    z = features / features.norm(dim=1, keepdim=True)
    terms = []
    for i in range(6):
        positives = [p for p in range(6) if p != i and labels[p] == labels[i]]
        if not positives:
            continue
        denominator = sum(math.exp(float(z[i] @ z[a]) / tau) for a in range(6) if a != i)
        terms.append(-sum(math.log(math.exp(float(z[i] @ z[p]) / tau) / denominator) for p in positives)
                     / len(positives))
    assert supervised_contrastive(features, labels, tau).item() == pytest.approx(sum(terms) / len(terms), rel=1e-5)
    lonely = torch.randn(3, 5, requires_grad=True)
    loss = supervised_contrastive(lonely, torch.tensor([0, 1, 2]), tau)
    loss.backward()
    assert loss.item() == 0 and lonely.grad is not None


def test_batches_hold_one_task_each_in_turn_and_every_rank_gets_as_many():
    images = [torch.randint(0, 256, (3, 120, 130), dtype=torch.uint8) for _ in range(2)]
    patches = RestorationPatches(images, ("sr2", "denoise30", "derain"), patch=16, per_task=10, with_source=True)
    loader = TaskBatchLoader(patches, batch_size=3)
    batches = list(loader)
    assert len(batches) == len(loader) == 9  # 3 full batches of each task's 10
    assert [int(task[0]) for _, _, task, _ in batches] == [0, 1, 2] * 3
    for lq, hq, task, source in batches:
        assert (task == task[0]).all() and source.max() < 2
        assert lq.shape == (3, 3, 16, 16) and hq.shape[-1] == 16 * (2 if task[0] == 0 else 1)
    resumed = list(loader.batches_from(4))
    assert [int(b[2][0]) for b in resumed] == [int(b[2][0]) for b in batches[4:]]
    sizes = [len(TaskBatchLoader(patches, 3, rank=r, world_size=2)) for r in range(2)]
    counts = [len(list(TaskBatchLoader(patches, 3, rank=r, world_size=2).sampler)) for r in range(2)]
    assert sizes == counts == [4, 4]  # 9 batches: one is left out so that neither process waits on the other
    with pytest.raises(ValueError, match="patches_per_task"):
        TaskBatchLoader(patches, batch_size=11)


def test_degradation_lists_are_checked():
    assert parse_degradations("sr2, denoise30") == ("sr2", "denoise30")
    assert RestorationConfig().tasks == ("sr2", "sr3", "sr4", "derain", "denoise30", "denoise50")
    for bad, message in (("sr5", "unknown degradation"), ("sr2,sr2", "twice"), (",", "at least one")):
        with pytest.raises(ValueError, match=message):
            parse_degradations(bad)


def test_photograph_layouts(tmp_path):
    def picture(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8)).save(path)

    for name in ("train/a.png", "train/b.jpg", "val/c.png", "hr/d.png", "hr/e.png"):
        picture(tmp_path / name)
    train, val, test = find_photographs(str(tmp_path))
    assert [p.name for p in train] == ["a.png", "b.jpg"] and [p.name for p in val] == ["c.png"] and test is None
    picture(tmp_path / "test" / "f.png")
    train, val, test = find_photographs(str(tmp_path))
    assert [p.name for p in val] == ["c.png"] and [p.name for p in test] == ["f.png"]
    train, val, test = find_photographs(str(tmp_path / "hr"))
    assert [p.name for p in train] == ["d.png", "e.png"] and val is None and test is None
    _, _, test = find_photographs(str(tmp_path), eval_data=str(tmp_path / "hr"))
    assert [p.name for p in test] == ["d.png", "e.png"]
    with pytest.raises(FileNotFoundError, match="fetch-photos"):
        find_photographs(str(tmp_path / "missing"))


def test_starting_weights_are_matched_by_task_name(tmp_path):
    torch.manual_seed(0)
    source = create_model("ipt_small", degradations=("sr2", "denoise30"), num_layers=1, channels=8, num_heads=2)
    path = tmp_path / "start.safetensors"
    save_weights(source, path)
    target = create_model("ipt_small", degradations=("denoise30", "sr3"), num_layers=1, channels=8, num_heads=2)
    fresh_sr3 = {k: v.clone() for k, v in target.state_dict().items() if k.startswith(("head.1.", "tail.1."))}
    load_start(target, str(path))
    mine, theirs = target.state_dict(), source.state_dict()
    for key, value in theirs.items():
        if key.startswith(("head.1.", "tail.1.")):  # denoise30: their index 1, mine 0
            torch.testing.assert_close(mine[key.replace(".1.", ".0.", 1)], value)
        elif key.startswith("body.") and key != "body.query_embed":
            torch.testing.assert_close(mine[key], value)
    torch.testing.assert_close(mine["body.query_embed"][0], theirs["body.query_embed"][1])
    for key, value in fresh_sr3.items():  # sr3 is not in the file: it keeps its fresh weights
        torch.testing.assert_close(mine[key], value)
    other = create_model("ipt_small", degradations=("sr2",), num_layers=1, channels=16, num_heads=2)
    with pytest.raises(ValueError, match="no body"):
        load_start(other, str(path))


def test_edsr_baseline_heads_tails_and_tiling():
    torch.manual_seed(0)
    # without the global residual, whose zeroed tails would hide the tiles' edges this checks
    model = create_model("edsr_baseline", degradations=("sr2", "sr3", "denoise30"), num_blocks=2,
                         global_residual=False).eval()
    # by hand: head 3·64·9 + 64; 16 blocks of two 64·64·9 + 64 convolutions; the body's last one; the ×2 upsampler
    # 64·256·9 + 256; the last 64·3·9 + 3
    by_hand = (3 * 64 * 9 + 64) + 33 * (64 * 64 * 9 + 64) + (64 * 256 * 9 + 256) + (64 * 3 * 9 + 3)
    assert sum(p.numel() for p in create_model("edsr_baseline", degradations=("sr2",)).parameters()) == by_hand
    x = torch.rand(1, 3, 20, 27)
    for task, scale in (("sr2", 2), ("sr3", 3), ("denoise30", 1)):
        assert model(x, task).shape == (1, 3, 20 * scale, 27 * scale)
    torch.testing.assert_close(model.forward_chop(x, "sr2"), model(x, "sr2"))  # within one tile: one pass
    big = torch.rand(1, 3, 70, 90)
    tiled = model.forward_chop(big, "sr2", overlap=16, tile=64)  # tiles at rows 0 and 6, columns 0 and 26
    # each tile is a whole-model pass: at least 14 pixels from every tile's edge (7 convolutions see 7) they agree
    torch.testing.assert_close(tiled[..., 56:72, 80:100], model(big, "sr2")[..., 56:72, 80:100])
    assert not torch.allclose(tiled, model(big, "sr2"))  # near the tiles' edges the zero padding shows


def test_the_do_nothing_baseline_is_bicubic_for_sr_and_the_input_otherwise():
    image = torch.randint(0, 256, (3, 10, 14), dtype=torch.uint8)
    up = bicubic_upscale(image, 3)
    pil = Image.fromarray(image.permute(1, 2, 0).numpy()).resize((42, 30), Image.BICUBIC)
    assert torch.equal(up, torch.from_numpy(np.asarray(pil).copy()).permute(2, 0, 1))
    assert torch.equal(baseline(image, "sr3"), up) and torch.equal(baseline(image, "denoise50"), image)
