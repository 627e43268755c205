"""Fine-tuning from a release, task by task: `--weights TAG` (served by the local Hub) builds the release's model
where --model is not given, and the model the run starts from equals the release everywhere except what the new
data requires, which equals a fresh model's own initialisation. Each test checks exactly which tensors changed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

import vitlab
from vitlab.checkpoint import save_weights
from vitlab.cli.main import main
from vitlab.models.family import Release
from vitlab.models.registry import list_families
from vitlab.tasks.launch import get_task, loop_config

from ..hub_publish import publish_timm

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "fashion-mnist-mini"


def list_release(monkeypatch, family: str, tag: str, repo: str, sha: str, fmt: str = "vitlab", **overrides) -> None:
    listing = vars(next(f for f in list_families() if f.family == family))["releases"]
    monkeypatch.setitem(listing, tag, Release(tag, repo, fmt, "model.safetensors", revision=sha, licence="test",
                                              metric={"score": 1.0}, dataset="none", overrides=overrides))


def publish_vitlab(local_hub, folder, model, repo: str) -> str:
    path = save_weights(model, folder / "model.safetensors")
    return local_hub.publish(repo, {"model.safetensors": path})


def start(task_name: str, **options):
    """The model a training run of `task_name` starts from: what `vitlab train` builds before its first step."""
    cls = get_task(task_name)
    config = cls.Config(**options)
    task = cls(config, loop_config(cls, config, {"seed": 0}))
    task.build_data()
    torch.manual_seed(0)
    return task.build_model(), task


def two_releases(local_hub, monkeypatch, tmp_path, family: str, model: str, **arch) -> list[tuple[str, dict]]:
    """Two releases of one architecture with different weights, listed as `<model>.a` and `<model>.b`: what a run
    re-initialises must not depend on which it starts from, what it keeps must be that release's."""
    releases = []
    for seed, name in ((1, "a"), (2, "b")):
        torch.manual_seed(seed)
        weights = vitlab.create_model(model, **arch)
        sha = publish_vitlab(local_hub, tmp_path / name, weights, f"vitlab-test/{model}-{name}")
        overrides = {k: v for k, v in arch.items() if k != "num_classes"}
        list_release(monkeypatch, family, f"{model}.{name}", f"vitlab-test/{model}-{name}", sha, **overrides)
        releases.append((f"{model}.{name}", weights.state_dict()))
    return releases


def changed_by_fine_tuning(task_name: str, releases, partly: tuple[str, ...] = (), **options) -> set[str]:
    """The tensors the run's starting model does not take from its release; checked to be the same fresh values
    whichever release it starts from (but those `partly` taken, a table with rows of both kinds)."""
    (tag_a, release_a), (tag_b, release_b) = releases
    (tuned_a, _), (tuned_b, _) = start(task_name, weights=tag_a, **options), start(task_name, weights=tag_b, **options)
    changed = differing(tuned_a.state_dict(), release_a)
    assert changed == differing(tuned_b.state_dict(), release_b)
    assert not differing({k: tuned_a.state_dict()[k] for k in changed if k not in partly}, tuned_b.state_dict())
    return changed


def differing(a: dict, b: dict) -> set[str]:
    return {k for k in a if k not in b or a[k].shape != b[k].shape or not torch.equal(a[k], b[k])}


def test_a_classifier_fine_tuned_from_a_hub_repo_gets_the_release_learning_rate_and_one_from_a_file_does_not(
        local_hub, tmp_path):
    from vitlab.interop.hub import fetch
    from vitlab.tasks.classification import ClassificationTask
    from vitlab.tasks.classification.recipes import FASHION_MNIST

    torch.manual_seed(1)
    sha = publish_timm(local_hub, "vitlab-test/vit-mini", "vit_tiny_patch16_224", img_size=28, num_classes=10)
    common = {"data": "fashion-mnist", "model": "vit_tiny_patch16_224"}
    by_name = ClassificationTask.loop_defaults(
        ClassificationTask.Config(weights=f"hf-hub:vitlab-test/vit-mini@{sha}", **common))
    from_file = ClassificationTask.loop_defaults(ClassificationTask.Config(
        weights=str(fetch(f"hf-hub:vitlab-test/vit-mini@{sha}")), **common))
    assert by_name["lr"] == 1e-4 and from_file["lr"] == FASHION_MNIST["loop"]["lr"]


def test_classification_keeps_all_but_the_head_and_adapts_the_input_to_grey_images(local_hub, monkeypatch):
    torch.manual_seed(1)
    sha = publish_timm(local_hub, "vitlab-test/vit-tiny", "vit_tiny_patch16_224", img_size=32, num_classes=7)
    list_release(monkeypatch, "vit", "vit_tiny_patch16_224.test", "vitlab-test/vit-tiny", sha, "timm", img_size=32)
    tuned, task = start("classification", weights="vit_tiny_patch16_224.test", data="fashion-mnist",
                        data_dir=str(MINI), allow_partial_data=True)
    assert task.config.model == "vit_tiny_patch16_224" and task.config.img_size == 32  # the release's, not 28
    assert task.loop.lr == 1e-4
    from safetensors.torch import load

    release = load(local_hub.file("vitlab-test/vit-tiny", "model.safetensors"))
    state = tuned.state_dict()
    assert differing(state, release) == {"patch_embed.proj.weight", "head.weight", "head.bias"}
    torch.testing.assert_close(state["patch_embed.proj.weight"],
                               release["patch_embed.proj.weight"].sum(1, keepdim=True))  # grey = R + G + B
    assert state["head.weight"].shape[0] == 10 and release["head.weight"].shape[0] == 7


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    out = tmp_path_factory.mktemp("scenes") / "set"
    assert main(["make-scenes", "--out", str(out), "--train", "6", "--val", "2", "--test", "2", "--size", "64",
                 "--scale", "16-32", "--objects", "1-2", "--data-dir", str(MINI), "--allow-partial-data"]) == 0
    return out


