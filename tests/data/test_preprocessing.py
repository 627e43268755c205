"""A model's preprocessing, to the pixel, against the reference libraries' own: timm's `resolve_data_config` +
`create_transform` for every timm-hosted release, transformers' image processors (ViT, DeiT, DETR, Deformable DETR)
for what their preprocessor_config.json says, on a photograph at several shapes (landscape, portrait, small,
elongated enough that DETR's cap on the longer side decides)."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

import vitlab
from vitlab.data.preprocessing import Preprocessing
from vitlab.data.transforms import build_eval_transform
from vitlab.interop.preprocessing import from_timm, from_transformers

skimage_data = pytest.importorskip("skimage.data")


@pytest.fixture(scope="module")
def photos() -> list[Image.Image]:
    cat = Image.fromarray(skimage_data.chelsea())  # 451 × 300
    return [cat, cat.transpose(Image.Transpose.ROTATE_90), cat.resize((97, 61)), cat.resize((451, 60))]


def timm_releases() -> list[str]:
    return [release.tag for release in vitlab.list_pretrained() if release.format == "timm"]


@pytest.mark.parametrize("tag", timm_releases())
def test_every_timm_release_records_timms_own_eval_transform(tag, photos):
    """The release's record (written by hand in its family's file) against timm's pretrained config of the same tag,
    and its transform against timm's, pixel for pixel."""
    import timm
    from timm.data import create_transform, resolve_data_config

    release = vitlab.list_pretrained(tag)[0]
    pretrained = timm.models.get_pretrained_cfg(tag).to_dict()
    ours = Preprocessing.from_dict(release.preprocessing)
    assert ours == from_timm(pretrained)
    theirs = create_transform(**resolve_data_config({}, pretrained_cfg=pretrained))
    for photo in photos:
        torch.testing.assert_close(ours(photo), theirs(photo), atol=1e-6, rtol=0)


@pytest.mark.parametrize("crop", [None, (192, 192)])
def test_a_squashing_resize_written_for_timm_is_timms_squash(crop, photos):
    """A preprocessing that resizes both sides (the ratio not kept), as vitlab writes it into a timm config.json
    (vitlab push --format timm): timm's own transform squashes too (crop_mode "squash"; "center" would resize the
    shorter side and crop), pixel for pixel, and it reads back as the same rule."""
    from timm.data import create_transform, resolve_data_config

    from vitlab.interop.vit_formats import _timm_pretrained_cfg

    rule = Preprocessing(resize=(224, 224), crop=crop, channels=3, resampler="pil")
    cfg = _timm_pretrained_cfg(vitlab.create_model("vit_tiny_patch16_224", img_size=crop[0] if crop else 224).config,
                               rule.to_dict(), distilled=False)
    theirs = create_transform(**resolve_data_config({}, pretrained_cfg=cfg))
    read = from_timm(cfg)
    for photo in photos:
        torch.testing.assert_close(rule(photo), theirs(photo), atol=1e-6, rtol=0)
        torch.testing.assert_close(read(photo), theirs(photo), atol=1e-6, rtol=0)


def transformers_processors():
    import transformers

    return {
        "vit": transformers.ViTImageProcessor(),
        "deit": transformers.DeiTImageProcessor(),
        "detr": transformers.DetrImageProcessor(),
        "deformable_detr": transformers.DeformableDetrImageProcessor(),
        "detr_small": transformers.DetrImageProcessor(size={"shortest_edge": 96, "longest_edge": 160}),
        # the longer side to a cap, as vitlab writes a detection run trained with --max-size
        "detr_capped": transformers.DetrImageProcessor(size={"max_height": 96, "max_width": 96}),
        # the shorter side, then a centre crop whose margins are odd for some photos: transformers floors them
        "bit": transformers.BitImageProcessor(size={"shortest_edge": 40}, crop_size={"height": 32, "width": 32},
                                              resample=3),
    }


@pytest.mark.parametrize("name", ["vit", "deit", "detr", "deformable_detr", "detr_small", "detr_capped", "bit"])
def test_a_transformers_processor_config_reads_as_the_processor_preprocesses(name, photos, tmp_path):
    """What preprocessor_config.json says, read back as a Preprocessing, gives the processor's own pixel values
    (its default backend: torchvision on uint8 tensors)."""
    processor = transformers_processors()[name]
    processor.save_pretrained(tmp_path)
    from vitlab.reading import read_json

    ours = from_transformers(read_json(tmp_path / "preprocessor_config.json", "a processor config"))
    for photo in photos:
        theirs = processor(photo, return_tensors="pt")["pixel_values"][0]
        mine = ours(photo)
        assert mine.shape == theirs.shape, (photo.size, mine.shape, theirs.shape)
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


