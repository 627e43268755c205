"""`Runtime.as_model()`: a RuntimeModule around the torch model, its graph's method on the runtime, everything else
the model's, the model's own code reaching the runtime through it; the model itself left as it was."""

import torch

import vitlab
from vitlab import runtime
from vitlab.runtime import RuntimeModule


def counting(engine):
    """engine, counting the calls that reach it (the inputs' batch sizes, in order)."""
    calls = []
    run = engine._run
    engine._run = lambda inputs, task: calls.append(inputs[0].shape[0]) or run(inputs, task)
    return calls


def test_a_classifier_runs_on_the_runtime_and_reads_the_rest_from_the_model():
    torch.manual_seed(0)
    model = vitlab.create_model("deit_mini_distilled_patch7_28", depth=2).eval()
    engine = runtime.load(model, backend="torch")
    calls = counting(engine)
    wrapped = engine.as_model()
    assert isinstance(wrapped, RuntimeModule) and wrapped.runtime is engine
    assert not hasattr(model, "runtime") and "forward" not in vars(model)  # nothing patched onto the model
    images = torch.randn(3, 1, 28, 28)
    with torch.inference_mode():
        expected = model(images)
        got = wrapped(images)
    assert calls == [3]
    torch.testing.assert_close(got, expected)  # in evaluation a distilled DeiT averages its two heads' logits
    assert wrapped.config is model.config and wrapped.num_classes == model.num_classes and not wrapped.training
    assert [id(p) for p in wrapped.parameters()] == [id(p) for p in model.parameters()]
    assert wrapped.no_weight_decay() == model.no_weight_decay()  # a method calling super(), through the wrapper
    features = wrapped.forward_features(images)  # the model's other methods stay on torch
    assert calls == [3] and features.shape == (3, 18, 128)


def test_a_restorers_own_tiling_calls_the_runtime_tile_by_tile():
    torch.manual_seed(0)
    model = vitlab.create_model("ipt_small").eval()
    engine = runtime.load(model, backend="torch")
    calls = counting(engine)
    wrapped = engine.as_model()
    image = torch.rand(1, 3, 70, 90)
    with torch.inference_mode():
        expected = model.forward_chop(image, "sr2", overlap=12, batch_size=8)
        got = wrapped.forward_chop(image, "sr2", overlap=12, batch_size=8)
    torch.testing.assert_close(got, expected)
    assert calls and sum(calls) > 1  # IPT's forward_chop, bound to the wrapper: its self(tiles, task) ran here
    tiles, ran = torch.rand(2, 3, 48, 48), len(calls)
    with torch.inference_mode():
        restored, tokens = wrapped(tiles, "sr2", return_tokens=True)  # the body's tokens: only torch has them
        want, want_tokens = model(tiles, "sr2", return_tokens=True)
    assert len(calls) == ran  # that call ran the torch model
    torch.testing.assert_close(restored, want)
    torch.testing.assert_close(tokens, want_tokens)


def test_a_vqgan_decodes_on_the_runtime_inside_its_own_forward():
    torch.manual_seed(0)
    model = vitlab.create_model("vqgan_small").eval()
    engine = runtime.load(model, backend="torch")
    calls = counting(engine)
    wrapped = engine.as_model()
    images = torch.rand(2, 1, 28, 28) * 2 - 1
    with torch.inference_mode():
        expected = model(images)
        got = wrapped(images)  # VQGAN.forward: encode and quantise in torch, decode on the runtime
    assert calls == [2]
    torch.testing.assert_close(got.reconstruction, expected.reconstruction)
    assert torch.equal(got.indices, expected.indices)
    with torch.inference_mode():  # the model's decode_indices, bound to the wrapper, decodes there too
        torch.testing.assert_close(wrapped.decode_indices(got.indices), model.decode_indices(got.indices))
    assert calls == [2, 2]


def test_a_detector_takes_its_padding_mask():
    torch.manual_seed(0)
    model = vitlab.create_model("detr_small", enc_layers=1, dec_layers=1).eval()
    wrapped = runtime.load(model, backend="torch").as_model()
    images = torch.randn(2, 3, 64, 64)
    mask = torch.zeros(2, 64, 64, dtype=torch.bool)
    mask[1, :, 40:] = True
    with torch.inference_mode():
        for args in ((images,), (images, mask)):
            got, expected = wrapped(*args), model(*args)
            torch.testing.assert_close(got.logits, expected.logits)
            torch.testing.assert_close(got.pred_boxes, expected.pred_boxes)