@pytest.mark.parametrize("model, overrides", [("detr_small", {}),
                                              ("deformable_detr_small", {"with_box_refine": True, "two_stage": True})])
def test_detection_keeps_backbone_transformer_and_queries_and_starts_new_class_heads(local_hub, monkeypatch, tmp_path,
                                                                                     scenes, model, overrides):
    family = vitlab.get_config(model).family
    releases = two_releases(local_hub, monkeypatch, tmp_path, family, model, num_classes=91, **overrides)
    changed = changed_by_fine_tuning("detection", releases, data=str(scenes))
    assert changed and changed == {k for k in releases[0][1] if k.startswith("class_embed.")}
    tuned, task = start("detection", weights=releases[0][0], data=str(scenes))
    assert task.config.model == model and getattr(tuned, "two_stage", False) == bool(overrides)
    assert tuned.num_classes == task.train_set.num_classes


def test_segmentation_keeps_the_encoder_and_decoder_and_starts_new_classifiers(local_hub, monkeypatch, tmp_path,
                                                                               scenes):
    releases = two_releases(local_hub, monkeypatch, tmp_path, "setr", "setr_pup_small", num_classes=5, img_size=64)
    changed = changed_by_fine_tuning("segmentation", releases, data=str(scenes))
    tuned, task = start("segmentation", weights=releases[0][0], data=str(scenes))
    assert task.crop_size() == 64  # the release's crop
    assert changed and all(k.startswith(("decode_head.", "auxiliary_head.")) for k in changed)
    assert all(tuned.state_dict()[k].shape[0] == task.train_set.num_classes for k in changed)  # the classifiers only


def test_restoration_keeps_the_body_and_the_heads_of_tasks_it_knows_and_starts_new_ones(local_hub, monkeypatch,
                                                                                        tmp_path):
    photos = tmp_path / "photos"
    generator = torch.Generator().manual_seed(0)
    for split, count in (("train", 3), ("test", 1)):
        (photos / split).mkdir(parents=True)
        for i in range(count):
            pixels = (torch.rand(200, 200, 3, generator=generator) * 255).byte().numpy()
            Image.fromarray(pixels).save(photos / split / f"{i}.png")
    releases = two_releases(local_hub, monkeypatch, tmp_path, "ipt", "ipt_small", degradations=("sr2", "denoise30"))
    # without the global residual, whose new tails would start at zero in both fine-tunings alike
    options = {"data": str(photos), "degradations": "sr2,derain", "global_residual": False}
    changed = changed_by_fine_tuning("restoration", releases, partly=("body.query_embed",), **options)
    # derain's head, tail and task embedding are new; sr2's and the body are the release's
    assert changed == {k for k in releases[0][1] if k.startswith(("head.1.", "tail.1."))} | {"body.query_embed"}
    tuned_a, tuned_b = (start("restoration", weights=tag, **options)[0].state_dict()["body.query_embed"]
                        for tag, _ in releases)
    assert torch.equal(tuned_a[0], releases[0][1]["body.query_embed"][0])  # sr2's, from the release
    assert torch.equal(tuned_a[1], tuned_b[1]) and not torch.equal(tuned_a[1], releases[0][1]["body.query_embed"][1])


def test_generation_keeps_the_whole_vqgan_and_its_codebook(local_hub, monkeypatch, tmp_path):
    releases = two_releases(local_hub, monkeypatch, tmp_path, "vqgan", "vqgan_small")
    options = {"data": "fashion-mnist", "data_dir": str(MINI), "allow_partial_data": True}
    assert changed_by_fine_tuning("vqgan", releases, **options) == set()
    assert start("vqgan", weights=releases[0][0], **options)[1].config.model == "vqgan_small"


def test_train_fine_tunes_a_detector_from_a_tag_in_one_command(local_hub, monkeypatch, tmp_path, scenes):
    torch.manual_seed(1)
    sha = publish_vitlab(local_hub, tmp_path, vitlab.create_model("detr_small", num_classes=91), "vitlab-test/detr")
    list_release(monkeypatch, "detr", "detr_small.test", "vitlab-test/detr", sha)
    out = tmp_path / "run"
    assert main(["train", "--task", "detection", "--weights", "detr_small.test", "--data", str(scenes), "--out",
                 str(out), "--steps", "2", "--batch-size", "2", "--eval-batch-size", "2"]) == 0
    import json

    saved = json.loads((out / "config.json").read_text())
    assert saved["config"]["weights"] == "detr_small.test" and saved["config"]["model"] == "detr_small"
    local_hub.offline()  # resuming or evaluating later needs no network: the release is in the cache
    assert main(["eval", str(out)]) == 0
