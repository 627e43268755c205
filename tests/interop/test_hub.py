"""Released weights by name, against a local Hugging Face Hub (tests/hub_server.py; nothing reaches the network):
release tags and hf-hub: names fetched once into the cache and read offline afterwards, pinned revisions, checksums
refused, interrupted downloads leaving nothing behind, errors that say what to do, and `vitlab download`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

import vitlab
from vitlab.cli.main import main
from vitlab.data.download import ChecksumError, DownloadError
from vitlab.interop import hub
from vitlab.models.family import Release
from vitlab.models.registry import list_families

from ..hub_publish import publish_timm, publish_transformers

REPO = "vitlab-test/vit-tiny-32"
TAG = "vit_tiny_patch16_224.local_test"
ARCH = {"img_size": 32, "num_classes": 10}


def add_release(monkeypatch, release: Release) -> Release:
    """List `release` (a ViT's) with the ViT family for the test (a family's releases are a class-level dict)."""
    family = next(f for f in list_families() if f.family == "vit")
    monkeypatch.setitem(vars(family)["releases"], release.tag, release)
    return release


def timm_model(repo_id: str, hub_server, revision: str = "main") -> torch.nn.Module:
    """The timm model as published, read back from the hub's bytes (the reference the loaded weights must equal)."""
    import timm
    from safetensors.torch import load

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, **ARCH).eval()
    model.load_state_dict(load(hub_server.file(repo_id, "model.safetensors", revision)))
    return model


def test_a_release_is_downloaded_once_then_loaded_offline_with_the_published_weights(local_hub, monkeypatch):
    torch.manual_seed(0)
    sha = publish_timm(local_hub, REPO, "vit_tiny_patch16_224", **ARCH)
    add_release(monkeypatch, Release(TAG, REPO, "timm", "model.safetensors", revision=sha, licence="test",
                                     metric={"top1": 1.0}, dataset="none", overrides=ARCH))
    model = vitlab.create_model("vit_tiny_patch16_224", pretrained="local_test").eval()
    reference = timm_model(REPO, local_hub)
    image = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model(image), reference(image), atol=1e-5, rtol=1e-5)
    assert any(method == "GET" and path.endswith("/model.safetensors") for method, path in local_hub.requests)

    local_hub.clear_log()
    again = vitlab.create_model(TAG, pretrained=True).eval()  # the tag as the name, as timm takes it
    assert local_hub.requests == []  # a pinned revision in the cache: not even a HEAD
    local_hub.offline()
    offline = vitlab.create_model("vit_tiny_patch16_224", pretrained="local_test").eval()
    assert local_hub.requests == []
    for loaded in (again, offline):
        torch.testing.assert_close(loaded(image), reference(image), atol=1e-5, rtol=1e-5)


def test_pretrained_true_is_the_first_listed_release_and_fine_tuning_keeps_all_but_the_head(local_hub, monkeypatch):
    torch.manual_seed(0)
    sha = publish_timm(local_hub, REPO, "vit_tiny_patch16_224", **ARCH)
    release = Release(TAG, REPO, "timm", "model.safetensors", revision=sha, licence="test", metric={"top1": 1.0},
                      dataset="none", overrides=ARCH)
    family = next(f for f in list_families() if f.family == "vit")
    monkeypatch.setattr(family, "releases", {TAG: release, **vars(family)["releases"]})  # first: the default
    assert hub.default_release("vit_tiny_patch16_224") is release
    with pytest.warns(UserWarning, match="head has 10 classes, the model 3"):
        model = vitlab.create_model("vit_tiny_patch16_224", pretrained=True, num_classes=3)
    reference = timm_model(REPO, local_hub).state_dict()
    changed = {k for k, v in model.state_dict().items() if v.shape != reference[k].shape
               or not torch.equal(v, reference[k])}
    assert changed == {"head.weight", "head.bias"}


def test_hf_hub_names_take_a_revision_and_read_the_repos_own_config(local_hub, tmp_path):
    torch.manual_seed(0)
    old = publish_timm(local_hub, REPO, "vit_tiny_patch16_224", **ARCH)
    publish_timm(local_hub, REPO, "vit_tiny_patch16_224", **ARCH)  # main moves on
    assert local_hub.file(REPO, "model.safetensors", old) != local_hub.file(REPO, "model.safetensors")
    image = torch.randn(1, 3, 32, 32)
    for revision, name in ((old, f"hf-hub:{REPO}@{old}"), ("main", f"hf-hub:{REPO}")):
        model = vitlab.create_model("vit_tiny_patch16_224", weights=name, **ARCH).eval()
        torch.testing.assert_close(model(image), timm_model(REPO, local_hub, revision)(image), atol=1e-5, rtol=1e-5)
    # convert reads the architecture from the repo's config.json (timm's names the model)
    assert main(["convert", f"hf-hub:{REPO}@{old}", str(tmp_path / "vit.safetensors")]) == 0
    converted = vitlab.load_weights(vitlab.create_model("vit_tiny_patch16_224", **ARCH), tmp_path / "vit.safetensors")
    torch.testing.assert_close(converted.eval()(image), timm_model(REPO, local_hub, old)(image), atol=1e-5,
                               rtol=1e-5)