LEGACY_PROCESSOR_CONFIGS = {  # sizes saved as a bare number, as the Hub's older preprocessor_config.json files have
    "ViTImageProcessor": {"do_normalize": True, "do_resize": True, "feature_extractor_type": "ViTFeatureExtractor",
                          "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 2, "size": 224},
    "DeiTImageProcessor": {"do_center_crop": True, "crop_size": 224, "do_normalize": True, "do_resize": True,
                           "feature_extractor_type": "DeiTFeatureExtractor", "image_mean": [0.485, 0.456, 0.406],
                           "image_std": [0.229, 0.224, 0.225], "resample": 3, "size": 256},
    "DetrImageProcessor": {"do_normalize": True, "do_resize": True, "feature_extractor_type": "DetrFeatureExtractor",
                           "format": "coco_detection", "image_mean": [0.485, 0.456, 0.406],
                           "image_std": [0.229, 0.224, 0.225], "max_size": 160, "size": 96},
    "BitImageProcessor": {"do_center_crop": True, "crop_size": 32, "do_normalize": True, "do_resize": True,
                          "image_processor_type": "BitImageProcessor", "image_mean": [0.5, 0.5, 0.5],
                          "image_std": [0.5, 0.5, 0.5], "resample": 3, "size": 40},
}


@pytest.mark.parametrize("kind", list(LEGACY_PROCESSOR_CONFIGS))
def test_a_size_saved_as_a_number_is_read_as_its_processor_reads_it(kind, photos):
    """A bare number is a square to ViT's and DeiT's processors, the shorter side to BiT's and DETR's (whose older
    max_size caps the longer): the pixels of the processor built from the same dict, for landscape and portrait
    photos."""
    import transformers

    config = LEGACY_PROCESSOR_CONFIGS[kind]
    processor = getattr(transformers, kind).from_dict(dict(config))
    ours = from_transformers(config)
    for photo in photos:
        theirs = processor(photo, return_tensors="pt")["pixel_values"][0]
        mine = ours(photo)
        assert mine.shape == theirs.shape, (kind, photo.size, mine.shape, theirs.shape)
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


def test_a_size_or_crop_saved_as_a_pair_is_height_and_width():
    read = from_transformers({"size": [32, 48], "do_center_crop": True, "crop_size": [16, 24],
                              "image_processor_type": "ViTImageProcessor"})
    assert (read.resize, read.crop) == ((32, 48), (16, 24))


def test_a_preprocessing_written_for_transformers_reads_back_as_itself():
    """What vitlab writes as a processor config (vitlab push --format transformers) is read back as the same rule:
    a one-channel classifier's stays one-channel, a detector's cap on the longer side stays a cap."""
    from vitlab.interop.preprocessing import to_transformers

    grey = Preprocessing(resize=(28, 28), mean=(0.286,), std=(0.353,), channels=1)
    capped = Preprocessing(max_size=96, channels=3, resampler="torch")
    for rule, detector in ((grey, None), (capped, "DetrImageProcessor")):
        read = from_transformers(to_transformers(rule.to_dict(), detector))
        assert (read.channels, read.resize, read.max_size, read.mean) == (rule.channels, rule.resize, rule.max_size,
                                                                           rule.mean)


def test_the_detr_releases_record_transformers_detr_processor():
    import transformers

    expected = from_transformers(transformers.DetrImageProcessor().to_dict())
    detectors = [r for r in vitlab.list_pretrained() if r.model.startswith(("detr_", "deformable_detr_"))]
    assert detectors and all(Preprocessing.from_dict(r.preprocessing) == expected for r in detectors)


def test_a_runs_eval_transform_is_the_same_pipeline_as_before():
    """build_eval_transform (a run's) is a Preprocessing: shorter side to the size with torchvision's antialiased
    bilinear on uint8, the centre square, normalised; as torchvision's own v2 pipeline does it."""
    from torchvision.transforms import v2

    image = Image.fromarray(skimage_data.chelsea())
    reference = v2.Compose([v2.ToImage(), v2.Resize(64, antialias=True), v2.CenterCrop(64),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5] * 3, [0.25] * 3)])
    ours = build_eval_transform(64, 0.5, 0.25)
    assert isinstance(ours, Preprocessing)
    torch.testing.assert_close(ours(image), reference(image), atol=0, rtol=0)


def test_a_detection_runs_record_is_its_data_sets_eval_transform(photos):
    """What a detection run records (data/coco.py's `image_preprocessing`, resampler "float") gives the pixels its
    data set evaluates on: torchvision's v2 pipeline on float pixels, the longer side to --max-size."""
    from torchvision.transforms import v2

    from vitlab.data.coco import IMAGENET_MEAN, IMAGENET_STD, image_preprocessing

    reference = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Resize(size=None, max_size=96),
                            v2.Normalize(list(IMAGENET_MEAN), list(IMAGENET_STD))])
    ours = Preprocessing.from_dict(image_preprocessing(96, IMAGENET_MEAN, IMAGENET_STD).to_dict())
    for photo in photos:
        torch.testing.assert_close(ours(photo), reference(photo), atol=0, rtol=0)


def test_bad_records_are_refused_by_name():
    with pytest.raises(ValueError, match="has no 'size'"):
        Preprocessing.from_dict({"size": 3})
    with pytest.raises(ValueError, match="interpolation must be one of"):
        Preprocessing(interpolation="lanczos")
    with pytest.raises(ValueError, match=r"exact .* takes none"):
        Preprocessing(resize=(32, 32), max_size=64)
    with pytest.raises(ValueError, match="uint8"):
        Preprocessing()(torch.rand(3, 8, 8))


