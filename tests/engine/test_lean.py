"""The training view (engine/lean.py): a classifier that reads only its class token trains through a last block that
computes only those rows, with the full forward's loss and gradients (float64, by the full forward itself), the
full forward's weights after a real run (EMA, layer decay, drop path and distillation on), and the full forward
wherever the difference could be seen (hooks, dropout in the last block, a model that reads every token)."""

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

import vitlab
from vitlab.engine import lean
from vitlab.engine.lean import LeanTraining, training_view
from vitlab.models import DistilledOutput
from vitlab.tasks import train

from .conftest import tiny_options

MODELS = {  # name -> (model, overrides): ViTs of 16 and 49 patch tokens, a distilled DeiT (two prefix tokens)
    "vit": ("vit_tiny_patch7_28", {"dim": 48, "depth": 3, "num_heads": 3, "init_values": 0.1,
                                   "drop_path_rate": 0.3}),
    "vit_49_tokens": ("vit_tiny_patch4_28", {"dim": 32, "depth": 2, "num_heads": 2, "drop_path_rate": 0.3}),
    "deit_distilled": ("deit_mini_distilled_patch7_28", {"dim": 48, "depth": 2, "num_heads": 4,
                                                         "drop_path_rate": 0.3}),
}


def loss_of(outputs, labels):
    if isinstance(outputs, DistilledOutput):  # the class head learns the label, the distillation head a teacher's
        return F.cross_entropy(outputs.logits, labels) + F.cross_entropy(outputs.dist_logits, labels.flip(0))
    return F.cross_entropy(outputs, labels)


def loss_and_grads(module, model, images, labels):
    model.zero_grad()
    torch.manual_seed(7)  # the same drop-path draws for both forwards
    loss = loss_of(module(images), labels)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_lean_forward_has_the_full_forwards_loss_and_gradients(name, batch):
    model_name, overrides = MODELS[name]
    torch.manual_seed(0)
    model = vitlab.create_model(model_name, **overrides).double().train()
    view = training_view(model)
    assert isinstance(view, LeanTraining) and view.model is model and model.lean_exact
    called = []
    model.forward_lean = lambda images: called.append(images.shape) or type(model).forward_lean(model, images)
    images = torch.randn(batch, 1, 28, 28, dtype=torch.float64)
    labels = torch.randint(0, 10, (batch,))
    full_loss, full_grads = loss_and_grads(model, model, images, labels)
    lean_loss, lean_grads = loss_and_grads(view, model, images, labels)
    assert called == [images.shape]  # the view took the lean path
    torch.testing.assert_close(lean_loss, full_loss, rtol=1e-12, atol=1e-12)
    assert lean_grads.keys() == full_grads.keys()
    for key, grad in full_grads.items():
        if batch > 1:  # (a lone image's drop path may skip a whole block)
            assert grad.abs().sum() > 0, key  # every parameter learns, the last block's queries included
        torch.testing.assert_close(lean_grads[key], grad, rtol=1e-10, atol=1e-12, msg=key)


def test_models_that_read_every_token_train_on_their_own_forward():
    pooled = vitlab.create_model("vit_tiny_patch7_28", depth=1, global_pool="avg", class_token=False)
    assert training_view(pooled) is pooled  # the mean of all patch tokens needs every row

    class ReadsEveryToken(type(pooled)):  # a subclass's forward may read anything
        def forward(self, images):
            return self.forward_features(images).mean(1)

    custom = ReadsEveryToken(vitlab.create_model("vit_tiny_patch7_28", depth=1).config)
    assert not custom.reads_prefix_only and training_view(custom) is custom
    resnet = vitlab.create_model("resnet18_28", num_classes=10)
    assert training_view(resnet) is resnet


