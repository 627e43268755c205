"""Where the time goes as the token count grows: one model against image size with the attention core
softmax(QKᵀ/√d)V timed alone, and the fused and explicit attention paths timed on each workload's shapes."""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

from vitlab.layers.attention import explicit_attention
from vitlab.models.registry import create_model, get_config

from .clock import timed
from .costs import flops_per_image
from .workloads import Workload, comparable, image_shape


def scaling(name: str = "vit_small_patch16_224", sizes: tuple[int, ...] = (224, 384, 512), batch: int = 1,
            repeats: int = 5, rounds: int = 3, device: str = "cpu") -> list[dict]:
    """Inference time of one vitlab model against image size, and the share of it spent in the attention core
    softmax(QKᵀ/√d)V (timed alone on tensors of the same shape, fused and explicit, × depth).

    Returns one dict per size: tokens, ms per forward, GFLOPs per image, attention-core ms (fused, explicit),
    the core's share of the forward time and of the FLOPs.
    """
    out = []
    for size in sizes:
        torch.manual_seed(0)
        c = get_config(name, img_size=size)
        model = create_model(name, img_size=size).to(device).eval()
        x = torch.randn(batch, *image_shape(name, img_size=size), device=device)
        N = model.patch_embed.num_patches + model.num_prefix_tokens
        heads, head_dim = c.num_heads, c.dim // c.num_heads
        q, k, v = (torch.randn(batch, heads, N, head_dim, device=device) for _ in range(3))
        forward, fused, explicit = [], [], []
        with torch.inference_mode():
            for _ in range(rounds):
                forward.append(timed(lambda m=model, x=x: m(x), repeats, device=device))
                fused.append(timed(lambda q=q, k=k, v=v: F.scaled_dot_product_attention(q, k, v), repeats,
                                   device=device))
                explicit.append(timed(lambda q=q, k=k, v=v: explicit_attention(q, k, v), repeats, device=device))
        gflops = flops_per_image(model, x) / 1e9
        attn_gflops = c.depth * 4 * N * N * c.dim / 1e9  # QKᵀ and PV: 2·N²·head_dim each, per head
        t, tf, te = (statistics.median(s) for s in (forward, fused, explicit))
        core = tf * c.depth if model.blocks[0].attn.fused else te * c.depth
        out.append({"model": name, "img_size": size, "tokens": N, "batch": batch, "ms_per_forward": 1e3 * t,
                    "gflops_per_image": gflops, "attn_core_ms_fused": 1e3 * tf * c.depth,
                    "attn_core_ms_explicit": 1e3 * te * c.depth, "attn_time_share": core / t,
                    "attn_flop_share": attn_gflops / gflops})
    return out


def attention_paths(workloads: list[Workload], repeats: int = 5, rounds: int = 3, device: str = "cpu") -> list[dict]:
    """The attention core of each workload's shapes timed both ways: fused (scaled_dot_product_attention) and
    explicit (`explicit_attention`), in inference and as forward + backward. The model's default path
    (`fused_attn=True`) is the one these numbers choose on this device."""
    out = []
    for workload in workloads:
        c = get_config(comparable(workload.name))
        N = (c.img_size // c.patch_size) ** 2 + 1 if isinstance(c.img_size, int) else None
        if N is None:
            continue
        heads, head_dim = c.num_heads, c.dim // c.num_heads
        for batch, train in ((1, False), (workload.infer_batch, False), (workload.train_batch, True)):
            q, k, v = (torch.randn(batch, heads, N, head_dim, device=device, requires_grad=train) for _ in range(3))

            def run(attend, q=q, k=k, v=v, train=train):
                if not train:
                    with torch.inference_mode():
                        return attend(q, k, v)
                out = attend(q, k, v)
                out = out[0] if isinstance(out, tuple) else out
                out.sum().backward()

            times = {"fused": [], "explicit": []}
            for _ in range(rounds):
                times["fused"].append(timed(lambda: run(F.scaled_dot_product_attention), repeats, device=device))
                times["explicit"].append(timed(lambda: run(explicit_attention), repeats, device=device))
            fused, explicit = (statistics.median(times[key]) for key in ("fused", "explicit"))
            out.append({"model": workload.name, "shape": [batch, heads, N, head_dim],
                        "mode": "forward+backward" if train else "inference", "fused_ms": 1e3 * fused,
                        "explicit_ms": 1e3 * explicit, "explicit_over_fused": explicit / fused})
    return out
