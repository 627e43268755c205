"""vitlab's SETR against the official code (fudan-zvg/SETR) with the same weights, for the three decoders: an
official model with random weights is saved as mmcv saves checkpoints ({"meta", "state_dict", "optimizer"}), read
back by `vitlab.interop.model_from_checkpoint` (which works out the decoder, sizes and class count from the file),
and both run on the same images.

    python benchmarks/official_setr_parity.py --repo PATH/TO/SETR

The official repository is built on mmseg 0.6 and mmcv 1.x, neither installable on today's torch, so this is a
script that takes a checkout, not a test. It imports the official model files themselves (backbones/vit.py,
vit_mla.py, decode_heads/vit_up_head.py, vit_mla_head.py, vit_mla_auxi_head.py, decode_head.py) with the few mmcv
and mmseg names they import stood in for: registries that only decorate, `build_norm_layer` giving BatchNorm2d (the
configs' SyncBN on one process), `resize` as `F.interpolate`, no loss. Compared: the logits in eval mode (running
statistics randomised) and every auxiliary head's logits in training mode. Writes
benchmarks/results/official_setr_parity.json.
"""

from __future__ import annotations

import argparse
import collections.abc
import importlib.util
import sys
import tempfile
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/NAME.py`: the repository root makes `benchmarks` importable
RESULTS = Path(__file__).parent / "results"
FILES = ("backbones/helpers.py", "backbones/vit.py", "backbones/vit_mla.py", "decode_heads/decode_head.py",
         "decode_heads/vit_up_head.py", "decode_heads/vit_mla_head.py", "decode_heads/vit_mla_auxi_head.py")


def _module(name: str, path: list[str] | None = None, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    if path is not None:
        module.__path__ = path
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def import_official(repo: Path) -> dict[str, types.ModuleType]:
    """The official model modules, imported from the checkout with stand-ins for what they take from mmcv/mmseg."""

    class Registry:
        def register_module(self, *args, **kwargs):
            return lambda cls: cls

    def build_norm_layer(cfg, channels):
        assert cfg["type"] in ("BN", "SyncBN"), cfg
        return "bn", nn.BatchNorm2d(channels)

    def passthrough(*args, **kwargs):
        return lambda fn: fn

    _module("torch._six", container_abcs=collections.abc)  # removed from torch; the official vit.py imports it
    _module("mmcv", [])
    _module("mmcv.cnn", build_norm_layer=build_norm_layer, normal_init=lambda module, std=0.01: None)
    _module("mmcv.runner", auto_fp16=passthrough, force_fp32=passthrough)
    _module("mmseg", [])
    _module("mmseg.core", build_pixel_sampler=lambda *a, **k: None)
    _module("mmseg.ops", resize=lambda input, size=None, scale_factor=None, mode="nearest", align_corners=None,
            warning=True: F.interpolate(input, size, scale_factor, mode, align_corners))
    models = repo / "mmseg" / "models"
    _module("mmseg.models", [str(models)])
    _module("mmseg.models.builder", BACKBONES=Registry(), HEADS=Registry(), build_loss=lambda cfg: nn.Identity())
    _module("mmseg.models.losses", accuracy=lambda *a, **k: None)
    _module("mmseg.models.backbones", [str(models / "backbones")])
    _module("mmseg.models.decode_heads", [str(models / "decode_heads")])
    loaded = {}
    for file in FILES:
        name = "mmseg.models." + file.removesuffix(".py").replace("/", ".")
        spec = importlib.util.spec_from_file_location(name, models / file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        loaded[Path(file).stem] = module
    return loaded


class Official(nn.Module):
    """mmseg's EncoderDecoder as far as the state dict goes: backbone, decode_head, auxiliary_head.{i}."""

    def __init__(self, backbone, decode_head, auxiliary_heads):
        super().__init__()
        self.backbone, self.decode_head = backbone, decode_head
        self.auxiliary_head = nn.ModuleList(auxiliary_heads)

    def forward(self, images):
        features = self.backbone(images)
        return self.decode_head(features), [head(features) for head in self.auxiliary_head]


def build_official(official, decoder: str, vitlab_model, img_size: int, patch: int, dim: int, depth: int,
                   heads: int, classes: int) -> Official:
    bn = {"type": "SyncBN", "requires_grad": True}
    common = {"model_name": "vit_large_patch16_384", "img_size": img_size, "patch_size": patch, "embed_dim": dim,
              "depth": depth, "num_heads": heads, "num_classes": classes, "drop_rate": 0.0, "norm_cfg": bn,
              "random_init": True}
    head = {"channels": 512, "num_classes": classes, "img_size": img_size, "align_corners": False, "norm_cfg": bn}
    if decoder == "mla":
        backbone = official["vit_mla"].VIT_MLA(mla_channels=256, mla_index=vitlab_model.mla_layers, **common)
        decode = official["vit_mla_head"].VIT_MLAHead(in_channels=dim, mla_channels=256, mlahead_channels=128,
                                                      **head)
        aux = [official["vit_mla_auxi_head"].VIT_MLA_AUXIHead(in_channels=256, in_index=i,
                                                              **{k: v for k, v in head.items() if k != "norm_cfg"})
               for i in vitlab_model.aux_layers]
    else:
        backbone = official["vit"].VisionTransformer(**common)
        up = official["vit_up_head"].VisionTransformerUpHead
        if decoder == "naive":  # the Cityscapes configs: 1x1 convs in the head and the auxiliary heads
            decode = up(in_channels=dim, in_index=depth - 1, embed_dim=dim, num_conv=2, num_upsampe_layer=1,
                        conv3x3_conv1x1=False, **head)
            aux = [up(in_channels=dim, in_index=i, embed_dim=dim, num_conv=2, num_upsampe_layer=1,
                      conv3x3_conv1x1=False, **head) for i in vitlab_model.aux_layers]
        else:
            decode = up(in_channels=dim, in_index=depth - 1, embed_dim=dim, num_conv=4, num_upsampe_layer=4, **head)
            aux = [up(in_channels=dim, in_index=i, embed_dim=dim, num_conv=2, num_upsampe_layer=2, **head)
                   for i in vitlab_model.aux_layers]
    model = Official(backbone, decode, aux)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("running_mean"):
                buffer.normal_(0, 0.2)
            elif name.endswith("running_var"):
                buffer.uniform_(0.5, 2.0)
    return model


def compare(official, decoder: str) -> dict:
    from vitlab.interop import model_from_checkpoint
    from vitlab.models.setr import SETRConfig

    # the official PUP is four 2x stages, so 16-pixel patches; its heads are 256 wide, MLA's 256/128
    img_size, patch, dim, depth, heads, classes = 64, 16, 192, 4, 3, 5
    layout = SETRConfig(num_classes=classes, decoder=decoder, encoder="vit_tiny_patch16_224", img_size=img_size,
                        patch_size=patch, depth=depth).build()  # only for its layer choices, passed to the official
    torch.manual_seed(0)
    reference = build_official(official, decoder, layout, img_size, patch, dim, depth, heads, classes)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "official.pth"
        torch.save({"meta": {"mmcv_version": "1.2.7", "iter": 40000}, "state_dict": reference.state_dict(),
                    "optimizer": {"state": {}, "param_groups": [{"lr": 0.01}]}}, path)
        model = model_from_checkpoint(path)
    images = torch.randn(2, 3, img_size, img_size)
    reference.eval()
    model.eval()
    with torch.no_grad():
        ref_logits, _ = reference(images)
        logits = model(images).logits
        reference.train()
        model.train()
        _, ref_aux = reference(images)
        aux = model(images).aux_logits
    return {"decoder": decoder, "config": model.config.__dict__ | {"aux_layers": list(model.aux_layers),
                                                                  "mla_layers": list(model.mla_layers)},
            "logits_shape": list(logits.shape), "logits_max_abs_diff": (logits - ref_logits).abs().max().item(),
            "logits_scale": ref_logits.abs().max().item(), "aux_heads": len(aux),
            "aux_max_abs_diff": max((a - r).abs().max().item() for a, r in zip(aux, ref_aux, strict=True))}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="a checkout of github.com/fudan-zvg/SETR")
    parser.add_argument("--out", default=str(RESULTS / "official_setr_parity.json"))
    from benchmarks.harness import add_beside_option, machine, write_json

    add_beside_option(parser)
    args = parser.parse_args(argv)
    official = import_official(args.repo.resolve())
    rows = [compare(official, decoder) for decoder in ("naive", "pup", "mla")]
    print("| decoder | logits max |diff| | logits max |x| | aux heads | aux max |diff| |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['decoder']} | {row['logits_max_abs_diff']:.2e} | {row['logits_scale']:.2f} | "
              f"{row['aux_heads']} | {row['aux_max_abs_diff']:.2e} |")
    out = Path(args.out)
    write_json(out, {"machine": machine(), "official": "fudan-zvg/SETR", "results": rows}, beside=args.beside,
               default=str)
    print(f"wrote {out}")
    return rows


if __name__ == "__main__":
    main()
