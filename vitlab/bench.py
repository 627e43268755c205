"""Speed of vitlab against timm and Hugging Face, measured in one process, interleaved, median of repeats.

Each library builds the same ViT (same width, depth, heads, patch, image size, classes) with random weights and
every contender is measured with identical settings: the same inputs, the same AdamW, the same repeats. Rows:

- inference images/s at batch 1 and a larger batch (fp32, and bf16 autocast where the device has native bf16),
- training images/s (forward, backward, AdamW step),
- peak memory, each library alone in a fresh subprocess (resident set on CPU, max_memory_allocated on CUDA),
- FLOPs per image (torch.utils.flop_counter) and the achieved share of a torch.mm peak measured in the same run.

Rounds are interleaved and rotated (each contender goes first once), and each round's ratio vitlab/timm pairs
measurements taken seconds apart, so the ratios hold on a shared, noisy machine even when absolute numbers move.
`scaling` times one model against image size with the attention core timed alone. `benchmarks/speed.py` and
`vitlab bench` are the front doors.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .engine.speed import (
    autocast,
    bf16_supported,
    bf16_unsupported_reason,
    flush_denormals,
    freed_memory_kept,
    maybe_compile,
    tune_process,
)
from .models.registry import create_model, get_config

LIBRARIES = ("vitlab", "timm", "hf")


@dataclass
class Workload:
    name: str  # registered vitlab model; timm and HF build the same transformer
    infer_batch: int = 32
    train_batch: int = 32
    extra: tuple[str, ...] = ()  # other vitlab models measured alongside, vitlab only (e.g. the conv-stem twin)


@dataclass
class Settings:
    repeats: int = 5  # most timed calls per row per round
    min_repeats: int = 2  # fewest timed calls per row per round
    target_s: float = 3.0  # time per row per round that sets the number of calls between those bounds
    rounds: int = 3  # interleaved, rotated rounds over the contenders
    compile: bool = False  # also measure "<library>+compile" for every library
    bf16: bool = True  # also measure bf16 autocast inference where the device supports it natively
    memory: bool = True  # peak memory of each library in a fresh subprocess
    device: str = "cpu"
    peak_n: int = 2048  # side of the square torch.mm that measures the matmul peak
    libraries: tuple[str, ...] = LIBRARIES
    # "vitlab": the process settings `vitlab` commands run with (engine/speed.tune_process: glibc keeps freed memory,
    # denormals flush to zero); "default": glibc's and IEEE's. Process-wide, so every library in the run gets the same.
    cpu_settings: str = "vitlab"
    notes: list[str] = field(default_factory=list)


# ---- the same model in three libraries -----------------------------------------------------------------------
def comparable(name: str) -> str:
    """The registered name whose transformer timm and HF can build: a conv-stem hybrid has no twin there, so it is
    compared through the plain-patch model with the same grid and transformer (vit_mini_convstem_28 ->
    vit_mini_patch7_28); its own speed is measured beside it as a vitlab-only row."""
    c = get_config(name)
    if c.patch_proj != "convstem":
        return name
    from .models.registry import list_models

    twins = []
    for other in list_models():
        o = get_config(other)  # the same config but for the stem: same class, every other field equal
        if type(o) is type(c) and o.patch_proj == "conv" and replace(o, patch_proj=c.patch_proj,
                                                                      stem_channels=c.stem_channels) == c:
            twins.append(other)
    if twins:  # the twin of the same family name first (vit_mini_patch7_28, not an identical deit_ preset)
        return min(twins, key=lambda other: other.split("_")[0] != name.split("_")[0])
    raise ValueError(f"{name} has a convolutional stem and no plain-patch twin to compare with timm and HF")


def build(library: str, name: str, **overrides) -> nn.Module:
    """The same architecture in each library. Returns a module mapping images (B, C, H, W) to logits."""
    if library == "vitlab":
        return create_model(name, **overrides)
    c = get_config(name, **overrides)
    if c.patch_proj == "convstem":
        raise ValueError(f"{library} has no convolutional stem; compare {comparable(name)} instead of {name}")
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
        return HFLogits(transformers.ViTForImageClassification(config))
    raise ValueError(f"unknown library {library!r}; choose from {', '.join(LIBRARIES)}")


class HFLogits(nn.Module):
    """transformers' ViTForImageClassification with the call signature of the others: images -> logits."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.inner(pixel_values=images).logits