def test_a_transformers_repo_by_hf_hub_name(local_hub):
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
                       intermediate_size=192, num_labels=4)
    reference = ViTForImageClassification(config).eval()
    publish_transformers(local_hub, "vitlab-test/hf-vit", reference)
    model = vitlab.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, dim=48, depth=2, num_heads=3,
                                num_classes=4, weights="hf-hub:vitlab-test/hf-vit").eval()
    image = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model(image), reference(pixel_values=image).logits, atol=1e-4, rtol=1e-4)


def test_offline_and_not_cached_says_which_download_to_run(local_hub, monkeypatch):
    add_release(monkeypatch, Release(TAG, REPO, "timm", "model.safetensors", licence="test", metric={"top1": 1.0},
                                     dataset="none", overrides=ARCH))
    local_hub.offline()
    with pytest.raises(hub.OfflineError, match=f"vitlab download {TAG}"):
        vitlab.create_model(TAG, pretrained=True)
    with pytest.raises(hub.OfflineError, match=f"vitlab download hf-hub:{REPO}"):
        hub.fetch(f"hf-hub:{REPO}")
    assert local_hub.requests == []


def test_a_hub_file_whose_sha256_differs_is_refused_and_removed(local_hub, monkeypatch):
    sha = local_hub.publish(REPO, {"model.safetensors": b"not the release's bytes" * 1000})
    add_release(monkeypatch, Release(TAG, REPO, "timm", "model.safetensors", revision=sha, sha256="0" * 64,
                                     licence="test", metric={"top1": 1.0}, dataset="none"))
    with pytest.raises(ChecksumError, match="removed"):
        hub.fetch(TAG)
    assert not [p for p in local_hub.cache.rglob("model.safetensors")]  # the snapshot's link is gone
    assert not [p for p in local_hub.cache.rglob("blobs/*") if p.is_file()]


def url_release(local_hub, monkeypatch, data: bytes, sha256: str) -> Release:
    url = local_hub.serve_url("/releases/vit-tiny-0123abcd.pth", data)
    return add_release(monkeypatch, Release(TAG, url, "timm", "vit-tiny-0123abcd.pth", sha256=sha256,
                                            licence="test", metric={"top1": 1.0}, dataset="none", overrides=ARCH))


def test_a_url_release_is_checked_kept_in_the_hub_cache_and_read_offline(local_hub, monkeypatch, tmp_path):
    torch.manual_seed(0)
    source = vitlab.create_model("vit_tiny_patch16_224", **ARCH)
    torch.save(source.state_dict(), tmp_path / "file.pth")
    data = (tmp_path / "file.pth").read_bytes()
    url_release(local_hub, monkeypatch, data, hashlib.sha256(data).hexdigest()[:8])  # torch.hub's prefix
    path = hub.fetch(TAG)
    assert path.read_bytes() == data and local_hub.cache in path.parents
    local_hub.clear_log()
    local_hub.offline()
    model = vitlab.create_model(TAG, pretrained=True)
    assert local_hub.requests == []
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in model.state_dict().items())


def test_a_url_release_with_another_checksum_or_cut_short_leaves_nothing(local_hub, monkeypatch):
    data = b"x" * 50_000
    url_release(local_hub, monkeypatch, data, "deadbeef")
    with pytest.raises(ChecksumError, match="deleted"):
        hub.fetch(TAG)
    folder = local_hub.cache / hub.URL_CACHE_FOLDER / TAG
    assert not any(p.is_file() for p in folder.rglob("*"))
    url_release(local_hub, monkeypatch, data, hashlib.sha256(data).hexdigest())
    local_hub.cut("vit-tiny-0123abcd.pth", after_bytes=10_000)
    with pytest.raises(DownloadError):
        hub.fetch(TAG)
    assert not any(p.is_file() for p in folder.rglob("*"))
    assert hub.fetch(TAG).read_bytes() == data  # the retry


