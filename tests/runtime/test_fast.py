"""The inference path (vitlab/runtime/fast.py): the plain model's outputs, with a ViT's lean last block, in-place
writes into its own fresh buffers and unused sub-layers skipped; the model itself wherever a hook could see the
difference; the same parameters, not copies."""

import pytest
import torch
from torch import nn

import vitlab
from tests.layers.test_blocks import OpLog
from vitlab import runtime
from vitlab.layers.blocks import EncoderBlock
from vitlab.runtime.fast import IN_PLACE_MIN_ELEMENTS, InferenceBlock, InferenceModel, inference_model

PRESETS = {  # name: (model, images); batch 8 at 224 makes every block's tensors large enough to be written over
    "vit": (lambda: vitlab.create_model("vit_tiny_patch16_224", depth=4), (8, 3, 224, 224)),
    "deit distilled": (lambda: vitlab.create_model("deit_mini_distilled_patch7_28", depth=3), (128, 1, 28, 28)),
    "vit, global average pool": (lambda: vitlab.create_model("vit_mini_patch7_28", depth=3, global_pool="avg",
                                                             class_token=False), (128, 1, 28, 28)),
    "vit, layer scale": (lambda: vitlab.create_model("vit_tiny_patch4_28", depth=2, init_values=0.1),
                         (32, 1, 28, 28)),
}


def logits(out):
    return (out.logits, out.dist_logits) if hasattr(out, "dist_logits") else out


@pytest.mark.parametrize("name", list(PRESETS))
def test_the_inference_path_gives_the_models_outputs(name):
    make, shape = PRESETS[name]
    torch.manual_seed(0)
    model = make().eval()
    images = torch.randn(*shape)
    fast = inference_model(model)
    assert isinstance(fast, InferenceModel) and fast.lean == (name != "vit, global average pool")
    with torch.inference_mode():
        expected = model(images)
        with OpLog() as log:
            got = fast(images)
    torch.testing.assert_close(logits(got), logits(expected))  # fp32 tolerances
    assert {"gelu_", "add_"} <= log.ops  # it did write in place
    assert next(fast.parameters()) is next(model.parameters())  # the model's tensors, not copies
    assert all(type(block) is EncoderBlock for block in model.blocks)  # the model is left as it was


def test_it_shares_the_models_parameters_and_reads_its_attributes():
    torch.manual_seed(0)
    model = vitlab.create_model("vit_mini_patch7_28", depth=2).eval()
    fast = inference_model(model)
    assert {id(p) for p in fast.parameters()} == {id(p) for p in model.parameters()}
    other = vitlab.create_model("vit_mini_patch7_28", depth=2).eval()
    model.load_state_dict(other.state_dict())  # new weights reach the inference path too
    images = torch.randn(2, 1, 28, 28)
    with torch.inference_mode():
        torch.testing.assert_close(fast(images), other(images))
    assert fast.config is model.config and fast.num_prefix_tokens == 1
    features = fast.forward_features(images)  # the model's other methods, on the model's blocks
    torch.testing.assert_close(features, model.forward_features(images))
    assert inference_model(fast) is fast
    for other_family in ("resnet18_28", "vqgan_small"):  # nothing of the path's in them: the model itself
        model = vitlab.create_model(other_family)
        assert inference_model(model) is model


def test_building_it_leaves_the_models_training_flags_as_they_were():
    model = vitlab.create_model("vit_mini_patch7_28", depth=2).train()
    model.blocks[0].mlp.eval()  # a mixed model, as a fine-tuning with a frozen part has
    fast = inference_model(model)
    assert fast.training and model.training and model.blocks[1].mlp.training and not model.blocks[0].mlp.training
    assert not fast.fast.blocks[0].mlp.training and fast.fast.blocks[1].mlp.training


@pytest.mark.parametrize("name", ["vit_tiny_patch4_28", "deit_mini_distilled_patch7_28"])
def test_forward_computes_only_the_class_tokens_rows_of_the_last_block(name):
    """The head reads the pooled tokens only, so the last block makes their rows alone: the same logits as the head
    on every token's features, for the work counted by hand less."""
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    model = vitlab.create_model(name, depth=2).eval()
    for block in model.blocks:
        block.attn.fused = False  # the explicit path's matmuls are counted (the CPU's fused kernel is not)
    fast = inference_model(model)
    images = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        full = model.forward_head(model.forward_features(images))
        torch.testing.assert_close(logits(fast(images)), logits(full), atol=1e-5, rtol=1e-5)
        counts = []
        for run in (lambda: fast(images), lambda: model(images)):
            with FlopCounterMode(display=False) as counter:  # a global module hook: in place off, lean on
                run()
            counts.append(counter.get_total_flops())
    B, D, P = 3, model.config.dim, model.num_prefix_tokens
    N = P + model.patch_embed.num_patches
    hidden = model.blocks[-1].mlp.fc1.out_features
    # the N - P patch rows skip their query, output projection and MLP matmuls, and their attention over N keys
    rows = 2 * B * (N - P) * (D * D + D * D + 2 * D * hidden)
    attention = 2 * 2 * B * (N - P) * N * D  # Q·Kᵀ and weights·V
    assert counts[1] - counts[0] == rows + attention


