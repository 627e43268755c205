"""SETR's encoder against vitlab's ViT of the same configuration, and the decoders' share of a SETR forward pass,
timed interleaved in one process.

    python benchmarks/setr_speed.py                   # the three small presets at 128 px, batch 8, 10 rounds
    python benchmarks/setr_speed.py --quick           # a smoke run

For each model: (1) the SETR encoder (its ViT, run to the taps the decoder reads) against a fresh vitlab ViT with
the same config and weights running `forward_features`, interleaved: their ratio should be 1 (the same blocks);
(2) the whole SETR forward against its encoder alone, interleaved: 1 − encoder/whole is the decoders' share
(the decoder head, the auxiliary heads in training mode, and the upsampling to the input). Both in inference
mode and for a training forward + backward. Writes benchmarks/results/setr_speed.json and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
RESULTS = Path(__file__).parent / "results"
MODELS = ("setr_naive_small", "setr_pup_small", "setr_mla_small")


def compare(name: str, batch: int, size: int, rounds: int, calls: int, overrides: dict) -> list[dict]:
    import vitlab
    from benchmarks.harness import interleaved

    torch.manual_seed(0)
    model = vitlab.create_model(name, img_size=size, **overrides)
    vit = model.config.encoder_config().build()
    vit.load_state_dict(model.backbone.state_dict(), strict=False)  # the encoder's weights (its norm is unused)
    images = torch.randn(batch, 3, size, size)
    layers = model.mla_layers if model.decoder == "mla" else (len(model.backbone.blocks) - 1, *model.aux_layers)
    rows = []
    for mode, training in (("inference", False), ("train forward + backward", True)):
        model.train(training)
        vit.train(training)

        def run(fn, training=training):
            def call():
                if training:
                    out = fn()
                    sum(t.float().mean() for t in (out if isinstance(out, list) else [out])).backward()
                else:
                    with torch.inference_mode():
                        fn()
            return call

        encoder = run(lambda: model.taps(images, layers))
        plain = run(lambda: vit.forward_features(images))
        def forward():
            out = model(images)
            return [out.logits, *out.aux_logits]  # the auxiliary heads run in training only

        whole = run(forward)
        vs_vit = interleaved(encoder, plain, rounds, calls)
        share = interleaved(encoder, whole, rounds, calls)
        rows.append({"model": name, "mode": mode, "batch": batch, "size": size,
                     "encoder_ms": 1000 * vs_vit["mine_s"], "vit_ms": 1000 * vs_vit["theirs_s"],
                     "vit_over_encoder": vs_vit["speedup_median"], "vit_over_encoder_min": vs_vit["speedup_min"],
                     "vit_over_encoder_max": vs_vit["speedup_max"], "whole_ms": 1000 * share["theirs_s"],
                     "decoder_share": 1 - 1 / share["speedup_median"]})
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}), flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| model | mode | SETR encoder ms | ViT forward_features ms | ViT / encoder (median, min–max) | "
             "whole SETR ms | decoders' share |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['model']} ({r['batch']} × {r['size']} px) | {r['mode']} | {r['encoder_ms']:.1f} | "
                     f"{r['vit_ms']:.1f} | {r['vit_over_encoder']:.2f}× ({r['vit_over_encoder_min']:.2f}–"
                     f"{r['vit_over_encoder_max']:.2f}) | {r['whole_ms']:.1f} | {r['decoder_share']:.0%} |")
    return "\n".join(lines)


def table_of(record: dict) -> str:
    """benchmarks/results/<tag>.md from what the results file records (benchmarks/report.py renders it the same
    way): the table and the machine with its ISA."""
    from benchmarks.harness import cpu_and_isa

    host = record["machine"]
    return (markdown(record["rows"]) + f"\n\n{cpu_and_isa(host)}, "
            f"{host['threads']} threads, torch {host['torch']}, fp32\n")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 blocks, 32 px, 2 rounds of 1 call")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--tag", default="setr_speed")
    from benchmarks.harness import add_beside_option, machine, write_results

    add_beside_option(parser)
    args = parser.parse_args(argv)
    overrides = {"depth": 2} if args.quick else {}
    size, batch, rounds, calls = (32, 2, 2, 1) if args.quick else (args.size, args.batch, args.rounds, args.calls)
    rows = [row for name in args.models for row in compare(name, batch, size, rounds, calls, overrides)]
    record = {"machine": machine(), "rows": rows}
    write_results(Path(args.out), args.tag, record, table_of(record), beside=args.beside)
    return rows


if __name__ == "__main__":
    main()
