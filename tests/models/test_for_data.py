"""ModelFamily.for_data: a task's data facts (classes, channels, image size, the stochastic depth it trains with)
go to each family's own field for them, one documented method instead of field names written in every task."""

import pytest

from vitlab.models import get_config


def test_each_fact_goes_to_the_familys_field_for_it():
    vit = get_config("vit_mini_patch7_28").for_data(classes=7, channels=3, image_size=35, drop_path=0.1)
    assert (vit.num_classes, vit.in_chans, vit.img_size, vit.drop_path_rate) == (7, 3, 35, 0.1)
    vqgan = get_config("vqgan_small").for_data(image_size=48)  # a VQGAN's image size is its resolution
    assert vqgan.resolution == 48 and vqgan == get_config("vqgan_small", resolution=48)
    detr = get_config("detr_small").for_data(classes=5, drop_path=0.2)  # no stochastic depth to offer: left out
    assert detr.num_classes == 5 and detr == get_config("detr_small", num_classes=5)


def test_a_fact_not_said_changes_nothing_and_an_unknown_one_is_refused():
    config = get_config("vit_mini_patch7_28")
    assert config.for_data(classes=None, channels=None) == config
    with pytest.raises(TypeError, match="unknown data fact 'colours'; the facts are classes, labels, channels"):
        config.for_data(colours=3)


def test_a_fact_the_family_cannot_take_is_refused_by_name():
    vqgan = get_config("vqgan_small")
    with pytest.raises(ValueError, match="the vqgan family has no num_classes: a model of it cannot be fitted to data "
                                         "with classes=10"):
        vqgan.for_data(classes=10)