@pytest.mark.parametrize("where", ["last block", "last block's mlp", "final norm", "model"])
def test_a_forward_hook_sees_every_token_because_the_model_itself_runs(where):
    """A hook that captures features (as feature extractors and attention viewers do) must see (B, P + N, D)."""
    torch.manual_seed(0)
    model = vitlab.create_model("vit_tiny_patch4_28", depth=2).eval()
    fast = inference_model(model)
    images = torch.randn(3, 1, 28, 28)
    with torch.no_grad():
        expected = model.forward_head(model.forward_features(images))
    seen = []
    target = {"last block": model.blocks[-1], "last block's mlp": model.blocks[-1].mlp, "final norm": model.norm,
              "model": model}[where]
    handle = target.register_forward_hook(lambda module, args, output: seen.append(output.shape))
    try:
        with torch.no_grad():
            got = fast(images)  # registered after the inference path was built: still seen
    finally:
        handle.remove()
    assert seen == [(3, 10) if where == "model" else (3, 1 + 49, 192)]
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("keep", [1, 2])
def test_forward_first_is_the_full_block_cut_to_its_first_rows(keep):
    """Only the kept tokens ask queries, but every token gives keys and values: the rows equal the full block's."""
    torch.manual_seed(0)
    block = InferenceBlock(EncoderBlock(32, 4, init_values=0.5).eval())
    x = torch.randn(2, 9, 32)
    torch.testing.assert_close(block.forward_first(x, keep), block(x)[:, :keep], atol=1e-6, rtol=1e-5)
    # training: the gradients through the kept rows are the full block's too
    block.train()
    x.requires_grad_(True)
    (block.forward_first(x, keep) ** 2).sum().backward()
    lean = [x.grad.clone()] + [p.grad.clone() for p in block.parameters()]
    x.grad = None
    block.zero_grad()
    (block(x)[:, :keep] ** 2).sum().backward()
    for a, b in zip(lean, [x.grad] + [p.grad for p in block.parameters()]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("init_values", [None, 0.5])
def test_inference_writes_in_place_only_into_its_own_fresh_outputs(init_values):
    """Under inference_mode the block writes GELU and the residual sums into buffers it just made (for tensors of
    at least IN_PLACE_MIN_ELEMENTS): the result is bit-identical to the out-of-place formula, its input is left as
    it was, and a hook that keeps an output sees the value it was given."""
    torch.manual_seed(0)
    block = EncoderBlock(64, 4, init_values=init_values).eval()
    fast = inference_model(block)
    x = torch.randn(8, 512, 64)  # (B, N, D): 2^18 elements, as large as IN_PLACE_MIN_ELEMENTS
    assert x.numel() >= IN_PLACE_MIN_ELEMENTS
    x_before = x.clone()

    def out_of_place(x):  # the same sub-modules, every step into a new tensor
        scale1 = block.ls1 if init_values else (lambda t: t)
        scale2 = block.ls2 if init_values else (lambda t: t)
        x = x + scale1(block.attn(block.norm1(x)))
        h = nn.functional.gelu(block.mlp.fc1(block.norm2(x)))
        return x + scale2(block.mlp.fc2(h))

    with torch.no_grad():
        expected = out_of_place(x)
    log = OpLog()
    with torch.inference_mode(), log:
        got = fast(x)
    assert {"gelu_", "add_"} <= log.ops  # it did write in place
    assert torch.equal(got, expected)
    assert torch.equal(x, x_before)
    with torch.inference_mode(), OpLog() as small:
        fast(x[:1, :8])  # a small input: new tensors are cheap, nothing is overwritten
    assert "gelu_" not in small.ops and "add_" not in small.ops

    with torch.inference_mode():  # what the hooks below must be given, computed before they exist
        attn_out = block.attn(block.norm1(x))
        x1 = x + (block.ls1(attn_out) if init_values else attn_out)
        fc1_out = block.mlp.fc1(block.norm2(x1))
    kept = {}
    block.attn.register_forward_hook(lambda m, i, o: kept.__setitem__("attn", o))
    block.mlp.fc1.register_forward_hook(lambda m, i, o: kept.__setitem__("fc1", o))
    with torch.inference_mode():
        got_hooked = fast(x)
    assert torch.equal(got_hooked, expected)
    assert torch.equal(kept["attn"], attn_out)  # not attn_out + x
    assert torch.equal(kept["fc1"], fc1_out)  # not GELU(fc1_out)


def test_a_global_hook_turns_the_in_place_writes_off_and_sees_the_lean_block():
    torch.manual_seed(0)
    model = vitlab.create_model("vit_mini_patch7_28", depth=2).eval()
    fast = inference_model(model)
    images = torch.randn(256, 1, 28, 28)  # (256, 17, 128): 2^19 elements per residual sum
    with torch.inference_mode():
        expected = model(images)
    shapes = []
    handle = nn.modules.module.register_module_forward_hook(
        lambda m, args, out: shapes.append(out.shape) if m is model.norm else None)
    try:
        with torch.inference_mode(), OpLog() as log:
            got = fast(images)
    finally:
        handle.remove()
    assert shapes == [(256, 1, 128)]  # the final norm of the class token's row alone
    assert not {"gelu_", "add_"} & log.ops
    torch.testing.assert_close(got, expected)


def test_under_autograd_nothing_is_overwritten_and_the_gradients_are_the_models():
    """Training through the inference path (dropout, stochastic depth off here): the lean last block is exact, and
    no tensor autograd saved is written over."""
    torch.manual_seed(0)
    model = vitlab.create_model("deit_mini_distilled_patch7_28", depth=2, drop_rate=0.0).train()
    fast = inference_model(model)
    images = torch.randn(256, 1, 28, 28)
    with OpLog() as log:
        out = fast(images)
    assert not {"gelu_", "add_"} & log.ops
    full = model(images)
    torch.testing.assert_close(out.logits, full.logits, atol=1e-5, rtol=1e-5)
    (out.logits.sum() + 2 * out.dist_logits.sum()).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    (full.logits.sum() + 2 * full.dist_logits.sum()).backward()
    for a, b in zip(grads, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


FAMILIES = {  # the other families whose layers the path has: their outputs too
    "detr": (lambda: vitlab.create_model("detr_small", enc_layers=1, dec_layers=2), (torch.randn(2, 3, 64, 96),)),
    "setr": (lambda: vitlab.create_model("setr_pup_small", depth=2), (torch.randn(2, 3, 128, 128),)),
    "ipt": (lambda: vitlab.create_model("ipt_small"), (torch.rand(2, 3, 48, 48), 1)),
}


@pytest.mark.parametrize("name", list(FAMILIES))
def test_other_families_give_their_outputs(name):
    make, inputs = FAMILIES[name]
    torch.manual_seed(0)
    model = make().eval()
    fast = inference_model(model)
    assert isinstance(fast, InferenceModel) and not fast.lean
    with torch.inference_mode():
        expected, got = model(*inputs), fast(*inputs)
    for key in ("logits", "pred_boxes"):
        if hasattr(expected, key):
            torch.testing.assert_close(getattr(got, key), getattr(expected, key))
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(got, expected)


def test_the_torch_runtime_runs_the_inference_path():
    torch.manual_seed(0)
    model = vitlab.create_model("vit_mini_patch7_28", depth=2).eval()
    engine = runtime.load(model, backend="torch")
    images = torch.randn(300, 1, 28, 28)
    with torch.inference_mode():
        expected = model(images)
    with OpLog() as log:
        got = engine(images)
    torch.testing.assert_close(got, expected)
    assert {"gelu_", "add_"} <= log.ops
    (backend,) = engine._engines.values()
    assert isinstance(backend.module.model, InferenceModel)


@pytest.mark.slow
def test_the_compile_runtime_freezes_its_weights_only_while_it_runs(monkeypatch):
    """inductor's freezing is on while the runtime's compiled module runs (and compiles): its weights are frozen
    into its graph, a second model's weights get a graph of their own, and the process-wide flag is as it was."""
    import torch._inductor.config as inductor
    import torch._inductor.freezing as freezing

    frozen = []
    freeze = freezing.freeze
    monkeypatch.setattr(freezing, "freeze", lambda *args, **kwargs: frozen.append(1) or freeze(*args, **kwargs))
    before = inductor.freezing
    images = torch.randn(3, 1, 28, 28)
    for seed in (0, 1):  # the same architecture, other weights
        torch.manual_seed(seed)
        model = vitlab.create_model("vit_mini_patch7_28", depth=1).eval()
        engine = runtime.load(model, backend="compile")
        with torch.inference_mode():
            torch.testing.assert_close(engine(images), model(images), atol=1e-5, rtol=1e-5)
        assert len(frozen) == seed + 1 and inductor.freezing == before