def image_shape(name: str, **overrides) -> tuple[int, int, int]:
    c = get_config(name, **overrides)
    return (c.in_chans, c.img_size, c.img_size) if isinstance(c.img_size, int) else (c.in_chans, *c.img_size)


# ---- clocks and counters -------------------------------------------------------------------------------------
def synchronize(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], repeats: int, warmup: int = 1, device: str = "cpu") -> float:
    """Median seconds of `repeats` calls, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def flops_per_image(model: nn.Module, images: torch.Tensor) -> float:
    """Forward FLOPs per image as torch.utils.flop_counter counts them (matmuls, convolutions, attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(images)
    return counter.get_total_flops() / images.shape[0]


def matmul_peak_gflops(n: int = 2048, repeats: int = 5, device: str = "cpu") -> float:
    """GFLOP/s of a large fp32 torch.mm: the practical peak that model GFLOP/s are compared with."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    seconds = timed(lambda: torch.mm(a, b), repeats, device=device)
    return 2 * n**3 / seconds / 1e9


def peak_rss_reset() -> None:
    """Reset the kernel's peak-RSS counter of this process (Linux: write 5 to /proc/self/clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _status_mib(key: str) -> float:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def peak_rss_mib() -> float:
    """Peak resident memory of this process since the last reset."""
    return _status_mib("VmHWM")


def rss_mib() -> float:
    return _status_mib("VmRSS")


# ---- one contender: a model and the calls that are timed -----------------------------------------------------
@dataclass
class Contender:
    label: str  # "vitlab", "timm", "hf", "vitlab+compile", "vitlab:vit_mini_convstem_28", ...
    library: str
    model_name: str
    compiled: bool = False


def contenders(workload: Workload, settings: Settings) -> list[Contender]:
    base = comparable(workload.name)
    out = [Contender(lib, lib, base) for lib in settings.libraries]
    extras = workload.extra + ((workload.name,) if base != workload.name else ())  # a conv-stem model itself
    out += [Contender(f"vitlab:{extra}", "vitlab", extra) for extra in dict.fromkeys(extras)]
    if settings.compile:
        out += [Contender(f"{c.label}+compile", c.library, c.model_name, compiled=True) for c in list(out)]
    return out


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def _calls(seconds: float, settings: Settings) -> int:
    """How many timed calls fit the per-row time target, within [min_repeats, repeats]."""
    return max(settings.min_repeats, min(settings.repeats, math.ceil(settings.target_s / max(seconds, 1e-6))))


def measure(workload: Workload, settings: Settings | None = None, progress: Callable[[str], None] = print) -> dict:
    """Interleave the contenders `settings.rounds` times. Returns {"rows": [...], "peak_gflops": [...]}: one row
    per contender with medians over rounds of images/s, per-round spreads and ratios to timm and HF."""
    settings = settings or Settings()
    device = settings.device
    torch.manual_seed(0)
    shape = image_shape(comparable(workload.name))
    num_classes = get_config(workload.name).num_classes
    entries = contenders(workload, settings)
    models, optimizers = {}, {}
    for c in entries:
        eager = models.get(c.label.removesuffix("+compile")) if c.compiled else None
        models[c.label] = maybe_compile(eager if eager is not None else build(c.library, c.model_name).to(device),
                                        c.compiled)
    use_bf16 = settings.bf16 and bf16_supported(device)
    inputs = {b: torch.randn(b, *shape, device=device) for b in (1, workload.infer_batch, workload.train_batch)}
    labels = torch.randint(0, num_classes, (workload.train_batch,), device=device)
    metrics = [(f"infer_b{b}_img_s", b, False) for b in (1, workload.infer_batch)]
    if use_bf16:
        metrics.append((f"infer_b{workload.infer_batch}_bf16_img_s", workload.infer_batch, True))
    samples: dict[tuple[str, str], list[float]] = {}
    calls: dict[tuple[str, str], int] = {}

    def seconds_per_call(label: str, key: str, fn: Callable[[], object]) -> float:
        if (label, key) not in calls:  # first round: a warm-up call (which also compiles), a call that sizes the count
            calls[(label, key)] = _calls(timed(fn, 1, warmup=1, device=device), settings)
        return timed(fn, calls[(label, key)], warmup=0, device=device)

    peaks = []
    for round_index in range(settings.rounds):
        peaks.append(matmul_peak_gflops(settings.peak_n, device=device))
        shift = round_index % len(entries)  # rotate who goes first: the first of a round pays for cache warm-up
        for c in entries[shift:] + entries[:shift]:
            model = models[c.label].eval()
            for key, batch, bf16 in metrics:
                x = inputs[batch]
                with torch.inference_mode(), autocast(device, torch.bfloat16 if bf16 else None):
                    seconds = seconds_per_call(c.label, key, lambda m=model, x=x: m(x))
                samples.setdefault((c.label, key), []).append(batch / seconds)
            model.train()
            optimizer = optimizers.setdefault(c.label, torch.optim.AdamW(model.parameters(), lr=1e-4))
            seconds = seconds_per_call(c.label, "train_img_s", lambda m=model, o=optimizer: train_step(
                m, o, inputs[workload.train_batch], labels))
            samples.setdefault((c.label, "train_img_s"), []).append(workload.train_batch / seconds)
        progress(f"  {workload.name}: round {round_index + 1}/{settings.rounds} done")
    rows = summarise(workload, entries, samples, calls, settings)
    for c in entries:
        if not c.compiled:
            flops = flops_per_image(models[c.label].eval(), inputs[1])
            for row in rows:
                if row["model"] == c.model_name and row["library"] == c.library:
                    row["gflops_per_image"] = flops / 1e9
    if settings.memory:
        for row in rows:
            if not row["label"].endswith("+compile"):
                row.update(peak_memory(row["library"], row["model"], workload.infer_batch, workload.train_batch,
                                       device, settings.cpu_settings == "vitlab"))
    if not use_bf16:
        settings.notes.append(f"bf16 autocast not measured: {bf16_unsupported_reason(device)}")
    return {"rows": rows, "peak_gflops": peaks}


def summarise(workload: Workload, entries: list[Contender], samples: dict, calls: dict, settings: Settings) -> list:
    """Median over rounds per metric, the spread of rounds (max/min - 1), and ratios to timm and HF computed
    round by round (each pairs measurements seconds apart) and then taken as a median."""
    rows = []
    for c in entries:
        row = {"label": c.label, "library": c.library, "model": c.model_name, "workload": workload.name,
               "compiled": c.compiled, "infer_batch": workload.infer_batch, "train_batch": workload.train_batch,
               "rounds": settings.rounds}
        for (label, key), values in samples.items():
            if label != c.label:
                continue
            row[key] = statistics.median(values)
            row[f"{key}_spread"] = max(values) / min(values) - 1
            row[f"{key}_calls"] = calls[(label, key)]
            if c.label not in ("vitlab", "vitlab+compile"):
                continue  # ratios only between the same model in each library
            suffix = "+compile" if c.compiled else ""
            # compiled vitlab against compiled timm/HF (the fair ratio), and against eager timm/HF ("_eager")
            for ref, name in [(r + suffix, r) for r in ("timm", "hf")] + (
                    [(r, f"{r}_eager") for r in ("timm", "hf")] if c.compiled else []):
                ref_values = samples.get((ref, key))
                if ref_values:
                    per_round = [v / r for v, r in zip(values, ref_values)]
                    row[f"{key}_vs_{name}"] = statistics.median(per_round)
                    row[f"{key}_vs_{name}_range"] = [min(per_round), max(per_round)]
        rows.append(row)
    return rows


def achieved_share(row: dict, peak_gflops: float) -> dict[str, float]:
    """GFLOP/s reached as a fraction of the matmul peak; training counted as 3 × the forward FLOPs."""
    if "gflops_per_image" not in row:
        return {}
    big = f"infer_b{row['infer_batch']}_img_s"
    return {"infer_gflop_s": row[big] * row["gflops_per_image"],
            "infer_share_of_peak": row[big] * row["gflops_per_image"] / peak_gflops,
            "train_share_of_peak": row["train_img_s"] * 3 * row["gflops_per_image"] / peak_gflops}


# ---- peak memory, one library per fresh process --------------------------------------------------------------
_MEMORY_PROBE = """
import json, sys, torch
from vitlab.bench import _memory_probe
print(json.dumps(_memory_probe(*json.loads(sys.argv[1]))))
"""


def peak_memory(library: str, name: str, infer_batch: int, train_batch: int, device: str = "cpu",
                tuned: bool = False) -> dict:
    """Peak memory of inference and of training steps, measured in a fresh Python process that imports only
    this library, so the other libraries' models and allocations do not pollute it. MiB."""
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    args = json.dumps([library, name, infer_batch, train_batch, device, torch.get_num_threads(), tuned])
    done = subprocess.run([sys.executable, "-c", _MEMORY_PROBE, args], check=False, capture_output=True, text=True,
                          env=env, timeout=900)
    if done.returncode != 0:
        return {"memory_error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _memory_probe(library: str, name: str, infer_batch: int, train_batch: int, device: str, threads: int,
                  tuned: bool = False) -> dict:
    """Runs inside the fresh process of `peak_memory`, with the parent's number of threads and process settings."""
    torch.set_num_threads(threads)
    if tuned:
        tune_process()
    if library == "timm":
        import timm  # noqa: F401  (imports count towards the baseline, not the model)
    elif library == "hf":
        import transformers  # noqa: F401
    cuda = torch.device(device).type == "cuda"
    baseline = rss_mib()
    torch.manual_seed(0)
    model = build(library, name).to(device)
    shape = image_shape(name)
    out = {"rss_baseline_mib": baseline, "rss_model_mib": rss_mib() - baseline}
    x = torch.randn(infer_batch, *shape, device=device)
    model.eval()
    peak_rss_reset()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    with torch.inference_mode():
        model(x)
    out["infer_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20 if cuda else peak_rss_mib()
    x = torch.randn(train_batch, *shape, device=device)
    y = torch.randint(0, get_config(name).num_classes, (train_batch,), device=device)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    peak_rss_reset()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for _ in range(2):  # the second step holds the optimizer state as well
        train_step(model, optimizer, x, y)
    out["train_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20 if cuda else peak_rss_mib()
    out["memory_kind"] = "cuda max_memory_allocated" if cuda else "peak RSS of the whole process"
    return out


# ---- scaling with the number of tokens ------------------------------------------------------------------------
def scaling(name: str = "vit_small_patch16_224", sizes: tuple[int, ...] = (224, 384, 512), batch: int = 1,
            repeats: int = 5, rounds: int = 3, device: str = "cpu") -> list[dict]:
    """Inference time of one vitlab model against image size, and the share of it spent in the attention core
    softmax(QKᵀ/√d)V (timed alone on tensors of the same shape, fused and explicit, × depth).

    Returns one dict per size: tokens, ms per forward, GFLOPs per image, attention-core ms (fused, explicit),
    the core's share of the forward time and of the FLOPs.
    """
    from .layers.attention import explicit_attention

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


# ---- which attention path, by measurement ------------------------------------------------------------------------
def attention_paths(workloads: list[Workload], repeats: int = 5, rounds: int = 3, device: str = "cpu") -> list[dict]:
    """The attention core of each workload's shapes timed both ways: fused (scaled_dot_product_attention) and
    explicit (`explicit_attention`), in inference and as forward + backward. The model's default path
    (`fused_attn=True`) is the one these numbers choose on this device."""
    from .layers.attention import explicit_attention

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


def attention_table(rows: list[dict]) -> str:
    lines = ["| model | (B, heads, N, head_dim) | mode | fused ms | explicit ms | explicit / fused |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['model']} | {tuple(r['shape'])} | {r['mode']} | {r['fused_ms']:.2f} | "
                     f"{r['explicit_ms']:.2f} | {r['explicit_over_fused']:.2f} |")
    return "\n".join(lines)


# ---- machine and reports ---------------------------------------------------------------------------------------
def machine(device: str = "cpu") -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    info = {"cpu": cpu, "cpus": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "platform": platform.platform(),
            "python": platform.python_version(), "device": device,
            "bf16_native": bf16_supported(device)}
    if torch.device(device).type == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
    for lib, module in (("timm", "timm"), ("transformers", "transformers")):
        with contextlib.suppress(ImportError):
            info[lib] = __import__(module).__version__
    return info


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"


def _ratio(row: dict, key: str, ref: str) -> str:
    value = row.get(f"{key}_vs_{ref}")
    if value is None:
        return "—"
    low, high = row[f"{key}_vs_{ref}_range"]
    text = f"{value:.2f} ({low:.2f}–{high:.2f})"
    eager = row.get(f"{key}_vs_{ref}_eager")
    return text + (f"; vs eager {ref}: {eager:.2f}" if eager is not None else "")


def speed_table(rows: list[dict]) -> str:
    """Markdown: one line per workload, metric and contender, with ratios vitlab/timm and vitlab/HF
    (median of the per-round ratios, and their range over the rounds)."""
    lines = ["| model | metric | contender | value | spread | vitlab/timm | vitlab/HF |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    metrics = [k for k in rows[0] if k.endswith("_img_s")] if rows else []
    for workload in dict.fromkeys(r["workload"] for r in rows):
        group = [r for r in rows if r["workload"] == workload]
        keys = list(dict.fromkeys(k for r in group for k in r if k.endswith("_img_s")))
        for key in keys or metrics:
            for row in group:
                if key not in row:
                    continue
                model = row["model"] if row["model"] == workload else f"{workload} ({row['model']})"
                lines.append(f"| {model} | {key.removesuffix('_img_s')} img/s | {row['label']} | {_fmt(row[key])} | "
                             f"{100 * row[f'{key}_spread']:.0f} % | {_ratio(row, key, 'timm')} | "
                             f"{_ratio(row, key, 'hf')} |")
    return "\n".join(lines)


def cost_table(rows: list[dict]) -> str:
    """Markdown: FLOPs, achieved GFLOP/s and share of the matmul peak, peak memory per contender."""
    lines = ["| model | contender | GFLOPs/img | infer GFLOP/s | infer share of peak | train share of peak | "
             "RSS after imports MiB | infer peak MiB | train peak MiB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        if row.get("compiled"):
            continue
        share = (f"{100 * row['infer_share_of_peak']:.0f} %" if "infer_share_of_peak" in row else "—")
        train = (f"{100 * row['train_share_of_peak']:.0f} %" if "train_share_of_peak" in row else "—")
        lines.append(f"| {row['model']} | {row['label']} | {_fmt(row.get('gflops_per_image'))} | "
                     f"{_fmt(row.get('infer_gflop_s'))} | {share} | {train} | {_fmt(row.get('rss_baseline_mib'), 4)} | "
                     f"{_fmt(row.get('infer_peak_mib'), 4)} | {_fmt(row.get('train_peak_mib'), 4)} |")
    return "\n".join(lines)


def scaling_table(rows: list[dict]) -> str:
    lines = ["| model | image | tokens | ms / forward | GFLOPs/img | attention core ms (fused / explicit) | "
             "attention share of time | attention share of FLOPs |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['model']} b{r['batch']} | {r['img_size']} | {r['tokens']} | {r['ms_per_forward']:.1f} | "
                     f"{r['gflops_per_image']:.1f} | {r['attn_core_ms_fused']:.1f} / {r['attn_core_ms_explicit']:.1f}"
                     f" | {100 * r['attn_time_share']:.0f} % | {100 * r['attn_flop_share']:.0f} % |")
    return "\n".join(lines)


def run_speed(workloads: list[Workload], settings: Settings, scaling_model: str | None = None,
              scaling_sizes: tuple[int, ...] = (224, 384, 512), progress: Callable[[str], None] = print,
              attention: bool = True) -> dict:
    """Everything the speed issue asks for, as one JSON-able dict; `report` turns it into markdown."""
    rows, peaks = [], []
    start = time.perf_counter()
    if settings.cpu_settings not in CPU_SETTINGS:
        raise ValueError(f"cpu_settings must be one of {', '.join(CPU_SETTINGS)}, got {settings.cpu_settings!r}")
    if settings.cpu_settings == "vitlab":
        tune_process()
    elif freed_memory_kept():
        raise ValueError("cpu_settings='default' asked for, but this process already keeps freed memory (it cannot "
                         "be undone): run the benchmark in a fresh process")
    else:
        flush_denormals(False)
    for workload in workloads:
        progress(f"measuring {workload.name} ({', '.join(c.label for c in contenders(workload, settings))})")
        result = measure(workload, settings, progress)
        rows += result["rows"]
        peaks += result["peak_gflops"]
    peak = statistics.median(peaks) if peaks else matmul_peak_gflops(settings.peak_n, device=settings.device)
    for row in rows:
        row.update(achieved_share(row, peak))
    out = {"machine": {**machine(settings.device), "matmul_peak_gflops": peak, "matmul_peak_samples": peaks},
           "settings": {"repeats": settings.repeats, "min_repeats": settings.min_repeats,
                        "target_s": settings.target_s, "rounds": settings.rounds, "compile": settings.compile,
                        "cpu_settings": settings.cpu_settings},
           "notes": list(dict.fromkeys(settings.notes)), "rows": rows}
    if scaling_model:
        progress(f"scaling {scaling_model} over {scaling_sizes}")
        out["scaling"] = scaling(scaling_model, scaling_sizes, repeats=settings.repeats, rounds=settings.rounds,
                                 device=settings.device)
    if attention:
        progress("attention paths: fused against explicit")
        out["attention_paths"] = attention_paths(workloads, settings.repeats, settings.rounds, settings.device)
    out["seconds"] = time.perf_counter() - start
    return out


CPU_SETTINGS = {"vitlab": "vitlab's (glibc keeps freed memory, denormals flush to zero: engine/speed.tune_process, "
                          "as `vitlab` commands run)",
                "default": "the defaults (glibc's malloc thresholds, IEEE gradual underflow)"}


def write_results(folder: Path, tag: str, result: dict | list, markdown: str) -> None:
    """A benchmark's results as <folder>/<tag>.json and <tag>.md, and the markdown on stdout."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{tag}.json").write_text(json.dumps(result, indent=2))
    (folder / f"{tag}.md").write_text(markdown)
    print(markdown)


def report(result: dict) -> str:
    m = result["machine"]
    where = m.get("gpu") or f"{m['cpu']}, {m['cpus']} cores ({m['cpu_capability']})"
    head = (f"Machine: {where}, torch {m['torch']}, timm {m.get('timm', '—')}, transformers "
            f"{m.get('transformers', '—')}; {m['threads']} threads; measured fp32 torch.mm peak "
            f"{m['matmul_peak_gflops']:.0f} GFLOP/s. {result['settings']['rounds']} interleaved rounds; value = median "
            f"over rounds, spread = max/min − 1 over rounds, ratio = median of per-round ratios (range). "
            f"CPU process settings: {CPU_SETTINGS[result['settings'].get('cpu_settings', 'default')]}, the same for "
            f"every library.")
    parts = [head, "", speed_table(result["rows"]), "", cost_table(result["rows"])]
    if result.get("scaling"):
        parts += ["", scaling_table(result["scaling"])]
    if result.get("attention_paths"):
        parts += ["", attention_table(result["attention_paths"])]
    if result.get("notes"):
        parts += [""] + [f"- {note}" for note in result["notes"]]
    return "\n".join(parts) + "\n"
