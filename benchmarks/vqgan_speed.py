"""VQGAN speed: the autoencoder's training step against diffusers' `VQModel` of the same configuration, and the GPT
prior's sampling with the KV cache against recomputing the prefix.

    python benchmarks/vqgan_speed.py              # about 3 minutes on 2 cores
    python benchmarks/vqgan_speed.py --quick      # a smoke run

Training step: the same weights in both (diffusers' loaded into vitlab through `model_from_checkpoint`), the same
batch, in [-1, 1]; forward, L1 + the quantiser's loss, backward, an Adam step (β = (0.5, 0.9)). No discriminator:
diffusers has none, so the two do the same work. The two alternate step by step, in rounds whose order rotates;
each round's time ratio is kept, and the table gives the median over rounds and the range. Mean seconds per step
(this machine's step times drift; the mean is what a training run pays).

Sampling: `gpt_prior_small` (random weights) draws a batch of 8×8 code grids with and without the cache, the same
draws (equal codes are checked), interleaved the same way.

Writes benchmarks/results/vqgan_speed.{json,md}. One benchmark at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = Path(__file__).parent / "results"


def diffusers_twin(config):
    """A diffusers VQModel with vitlab's configuration (GroupNorm, attention where vitlab has it)."""
    from diffusers import VQModel

    levels = len(config.ch_mult)
    attention = [config.resolution // 2 ** i in config.attn_resolutions for i in range(levels)]
    return VQModel(
        in_channels=config.in_chans, out_channels=config.out_chans or config.in_chans,
        down_block_types=tuple("AttnDownEncoderBlock2D" if a else "DownEncoderBlock2D" for a in attention),
        up_block_types=tuple("AttnUpDecoderBlock2D" if a else "UpDecoderBlock2D" for a in reversed(attention)),
        block_out_channels=tuple(config.ch * m for m in config.ch_mult), layers_per_block=config.num_res_blocks,
        latent_channels=config.z_channels, num_vq_embeddings=config.num_codes, norm_num_groups=config.num_groups,
        vq_embed_dim=config.embed_dim, sample_size=config.resolution, mid_block_add_attention=config.mid_attention)


def vitlab_step(model, optimizer, x):
    out = model(x)
    loss = (x - out.reconstruction).abs().mean() + out.quantizer_loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def diffusers_step(model, optimizer, x):
    latents = model.encode(x).latents
    quantized, commit_loss, _ = model.quantize(latents)
    reconstruction = model.decoder(model.post_quant_conv(quantized))
    loss = (x - reconstruction).abs().mean() + commit_loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def interleaved(calls: dict, rounds: int, per_round: int) -> dict:
    """calls: name -> zero-argument function. Returns name -> the mean seconds per call of each round."""
    names = list(calls)
    for fn in calls.values():  # warm up
        fn()
    times = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            start = time.perf_counter()
            for _ in range(per_round):
                calls[name]()
            times[name].append((time.perf_counter() - start) / per_round)
    return times


def ratio_summary(times: dict, fast: str, slow: str) -> dict:
    ratios = [b / a for a, b in zip(times[fast], times[slow])]
    return {"median": statistics.median(ratios), "range": [min(ratios), max(ratios)]}


def table_of(record: dict) -> str:
    """benchmarks/results/vqgan_speed.md from what the results file records (benchmarks/report.py renders it the
    same way)."""
    t, s, host = record["train_speedup_vs_diffusers"], record["cache_speedup"], record["machine"]
    return "\n".join([
        f"VQGAN speed ({record['model']}, batch {record['batch_size']}, {record['threads']} threads, "
        f"{record['rounds']} interleaved rounds; {host['cpu']}, {host.get('cpu_capability') or 'ISA not recorded'}, "
        f"torch {host['torch']})", "",
        "| what | vitlab | reference | speed-up (median over rounds, range) |", "| --- | --- | --- | --- |",
        f"| autoencoder training step (s) | {record['train_step_s']['vitlab']:.3f} | diffusers VQModel "
        f"{record['train_step_s']['diffusers']:.3f} | {t['median']:.2f}× ({t['range'][0]:.2f}–{t['range'][1]:.2f}) |",
        f"| sampling {record['samples']} × {record['sequence']} codes (s) | "
        f"cached {record['sampling_s']['cached']:.3f} | "
        f"recomputed {record['sampling_s']['recomputed']:.3f} | {s['median']:.2f}× "
        f"({s['range'][0]:.2f}–{s['range'][1]:.2f}) |", "",
        f"Cached sampling drew the same codes as recomputed sampling: {record['cached_equals_recomputed']}.", ""])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="vqgan_small")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4, help="training steps per contender per round")
    parser.add_argument("--samples", type=int, default=64, help="sequences drawn per sampling call")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    from benchmarks.harness import add_beside_option, write_json, write_table

    add_beside_option(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_size, args.rounds, args.steps, args.samples = 4, 2, 1, 4

    from vitlab.engine.speed import tune_process

    tune_process()
    from vitlab.interop import model_from_checkpoint
    from vitlab.models import create_model, get_config

    torch.manual_seed(0)
    config = get_config(args.model)
    theirs = diffusers_twin(config)
    with tempfile.TemporaryDirectory() as folder:
        theirs.save_pretrained(folder)
        mine = model_from_checkpoint(folder)
    mine.train()
    theirs.train()
    x = torch.rand(args.batch_size, config.in_chans, config.resolution, config.resolution) * 2 - 1
    opt_mine = torch.optim.Adam(mine.parameters(), 1e-4, betas=(0.5, 0.9))
    opt_theirs = torch.optim.Adam(theirs.parameters(), 1e-4, betas=(0.5, 0.9))
    train_times = interleaved({"vitlab": lambda: vitlab_step(mine, opt_mine, x),
                               "diffusers": lambda: diffusers_step(theirs, opt_theirs, x)}, args.rounds, args.steps)

    prior = create_model("gpt_prior_small").eval()
    labels = torch.arange(args.samples) % prior.config.num_classes
    drawn = {}

    def sample(cache: bool):
        drawn[cache] = prior.generate(labels, use_cache=cache, generator=torch.Generator().manual_seed(0))

    sample_times = interleaved({"cached": lambda: sample(True), "recomputed": lambda: sample(False)},
                               args.rounds, 1)
    same = bool(torch.equal(drawn[True], drawn[False]))

    result = {
        "model": args.model, "batch_size": args.batch_size, "rounds": args.rounds, "threads": torch.get_num_threads(),
        "train_step_s": {k: statistics.mean(v) for k, v in train_times.items()},
        "train_speedup_vs_diffusers": ratio_summary(train_times, "vitlab", "diffusers"),
        "sampling_s": {k: statistics.mean(v) for k, v in sample_times.items()},
        "cache_speedup": ratio_summary(sample_times, "cached", "recomputed"), "cached_equals_recomputed": same,
        "samples": args.samples, "sequence": prior.seq_len,
        "parameters": {"vitlab": sum(p.numel() for p in mine.parameters()),
                       "diffusers": sum(p.numel() for p in theirs.parameters())},
    }
    record = write_json(args.out / "vqgan_speed.json", result, beside=args.beside)
    table = table_of(record)
    write_table(args.out / "vqgan_speed.md", table)
    print(table)
    return result


if __name__ == "__main__":
    main()