def test_a_hub_download_cut_short_is_a_download_error_and_leaves_no_file(local_hub, no_retry_wait):
    local_hub.publish(REPO, {"model.safetensors": b"w" * 300_000})
    local_hub.cut("model.safetensors", after_bytes=100_000, times=None)
    with pytest.raises(DownloadError, match="retry"):
        hub.fetch(f"hf-hub:{REPO}")
    assert not [p for p in local_hub.cache.rglob("model.safetensors")]
    local_hub.uncut()
    assert hub.fetch(f"hf-hub:{REPO}").read_bytes() == b"w" * 300_000


def test_unknown_names_say_what_is_close():
    with pytest.raises(hub.UnknownReleaseError, match=r"did you mean detr_resnet50\.coco"):
        vitlab.create_model("detr_resnet50", pretrained="cocoo")
    with pytest.raises(hub.UnknownReleaseError, match="did you mean"):
        hub.fetch("vit_base_patch16_224.augreg2_in21k_ft_in1")
    with pytest.raises(hub.UnknownReleaseError, match="has no released weights"):
        vitlab.create_model("vit_tiny_patch4_28", pretrained=True)
    with pytest.raises(FileNotFoundError, match="release tag"):
        vitlab.load_weights(vitlab.create_model("vit_tiny_patch4_28"), "no/such/file.safetensors")
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at vit_tiny_patch4_28\.safetensors"):
        vitlab.load_weights(vitlab.create_model("vit_tiny_patch4_28"), "vit_tiny_patch4_28.safetensors")
    with pytest.raises(ValueError, match="is for detr_resnet50"):
        vitlab.create_model("vit_tiny_patch16_224", pretrained="detr_resnet50.coco")


def test_every_listed_release_resolves_to_its_file_on_the_hub(local_hub):
    """Each hub release's request goes to its repo, file and pinned revision; a release with a sha256 is then
    checked (the stand-in bytes here are not the release's, so it is refused: the check ran on that file)."""
    for release in vitlab.list_pretrained():
        if not release.on_hub:
            continue
        local_hub.publish(release.source, {release.filename: release.tag.encode() * 100}, sha=release.revision or None)
        if release.sha256:
            with pytest.raises(ChecksumError, match=release.tag):
                hub.fetch(release.tag)
        else:
            path = hub.fetch(release.tag)
            assert path.read_bytes() == release.tag.encode() * 100 and path.name == Path(release.filename).name
            assert not release.revision or release.revision in path.parts  # the snapshot of the pinned commit


def test_vitlab_download_fetches_ahead_and_copies_to_a_folder_for_an_offline_machine(local_hub, monkeypatch,
                                                                                   tmp_path, capsys):
    torch.manual_seed(0)
    sha = publish_timm(local_hub, REPO, "vit_tiny_patch16_224", **ARCH)
    add_release(monkeypatch, Release(TAG, REPO, "timm", "model.safetensors", revision=sha, licence="test",
                                     metric={"top1": 1.0}, dataset="none", overrides=ARCH))
    assert main(["download", TAG, f"hf-hub:{REPO}", "--to", str(tmp_path / "carry")]) == 0
    printed = capsys.readouterr().out
    copied = tmp_path / "carry" / TAG / "model.safetensors"
    assert copied.is_file() and (tmp_path / "carry" / TAG / "config.json").is_file() and str(copied) in printed
    local_hub.clear_log()
    assert main(["--offline", "download", TAG]) == 0  # in the cache now: offline finds it
    assert local_hub.requests == []
    model = vitlab.create_model("vit_tiny_patch16_224", weights=copied, **ARCH).eval()
    image = torch.randn(1, 3, 32, 32)
    torch.testing.assert_close(model(image), timm_model(REPO, local_hub)(image), atol=1e-5, rtol=1e-5)


