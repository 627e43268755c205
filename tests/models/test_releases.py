"""The releases the families list: each tag names a registered model whose preset the listing family's file
defines (DeiT's plain models are ViT configs, listed in deit.py), and `list_pretrained` finds them by pattern."""

import vitlab
from vitlab.models import registry
from vitlab.models.family import Release


def test_every_release_tag_is_a_registered_model_of_its_family_and_says_where_it_is():
    releases = vitlab.list_pretrained()
    assert len({r.tag for r in releases}) == len(releases) >= 13
    for release in releases:
        model, _, name = release.tag.partition(".")
        assert name and model in vitlab.list_models(), release.tag
        listing = [cls for cls in registry._CONFIG_TYPES.values() if release.tag in vars(cls).get("releases", {})]
        assert len(listing) == 1 and registry._PRESETS[model].__module__ == listing[0].__module__, release.tag
        assert release.source and release.format and release.licence and release.metric and release.dataset
        assert not release.sha256 or len(release.sha256) == 64 or (8 <= len(release.sha256) < 64 and not release.on_hub)
        int(release.sha256 or '0', 16)
        assert not release.revision or len(release.revision) == 40


def test_list_pretrained_filters_by_pattern():
    tags = [r.tag for r in vitlab.list_pretrained("deit_*distilled*")]
    assert tags == sorted(tags) and len(tags) == 3 and all("distilled" in t for t in tags)
    assert [r.tag for r in vitlab.list_pretrained("detr_resnet50.*")] == ["detr_resnet50.coco",
                                                                            "detr_resnet50.hf_coco"]
    assert vitlab.list_pretrained("no_such_model*") == []
    assert all(isinstance(r, Release) for r in vitlab.list_pretrained("vit_*"))
    # DeiT's config inherits ViT's, but lists its own releases only
    assert not [r for r in vitlab.list_pretrained("vit_*") if r.tag.startswith("deit")]
