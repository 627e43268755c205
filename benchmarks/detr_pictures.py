"""Pictures of a detection run on val scenes: each scene's ground truth above what the model predicts.

    python benchmarks/detr_pictures.py RUN_DIR [--images 6] [--threshold 0.3] [--out docs/img/detr_scenes_val.png]

Uses `vitlab predict`'s drawing (boxes, class names, scores) for both rows; the ground truth is drawn with
score 1.00.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from PIL import Image
from torchvision.transforms.v2 import functional as TF

from vitlab.engine.run import RunDir
from vitlab.tasks import load_task
from vitlab.tasks.detection.inference import draw, predict_files


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--weights", default="last")
    parser.add_argument("--images", type=int, default=6)
    parser.add_argument("--threshold", type=float, default=0.3)
    parser.add_argument("--out", default="docs/img/detr_scenes_val.png")
    args = parser.parse_args(argv)
    task, saved = load_task(args.run_dir)
    model = RunDir(args.run_dir).load_model(args.weights)
    root = Path(saved["data"]["path"])
    coco = json.loads((root / "annotations" / "instances_val.json").read_text())
    classes, to_label = saved["data"]["classes"], {c: i for i, c in enumerate(saved["data"]["category_ids"])}
    tiles = []
    scratch = Path(args.out).parent / ".detr_pictures"
    for image in sorted(coco["images"], key=lambda i: i["id"])[:args.images]:
        path = root / "images" / "val" / image["file_name"]
        pixels = TF.to_dtype(TF.to_image(Image.open(path).convert("RGB")), torch.float32, scale=True)
        anns = [a for a in coco["annotations"] if a["image_id"] == image["id"]]
        truth = {"boxes": torch.tensor([[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in anns)]).view(-1, 4),
                 "labels": torch.tensor([to_label[a["category_id"]] for a in anns], dtype=torch.int64),
                 "scores": torch.ones(len(anns))}
        top = Image.open(draw(pixels, truth, classes, scratch / f"truth-{image['id']}.png"))
        found = predict_files(task, model, saved, [str(path)], out=str(scratch), threshold=args.threshold)[0]
        bottom = Image.open(found["output"])
        tiles.append((top.copy(), bottom.copy()))
    width, height = tiles[0][0].size
    sheet = Image.new("RGB", (width * len(tiles), 2 * height), "white")
    for i, (top, bottom) in enumerate(tiles):
        sheet.paste(top, (i * width, 0))
        sheet.paste(bottom, (i * width, height))
    out = Path(args.out)
    sheet.save(out)
    for file in scratch.glob("*.png"):
        file.unlink()
    scratch.rmdir()
    print(f"wrote {out}: ground truth (top) and predictions above {args.threshold} (bottom)")
    return out


if __name__ == "__main__":
    main()