def test_models_pretrained_lists_every_release_with_its_figure(capsys):
    assert main(["models", "--pretrained"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for release in vitlab.list_pretrained():
        at = next(i for i, line in enumerate(lines) if line.startswith(release.tag + " "))
        shown = "\n".join(lines[at:at + 3])
        assert (release.dataset in shown and all(f"{k} {v}" in shown for k, v in release.metric.items())
                if release.metric else "note: " + release.note in shown), release.tag
    assert main(["models", "--pretrained", "detr"]) == 0
    assert {line.split()[0] for line in capsys.readouterr().out.splitlines()[1:-1] if not line.startswith(" ")} \
        == {r.tag for r in vitlab.list_pretrained("detr*")}


def test_a_release_that_needs_a_browser_says_so_before_any_request(local_hub):
    release = vitlab.list_pretrained("ipt_base.pretrain")[0]
    with pytest.raises(DownloadError, match="needs a browser") as error:
        hub.fetch(release.tag)
    assert release.source in str(error.value) and local_hub.requests == []


def test_a_release_names_its_classes_where_its_head_is_the_releases(local_hub, monkeypatch, tmp_path):
    """A release's labels (Release.labels) come with its model, by create_model and by conversion; a head for other
    classes has no names (the release's would be wrong), and names that do not fit the file's head are not used."""
    from vitlab.interop import load_model

    torch.manual_seed(0)
    sha = publish_timm(local_hub, REPO, "vit_tiny_patch16_224", **ARCH)
    names = tuple(f"class {i}" for i in range(10))
    add_release(monkeypatch, Release(TAG, REPO, "timm", "model.safetensors", revision=sha, licence="test",
                                     metric={"top1": 1.0}, dataset="none", overrides=ARCH, labels=lambda: names))
    assert vitlab.create_model(TAG, pretrained=True).config.labels == names
    fine_tuned = vitlab.create_model("vit_tiny_patch16_224", pretrained="local_test", num_classes=5)
    assert fine_tuned.config.num_classes == 5 and fine_tuned.config.labels == ()
    assert main(["convert", TAG, str(tmp_path / "converted.safetensors")]) == 0
    assert load_model(tmp_path / "converted.safetensors").config.labels == names  # written with the weights
    add_release(monkeypatch, Release(TAG, REPO, "timm", "model.safetensors", revision=sha, licence="test",
                                     metric={"top1": 1.0}, dataset="none", overrides=ARCH, labels=lambda: names[:3]))
    assert vitlab.create_model(TAG, pretrained=True).config.labels == ()  # 3 names for 10 classes: not these


def test_the_known_label_sets_are_imagenet_1k_and_cocos_91_slots():
    """ImageNet-1k's names in the head's order, as timm's own label table has them (each of torchvision's names is
    one of the lemmas timm lists for the same index); COCO's 91 slots with "N/A" at id 0 and its ten unused ids."""
    from timm.data import ImageNetInfo

    from vitlab.models.labels import coco_91, imagenet_1k

    names = imagenet_1k()
    lemmas = ImageNetInfo().label_descriptions()  # "tench, Tinca tinca", ... by index
    assert len(names) == len(lemmas) == 1000
    misses = [i for i, (name, lemma) in enumerate(zip(names, lemmas))
              if name.lower() not in [part.strip().lower() for part in lemma.split(",")]]
    assert len(misses) < 50, misses[:10]  # torchvision renamed a few duplicates ("crane" the bird and the machine)
    coco = coco_91()
    assert len(coco) == 91 and [i for i, name in enumerate(coco) if name == "N/A"] == [
        0, 12, 26, 29, 30, 45, 66, 68, 69, 71, 83]  # the ids COCO 2017 leaves unused, and slot 0
    assert (coco[1], coco[18], coco[90]) == ("person", "dog", "toothbrush")


def test_a_hugging_face_checkpoint_brings_its_id2label_and_never_placeholders(local_hub, tmp_path):
    """transformers' id2label is read as the model's labels (the converted file keeps them); its LABEL_0, LABEL_1
    defaults name nothing and give none."""
    from transformers import ViTConfig, ViTForImageClassification

    from vitlab.interop import load_model, model_from_checkpoint

    torch.manual_seed(0)
    arch = dict(image_size=32, patch_size=8, hidden_size=48, num_hidden_layers=1, num_attention_heads=3,
                intermediate_size=96)
    named = ViTConfig(**arch, id2label={0: "cat", 1: "dog", 2: "bird"}, label2id={"cat": 0, "dog": 1, "bird": 2})
    publish_transformers(local_hub, "vitlab-test/hf-vit-named", ViTForImageClassification(named).eval())
    model = model_from_checkpoint("hf-hub:vitlab-test/hf-vit-named")
    assert (model.config.num_classes, model.config.labels) == (3, ("cat", "dog", "bird"))
    assert main(["convert", "hf-hub:vitlab-test/hf-vit-named", str(tmp_path / "named.safetensors")]) == 0
    assert load_model(tmp_path / "named.safetensors").config.labels == ("cat", "dog", "bird")
    publish_transformers(local_hub, "vitlab-test/hf-vit-unnamed", ViTForImageClassification(
        ViTConfig(**arch, num_labels=3)).eval())
    assert model_from_checkpoint("hf-hub:vitlab-test/hf-vit-unnamed").config.labels == ()
