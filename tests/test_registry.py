"""vitlab.registry.Registry, the one way vitlab registers what it finds by name: models, families, tasks, converters."""

import sys

import pytest

from vitlab.registry import Registry, UnknownName


def test_two_definitions_of_one_name_are_an_error_and_a_miss_names_the_close_ones():
    def vit_tiny():
        pass

    def other():
        pass

    models = Registry("model")
    assert models.register("vit_tiny", vit_tiny) is vit_tiny
    models.register("vit_tiny", vit_tiny)  # the same definition again (a module imported twice): kept
    with pytest.raises(ValueError, match="model 'vit_tiny' is registered twice"):
        models.register("vit_tiny", other)
    with pytest.raises(UnknownName, match=r"unknown model 'vit_tiyn'; did you mean 'vit_tiny'\?") as error:
        models["vit_tiyn"]
    assert isinstance(error.value, KeyError) and isinstance(error.value, ValueError)
    assert models.get("nothing") is None and "vit_tiny" in models and len(models) == 1
    models.unregister("vit_tiny")
    assert "vit_tiny" not in models
    replacing = Registry("converter", replace=True)
    replacing.register("a", vit_tiny)
    assert replacing.register("a", other) is other and replacing["a"] is other


def test_the_first_lookup_imports_the_package_and_order_decides_the_listing(tmp_path, monkeypatch):
    package = tmp_path / "toy_plugins"
    (package / "second").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text("raise AssertionError('a module, not a package: never imported')\n")
    (package / "second" / "__init__.py").write_text(
        "from toy_plugins_registry import PLUGINS\nPLUGINS.register('second', 2)\n")
    (package / "first_pkg").mkdir()
    (package / "first_pkg" / "__init__.py").write_text(
        "from toy_plugins_registry import PLUGINS\nPLUGINS.register('first', 1)\n")
    (tmp_path / "toy_plugins_registry.py").write_text(
        "from vitlab.registry import Registry\n"
        "PLUGINS = Registry('plugin', discover='toy_plugins', packages=True, order=lambda n: n)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        from toy_plugins_registry import PLUGINS

        PLUGINS.register("outside", 0)  # registered from elsewhere before any lookup
        assert "toy_plugins.second" not in sys.modules  # nothing imported yet
        assert list(PLUGINS) == ["outside", "first", "second"]  # by order, not by when each registered
        assert dict(PLUGINS) == {"outside": 0, "first": 1, "second": 2}
    finally:
        for name in [n for n in sys.modules if n.startswith("toy_plugins")]:
            del sys.modules[name]


def test_vitlabs_registries_find_their_packages_themselves():
    from vitlab.interop.converters import CONVERTERS
    from vitlab.models.registry import FAMILIES, PRESETS
    from vitlab.tasks import TASKS

    assert {"vit", "detr", "deformable_detr", "setr", "ipt", "vqgan"} <= set(FAMILIES)
    assert "vit_base_patch16_224" in PRESETS
    assert list(TASKS)[:3] == ["classification", "seq2seq", "detection"]  # each task's declared order
    assert [TASKS[name].order for name in TASKS] == sorted(TASKS[name].order for name in TASKS)
    assert {converter.family for converter in CONVERTERS.values()} >= {"vit", "detr", "deformable_detr"}


def test_a_family_whose_model_is_no_model_is_refused_by_name():
    """What the layers above ask of a model is `Model`'s (models/family.py): a family that builds a plain nn.Module
    would lose its hooks silently, so create_model says what to subclass."""
    from dataclasses import dataclass
    from typing import ClassVar

    from torch import nn

    from vitlab.models.family import Model, ModelFamily
    from vitlab.models.registry import FAMILIES, PRESETS, create_model, register_config, register_model

    @register_config
    @dataclass(frozen=True)
    class PlainConfig(ModelFamily):
        family: ClassVar[str] = "plain_module_toy"
        as_model: bool = False

        def build(self) -> nn.Module:
            return type("Hooked", (Model,), {})() if self.as_model else nn.Linear(2, 2)

    def plain_module_toy() -> PlainConfig:
        return PlainConfig()

    register_model(plain_module_toy)
    try:
        with pytest.raises(TypeError, match=r"plain_module_toy family builds a Linear, which is not a vitlab.models"):
            create_model("plain_module_toy")
        model = create_model("plain_module_toy", as_model=True)  # the defaults: a family with nothing to say
        assert model.task_names == () and model.task_index("x") is None and model.no_weight_decay() == set()
        assert model.num_layer_groups == 0 and model.adapt_checkpoint({"w": 1}) == {"w": 1}
        with pytest.raises(NotImplementedError, match="declares no runtime graph"):
            model.export_spec()
    finally:
        PRESETS.unregister("plain_module_toy")
        FAMILIES.unregister("plain_module_toy")
