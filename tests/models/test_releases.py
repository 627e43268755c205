"""The releases the families list: each tag names a registered model whose preset the listing family's file
defines (DeiT's plain models are ViT configs, listed in deit.py), and `list_pretrained` finds them by pattern.

Each release's model, `create_model(release.model, **release.overrides)`, must be the architecture of the release's
file. Nothing is downloaded: the reference libraries build the released architecture (on the meta device, so at
full size for free), and its state dict must convert, key for key and shape for shape, into the model; where a
file of that size is cheap to write (zeros), it is written in the release's layout and loaded with
`vitlab.load_weights`, which must neither replace nor resample anything (no warning), and must read it as the
release's format. SETR's and IPT's layouts have no installed library: SETR's releases are checked against the
official configs' sizes, IPT's against the official module layout written in tests/interop/test_ipt_formats.py.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from safetensors.torch import save_file

import vitlab
from vitlab.interop.converters import converter_for
from vitlab.interop.formats import read_checkpoint
from vitlab.models import registry
from vitlab.models.family import Release

RELEASES = {r.tag: r for r in vitlab.list_pretrained()}


def test_every_release_tag_is_a_registered_model_of_its_family_and_says_where_it_is():
    releases = vitlab.list_pretrained()
    assert len({r.tag for r in releases}) == len(releases) >= 43
    for release in releases:
        model, _, name = release.tag.partition(".")
        assert name and model in vitlab.list_models(), release.tag
        listing = [cls for cls in registry.FAMILIES.values() if release.tag in vars(cls).get("releases", {})]
        assert len(listing) == 1 and registry.PRESETS[model].__module__ == listing[0].__module__, release.tag
        assert release.source and release.format and release.licence
        # a figure and what it was measured on, or a note that says why there is none
        assert (release.metric and release.dataset) or (not release.metric and release.note), release.tag
        assert not release.sha256 or len(release.sha256) == 64 or (8 <= len(release.sha256) < 64 and not release.on_hub)
        int(release.sha256 or '0', 16)
        assert not release.revision or len(release.revision) == 40
        assert release.on_hub or release.source.startswith("https://"), release.tag


def test_list_pretrained_filters_by_pattern():
    tags = [r.tag for r in vitlab.list_pretrained("deit_*distilled*")]
    assert tags == sorted(tags) and len(tags) == 3 and all("distilled" in t for t in tags)
    assert [r.tag for r in vitlab.list_pretrained("detr_resnet50.*")] == ["detr_resnet50.coco",
                                                                            "detr_resnet50.hf_coco"]
    assert [r.tag for r in vitlab.list_pretrained("detr_resnet101.*")] == ["detr_resnet101.coco",
                                                                             "detr_resnet101.hf_coco"]
    assert vitlab.list_pretrained("no_such_model*") == []
    assert all(isinstance(r, Release) for r in vitlab.list_pretrained("vit_*"))
    # DeiT's config inherits ViT's, but lists its own releases only
    assert not [r for r in vitlab.list_pretrained("vit_*") if r.tag.startswith("deit")]


def test_a_models_first_release_is_its_default():
    defaults = {}
    for family in registry.list_families():
        for release in vars(family).get("releases", {}).values():
            defaults.setdefault(release.model, release.tag)
    assert defaults["detr_resnet101"] == "detr_resnet101.coco"
    assert defaults["deformable_detr_resnet50"] == "deformable_detr_resnet50.coco"
    assert defaults["setr_pup_vit_large_patch16_384"] == "setr_pup_vit_large_patch16_384.cityscapes_80k"
    assert defaults["ipt_base"] == "ipt_base.pretrain"
    assert not RELEASES[defaults["deformable_detr_resnet50"]].overrides
    assert not RELEASES[defaults["ipt_base"]].overrides


@pytest.mark.parametrize("tag", sorted(RELEASES))
def test_every_release_builds_with_its_overrides(tag):
    release = RELEASES[tag]
    with torch.device("meta"):  # the full size, allocating nothing
        model = vitlab.create_model(release.model, **release.overrides)
    assert sum(p.numel() for p in model.parameters()) > 0
    for field, value in release.overrides.items():
        assert getattr(model.config, field) == value, (tag, field)


# ---- the releases' own architectures, from the reference libraries ------------------------------------------------
def meta_state(module_factory) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        return module_factory().state_dict()


def assert_converts_into(release: Release, state: dict[str, torch.Tensor], hf_config: dict | None = None) -> None:
    """`state` (another library's layout, any device) is claimed by a converter that names it the release's format,
    and converts into `create_model(release.model, **release.overrides)` key for key, shape for shape."""
    converter = converter_for(state, hf_config, release.tag)
    assert converter is not None, release.tag
    assert converter.source(state, hf_config) == release.format
    converted = converter.convert(state, hf_config)
    with torch.device("meta"):
        target = vitlab.create_model(release.model, **release.overrides).state_dict()
    assert sorted(set(target) - set(converted)) == [] and sorted(set(converted) - set(target)) == [], release.tag
    assert [k for k in target if converted[k].shape != target[k].shape] == [], release.tag


def zeros(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: torch.zeros(value.shape, dtype=value.dtype) for key, value in state.items()}


def assert_loads(release: Release, path) -> None:
    """The file at `path` loads into the release's model with nothing adapted, and reads as the release's format."""
    model = vitlab.create_model(release.model, **release.overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a replaced head or a resampled position table warns
        vitlab.load_weights(model, path)
    assert read_checkpoint(path)[1].format == release.format


def hf_folder(tmp_path, state, config: dict, weights: str = "model.safetensors"):
    folder = tmp_path / "hf"
    folder.mkdir()
    if weights.endswith(".safetensors"):
        save_file(zeros(state), folder / weights)
    else:
        torch.save(zeros(state), folder / weights)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_detr_r101_releases_are_the_official_and_the_transformers_architecture(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("timm")
    # facebook/detr-resnet-101: timm's ResNet-101, C5, 91 labels, the paper's transformer
    config = transformers.DetrConfig(use_timm_backbone=True, backbone="resnet101", use_pretrained_backbone=False,
                                     num_labels=91)
    state = meta_state(lambda: transformers.DetrForObjectDetection(config))
    release = RELEASES["detr_resnet101.hf_coco"]
    assert_converts_into(release, state)
    assert_loads(release, hf_folder(tmp_path, state, config.to_dict()))

    # detr-r101-2c7b67e5.pth: the official code's modules (the `detr` package), {"model": state}
    from .detr_reference import official

    m = official()
    torchvision = pytest.importorskip("torchvision")

    def official_r101():
        resnet = torchvision.models.resnet101(weights=None, norm_layer=m["backbone"].FrozenBatchNorm2d)
        body = m["backbone"].BackboneBase(resnet, train_backbone=True, num_channels=2048, return_interm_layers=False)
        joiner = m["backbone"].Joiner(body, m["position_encoding"].PositionEmbeddingSine(128, normalize=True))
        joiner.num_channels = 2048
        transformer = m["transformer"].Transformer(d_model=256, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                                                   dim_feedforward=2048, return_intermediate_dec=True)
        return m["detr"].DETR(joiner, transformer, num_classes=91, num_queries=100, aux_loss=True)

    assert_converts_into(RELEASES["detr_resnet101.coco"], meta_state(official_r101))


@pytest.mark.parametrize("tag, options", [
    ("deformable_detr_resnet50.coco", {}),
    ("deformable_detr_resnet50.coco_box_refine", {"with_box_refine": True}),
    ("deformable_detr_resnet50.coco_two_stage", {"with_box_refine": True, "two_stage": True}),
])
def test_deformable_detr_releases_are_sensetimes_transformers_architectures(tmp_path, tag, options):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("timm")
    # SenseTime/deformable-detr*: transformers' defaults (the paper's sizes) on timm's ResNet-50, 91 labels
    config = transformers.DeformableDetrConfig(use_timm_backbone=True, backbone="resnet50",
                                               use_pretrained_backbone=False, num_labels=91, **options)
    state = meta_state(lambda: transformers.DeformableDetrForObjectDetection(config))
    assert_converts_into(RELEASES[tag], state, config.to_dict())
    assert_loads(RELEASES[tag], hf_folder(tmp_path, state, config.to_dict()))


def test_the_diffusers_vq_release_is_ldm_celebahq_256s_vqvae(tmp_path):
    diffusers = pytest.importorskip("diffusers")
    # CompVis/ldm-celebahq-256's vqvae/config.json (03978f2), as the Hugging Face page shows it
    config = {"act_fn": "silu", "block_out_channels": [128, 256, 512], "down_block_types": ["DownEncoderBlock2D"] * 3,
              "in_channels": 3, "latent_channels": 3, "layers_per_block": 2, "num_vq_embeddings": 8192,
              "out_channels": 3, "sample_size": 256, "up_block_types": ["UpDecoderBlock2D"] * 3}
    state = meta_state(lambda: diffusers.VQModel(**config))
    release = RELEASES["vqgan_f4_ldm.hf_celebahq"]
    assert_converts_into(release, state)
    folder = hf_folder(tmp_path, state, {"_class_name": "VQModel", **config},
                       weights=release.filename.rpartition("/")[2])
    assert_loads(release, folder)


@pytest.mark.parametrize("tag, codes, disc_layers", [("vqgan_f16_1024.imagenet", 1024, 3),
                                                     ("vqgan_f16_16384.imagenet", 16384, 2)])
def test_taming_releases_are_tamings_imagenet_vqgans(tmp_path, tag, codes, disc_layers):
    pytest.importorskip("einops")  # taming's quantize.py imports it
    discriminator = pytest.importorskip("taming.modules.discriminator.model")
    from ..interop.test_vqgan_formats import TamingVQGAN

    # configs/model.yaml of the release: taming's ImageNet ddconfig, n_embed codes of width 256, the discriminator
    # of its VQLPIPSWithDiscriminator (64 channels, disc_num_layers)
    ddconfig = dict(double_z=False, z_channels=256, resolution=256, in_channels=3, out_ch=3, ch=128,
                    ch_mult=(1, 1, 2, 2, 4), num_res_blocks=2, attn_resolutions=(16,), dropout=0.0)
    state = meta_state(lambda: TamingVQGAN(ddconfig, codes, 256, discriminator.NLayerDiscriminator(
        input_nc=3, ndf=64, n_layers=disc_layers)))
    assert_converts_into(RELEASES[tag], state)
    path = tmp_path / "last.ckpt"
    torch.save({"state_dict": zeros(state)}, path)
    assert_loads(RELEASES[tag], path)


TIMM_FILES_WRITTEN = {"vit_tiny_patch16_224", "deit_tiny_patch16_224", "deit_tiny_distilled_patch16_224"}


@pytest.mark.parametrize("tag", sorted(t for t, r in RELEASES.items() if r.format == "timm"))
def test_timm_releases_are_timms_architectures(tmp_path, tag):
    timm = pytest.importorskip("timm")
    release = RELEASES[tag]
    state = meta_state(lambda: timm.create_model(release.model, pretrained=False))
    assert_converts_into(release, state)
    if release.model in TIMM_FILES_WRITTEN:  # the small ones: a file in the hub's layout too
        save_file(zeros(state), tmp_path / "model.safetensors")
        assert_loads(release, tmp_path / "model.safetensors")


@pytest.mark.parametrize("tag", sorted(t for t, r in RELEASES.items() if r.format == "ipt"))
def test_ipt_releases_are_the_official_layout_of_their_tasks(tag):
    from vitlab.models.ipt import DEGRADATION_SCALES

    from ..interop.test_ipt_formats import OfficialIPT

    release = RELEASES[tag]
    degradations = release.overrides.get("degradations", vitlab.get_config("ipt_base").degradations)
    scales = [DEGRADATION_SCALES[d] for d in degradations]
    # option.py's defaults: 64 features, 48-pixel patches of 3 × 3 tokens, 12 heads, 12 + 12 layers
    state = meta_state(lambda: OfficialIPT(scales, c=64, patch_size=48, patch_dim=3, heads=12, layers=12))
    assert_converts_into(release, state)


# The official configs (fudan-zvg/SETR configs/SETR/*.py): classes and crop per dataset, the auxiliary heads'
# in_index, the encoder's width and depth
SETR_DATASETS = {"cityscapes": (19, 768), "ade20k": (150, 512), "pascal_context": (60, 480)}
SETR_AUX = {"naive": (9, 14, 19), "pup": (9, 14, 19, 23), "mla": (0, 1, 2, 3)}  # MLA: the 4 streams


@pytest.mark.parametrize("tag", sorted(t for t, r in RELEASES.items() if r.format == "setr"))
def test_setr_releases_have_their_official_configs_sizes(tag):
    release = RELEASES[tag]
    decoder = release.model.split("_")[1]
    base = "vit_base" in release.model
    classes, crop = next(size for name, size in SETR_DATASETS.items() if release.tag.split(".")[1].startswith(name))
    with torch.device("meta"):
        model = vitlab.create_model(release.model, **release.overrides)
    assert (model.decoder, model.num_classes, model.config.img_size) == (decoder, classes, crop)
    assert model.aux_layers == ((2, 5, 8) if base else SETR_AUX[decoder]) and len(model.auxiliary_head) == len(
        model.aux_layers)
    encoder = model.backbone.config
    assert (encoder.dim, encoder.depth, encoder.num_heads) == ((768, 12, 12) if base else (1024, 24, 16))
    if decoder == "mla":
        assert model.mla_layers == (5, 11, 17, 23)
    grid = (crop // 16) ** 2
    assert model.backbone.pos_embed.shape[1] == grid + (0 if decoder == "mla" else 1)  # MLA: no class token
