"""Speed of vitlab against timm and Hugging Face, measured in one process, interleaved, median of repeats.

Each library builds the same ViT (same width, depth, heads, patch, image size, classes) with random weights.
Rows: inference images/s at batch 1 and a larger batch, training images/s (forward, backward, AdamW step),
peak resident memory of each measurement, FLOPs per image (torch.utils.flop_counter) and the achieved share
of the machine's measured matmul peak. The ratios vitlab/timm and vitlab/HF are the figures that matter:
absolute numbers move from run to run on a shared machine.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .models.registry import get_config

LIBRARIES = ("vitlab", "timm", "hf")


@dataclass
class Workload:
    name: str  # registered vitlab model
    infer_batch: int = 32
    train_batch: int = 32


def build(library: str, name: str) -> nn.Module:
    """The same architecture in each library. Returns a module mapping images (B, C, H, W) to logits."""
    c = get_config(name)
    if library == "vitlab":
        from .models.registry import create_model

        return create_model(name)
    if library == "timm":
        import timm

        return timm.create_model("vit_tiny_patch16_224", img_size=c.img_size, patch_size=c.patch_size,
                                 in_chans=c.in_chans, num_classes=c.num_classes, embed_dim=c.dim, depth=c.depth,
                                 num_heads=c.num_heads, mlp_ratio=c.mlp_ratio)
    if library == "hf":
        import transformers

        config = transformers.ViTConfig(
            hidden_size=c.dim, num_hidden_layers=c.depth, num_attention_heads=c.num_heads,
            intermediate_size=int(c.dim * c.mlp_ratio), image_size=c.img_size, patch_size=c.patch_size,
            num_channels=c.in_chans, num_labels=c.num_classes, layer_norm_eps=1e-6,
            attn_implementation="sdpa",
        )
        model = transformers.ViTForImageClassification(config)

        class Logits(nn.Module):  # the same call signature as the others
            def __init__(self, inner: nn.Module) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, images: torch.Tensor) -> torch.Tensor:
                return self.inner(pixel_values=images).logits

        return Logits(model)
    raise ValueError(f"unknown library {library!r}; choose from {', '.join(LIBRARIES)}")


def peak_rss_reset() -> None:
    """Reset the kernel's peak-RSS counter of this process (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _status_mib(field: str) -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def peak_rss_mib() -> float:
    """Peak resident memory since the last reset (the whole process: interpreter, libraries, all models)."""
    return _status_mib("VmHWM")


def rss_mib() -> float:
    return _status_mib("VmRSS")


def timed(fn: Callable[[], None], repeats: int) -> float:
    """Median seconds of `repeats` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def flops_per_image(model: nn.Module, images: torch.Tensor) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(images)
    return counter.get_total_flops() / images.shape[0]


def matmul_peak_gflops(n: int = 2048, repeats: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    seconds = timed(lambda: torch.mm(a, b), repeats)
    return 2 * n**3 / seconds / 1e9


def measure(workload: Workload, libraries=LIBRARIES, repeats: int = 5, rounds: int = 3) -> list[dict]:
    """Interleave the libraries `rounds` times; each round times `repeats` calls per row."""
    c = get_config(workload.name)
    torch.manual_seed(0)
    models = {lib: build(lib, workload.name) for lib in libraries}
    shape = (c.in_chans, c.img_size, c.img_size) if isinstance(c.img_size, int) else (c.in_chans, *c.img_size)
    rows = {lib: {"library": lib, "model": workload.name} for lib in libraries}
    samples: dict[tuple[str, str], list[float]] = {}
    order = list(models)
    for round_index in range(rounds):
        # rotate who goes first: the first measurement of a round pays for allocator and cache warm-up
        shift = round_index % len(order)
        for lib in order[shift:] + order[:shift]:
            model = models[lib]
            for batch in (1, workload.infer_batch):
                x = torch.randn(batch, *shape)
                model.eval()
                with torch.inference_mode():
                    seconds = timed(lambda m=model, x=x: m(x), repeats)
                samples.setdefault((lib, f"infer_b{batch}_img_s"), []).append(batch / seconds)
            x = torch.randn(workload.train_batch, *shape)
            y = torch.randint(0, c.num_classes, (workload.train_batch,))
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            model.train()

            def step(m=model, x=x, y=y, opt=optimizer):
                loss = nn.functional.cross_entropy(m(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

            peak_rss_reset()
            before = rss_mib()
            seconds = timed(step, max(1, repeats // 2))
            samples.setdefault((lib, "train_img_s"), []).append(workload.train_batch / seconds)
            # what the training step adds on top of what the process already held
            samples.setdefault((lib, "train_extra_rss_mib"), []).append(peak_rss_mib() - before)
    for (lib, key), values in samples.items():
        rows[lib][key] = statistics.median(values)
    for lib, model in models.items():
        rows[lib]["gflops_per_image"] = flops_per_image(model.eval(), torch.randn(1, *shape)) / 1e9
        rows[lib]["infer_batch"], rows[lib]["train_batch"] = workload.infer_batch, workload.train_batch
    return list(rows.values())


def achieved_share(row: dict, peak_gflops: float) -> dict[str, float]:
    """GFLOP/s reached as a fraction of the matmul peak; training counted as 3 × the forward FLOPs."""
    big = f"infer_b{row['infer_batch']}_img_s"
    return {"infer_share_of_peak": row[big] * row["gflops_per_image"] / peak_gflops,
            "train_share_of_peak": row["train_img_s"] * 3 * row["gflops_per_image"] / peak_gflops}