@pytest.mark.parametrize("where", ["last_block", "final_norm", "global"])
def test_a_hook_sees_the_full_forward(where):
    torch.manual_seed(0)
    model = vitlab.create_model("vit_tiny_patch7_28", dim=48, depth=2, num_heads=3).train()
    view = training_view(model)
    seen = []

    def hook(module, args, output):
        seen.append(tuple(args[0].shape))

    if where == "global":
        handle = torch.nn.modules.module.register_module_forward_hook(
            lambda m, a, o: seen.append(tuple(a[0].shape)) if m is model.blocks[-1].mlp else None)
    else:
        handle = (model.blocks[-1] if where == "last_block" else model.norm).register_forward_hook(hook)
    images = torch.randn(3, 1, 28, 28)
    try:
        torch.manual_seed(1)
        got = view(images)
    finally:
        handle.remove()
    assert seen == [(3, 1 + 16, 48)]  # every token's row, as from the model
    torch.manual_seed(1)
    torch.testing.assert_close(got, model(images))


def test_dropout_in_the_last_block_trains_on_the_full_forward_and_evaluates_lean():
    torch.manual_seed(0)
    model = vitlab.create_model("vit_tiny_patch7_28", dim=48, depth=2, num_heads=3, proj_drop_rate=0.1).train()
    view = training_view(model)
    assert isinstance(view, LeanTraining) and not model.lean_exact  # other draws over P rows: not the same run
    images = torch.randn(4, 1, 28, 28)
    torch.manual_seed(3)
    got = view(images)
    torch.manual_seed(3)
    torch.testing.assert_close(got, model(images), rtol=0, atol=0)  # the full forward, draw for draw
    model.eval()
    assert model.lean_exact
    torch.testing.assert_close(model.forward_lean(images), model(images), rtol=1e-5, atol=1e-6)


def test_a_run_through_the_lean_view_ends_at_the_full_forwards_weights(tmp_path, monkeypatch):
    """A real run (Fashion-MNIST images, AdamW, warm-up and cosine, EMA, layer decay, drop path, a distilled DeiT
    learning from a teacher run) trained twice: through the training view, and through the model's own forward.
    The weights, the EMA and the metrics agree to float rounding after every one of its steps."""
    teacher = tmp_path / "teacher"
    train(**tiny_options(teacher, epochs=1))
    recipe = dict(model="deit_mini_distilled_patch7_28", model_overrides={"dim": 48, "depth": 2, "num_heads": 4},
                  epochs=6, batch_size=16, ema_decay=0.9, layer_decay=0.8, drop_path=0.2, distill="hard",
                  teacher=str(teacher), lr=1e-3)
    lean_views = []
    real_view = lean.training_view
    monkeypatch.setattr("vitlab.engine.loop.training_view", lambda m: lean_views.append(real_view(m)) or
                        lean_views[-1])
    lean_result = train(**tiny_options(tmp_path / "lean", **recipe))
    assert [type(v) for v in lean_views] == [LeanTraining]
    monkeypatch.setattr("vitlab.engine.loop.training_view", lambda m: m)
    full_result = train(**tiny_options(tmp_path / "full", **recipe))
    for weights in ("last", "ema"):
        lean_state = load_file(tmp_path / "lean" / f"{weights}.safetensors")
        full_state = load_file(tmp_path / "full" / f"{weights}.safetensors")
        assert lean_state.keys() == full_state.keys()  # plain keys: no view's prefix in the file
        for key, value in full_state.items():
            got = lean_state[key]
            if key.endswith("attn.qkv.bias"):
                # the key bias's true gradient is zero (a constant added to every key leaves the softmax as it was),
                # so AdamW steps it by its normalised float noise, which differs between any two orders of summing
                D = value.shape[0] // 3
                torch.testing.assert_close(got[D:2 * D], value[D:2 * D], rtol=0, atol=1e-4, msg=f"{weights}: {key}")
                got, value = got[torch.arange(3 * D) // D != 1], value[torch.arange(3 * D) // D != 1]
            torch.testing.assert_close(got, value, rtol=1e-4, atol=1e-5, msg=f"{weights}: {key}")
    assert lean_result["train_loss"] == pytest.approx(full_result["train_loss"], rel=1e-4)
    assert lean_result["test_acc"] == pytest.approx(full_result["test_acc"], abs=0.011)
