import dataclasses

import pytest

import vitlab
from vitlab.models import config_from_dict, config_to_dict, get_config


def test_list_models_pattern():
    assert vitlab.list_models("vit_base_*") == [
        "vit_base_patch16_224", "vit_base_patch16_384", "vit_base_patch32_224",
    ]
    assert "vit_tiny_patch4_28" in vitlab.list_models()


def test_overrides_are_config_fields():
    config = get_config("vit_small_patch16_224", num_classes=10, img_size=384, in_chans=1, depth=4,
                        drop_path_rate=0.1)
    assert (config.num_classes, config.img_size, config.in_chans, config.depth, config.drop_path_rate) == (
        10, 384, 1, 4, 0.1)
    assert get_config("vit_small_patch16_224", embed_dim=96).dim == 96  # timm's name for the width
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.depth = 3


def test_unknown_override_names_valid_options():
    with pytest.raises(TypeError, match=r"'num_clases' \(did you mean 'num_classes'\?\).*valid options: .*depth"):
        vitlab.create_model("vit_tiny_patch4_28", num_clases=3)


def test_unknown_model_lists_close_names():
    with pytest.raises(ValueError, match="did you mean vit_tiny_patch16_224"):
        vitlab.create_model("vit_tiny_patch16")


def test_config_round_trip_through_json_types():
    config = get_config("vit_tiny_patch4_28", img_size=(28, 32), patch_size=(4, 8))
    data = config_to_dict(config)
    data = {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}  # what JSON gives back
    assert config_from_dict(data) == config