def test_rescale_bounds_both_sides_as_mmcv_imrescale_does():
    """mmcv's keep-ratio rule, worked by hand: scale = min(long / longer side, short / shorter side), each side
    int(side × scale + 0.5); landscape, portrait, wider than the bounds' ratio, and smaller than them."""
    rule = Preprocessing(rescale=(2049, 1025), antialias=False)
    assert rule.resized_shape(1024, 2048) == (1025, 2049)  # scale 2049 / 2048: 1024.5 rounds up
    assert rule.resized_shape(2000, 1000) == (2049, 1025)  # 2049 / 2000 < 1025 / 1000
    assert rule.resized_shape(480, 640) == (1025, 1367)  # 1025 / 480: 640 × 2.1354 = 1366.7
    assert rule.resized_shape(500, 3000) == (342, 2049)  # 2049 / 3000: 341.5 rounds up
    with pytest.raises(ValueError, match="takes no resize"):
        Preprocessing(rescale=(64, 32), resize=32)
    with pytest.raises(ValueError, match="resampler='torch'"):
        Preprocessing(antialias=False, resampler="pil")


def test_resizing_without_antialiasing_samples_as_plain_bilinear_interpolation(photos):
    """`antialias=False` (OpenCV's INTER_LINEAR, as mmcv and albumentations resize): each output pixel the bilinear
    blend of the four input pixels around its centre, no filter when shrinking; scipy's order-1 zoom on the pixel
    grid is the reference, to rounding of the uint8 result."""
    import numpy as np
    from scipy import ndimage

    for photo, bounds in zip(photos, ((200, 100), (120, 90), (500, 200), (160, 40))):
        ours = Preprocessing(rescale=bounds, antialias=False)(photo)  # mean 0, std 1: the resized pixels / 255
        pixels = np.asarray(photo, dtype=np.float64)
        height, width = ours.shape[1:]
        factors = (height / pixels.shape[0], width / pixels.shape[1], 1)
        theirs = ndimage.zoom(pixels, factors, order=1, mode="nearest", grid_mode=True)
        assert theirs.shape[:2] == (height, width)
        difference = np.abs(ours.permute(1, 2, 0).numpy() * 255 - theirs)
        assert difference.max() <= 0.5 + 1e-4, (photo.size, bounds, difference.max())  # uint8 rounding, no more


def test_the_setr_releases_record_their_configs_test_pipeline(photos):
    """A SETR release's image goes in as its data set's config resizes it: a Cityscapes frame (2048 × 1024) within
    2049 × 1025, an ADE20K image within 2048 × 512, normalised with ImageNet's statistics."""
    from vitlab.interop.preprocessing import preprocessing_for

    cityscapes = preprocessing_for("setr_pup_vit_large_patch16_384.cityscapes_80k")
    ade20k = preprocessing_for("setr_naive_vit_large_patch16_384.ade20k")
    assert cityscapes.resized_shape(1024, 2048) == (1025, 2049) and ade20k.resized_shape(384, 683) == (512, 911)
    frame = photos[0].resize((2048, 1024))
    image = cityscapes(frame)
    assert image.shape == (3, 1025, 2049)
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    torch.testing.assert_close(image[:, 0, 0], (torch.tensor(frame.getpixel((0, 0))) / 255 - mean) / std)


def test_the_diffusers_vqgan_release_prepares_an_image_as_diffusers_does(photos):
    from diffusers.image_processor import VaeImageProcessor

    release = vitlab.list_pretrained("vqgan_f4_ldm.hf_celebahq")[0]
    face = photos[0].resize((256, 256))
    theirs = VaeImageProcessor(vae_scale_factor=4).preprocess(face)[0]
    torch.testing.assert_close(Preprocessing.from_dict(release.preprocessing)(face), theirs, atol=1e-6, rtol=0)


def test_a_sliver_or_an_image_resized_to_nothing_is_refused_with_its_size():
    """A 1 × 100,000 image whose shorter side is brought to 224 would be 22 gigapixels; a 600 × 1 one capped at a
    longer side of 512 would be 0 pixels high. Both are refused, saying the sizes, before anything is allocated."""
    from vitlab.data.preprocessing import MAX_RESIZED_PIXELS

    vit = Preprocessing(resize=224, crop=(224, 224), channels=3)
    with pytest.raises(ValueError, match="100000×1 pixels would be resized to 22400000×224"):
        vit(Image.new("RGB", (100_000, 1)))
    detr = Preprocessing(max_size=512, channels=3)
    with pytest.raises(ValueError, match="600×1 pixels would be resized to 512×0"):
        detr.resized_shape(1, 600)
    side = int(MAX_RESIZED_PIXELS ** 0.5)
    assert vit.resized_shape(side, side) == (224, 224) and vit.resized_shape(224, 224 * 1000) == (224, 224_000)
    # an image left at its own size is not resized to anything: a large one is for a sliding window to read
    assert Preprocessing(channels=3).resized_shape(2 * side, 2 * side) == (2 * side, 2 * side)
