"""Pictures of a segmentation run on val scenes: each scene, its true mask and the mask the model predicts.

    python benchmarks/setr_pictures.py RUN_DIR [--images 6] [--out docs/img/setr_scenes_val.png]

Uses `vitlab predict`'s sliding-window prediction and its colours (Pascal VOC's colour map) for both masks, and
adds a legend of the run's classes.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from vitlab.data.segmentation import find_segmentation_split, read_mask
from vitlab.engine.run import RunDir
from vitlab.tasks import load_task
from vitlab.tasks.segmentation.inference import palette, predict_files


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--weights", default="best")
    parser.add_argument("--images", type=int, default=6)
    parser.add_argument("--scale", type=int, default=2, help="each picture enlarged this many times")
    parser.add_argument("--out", default="docs/img/setr_scenes_val.png")
    args = parser.parse_args(argv)
    task, saved = load_task(args.run_dir)
    model = RunDir(args.run_dir).load_model(args.weights)
    classes = saved["data"]["classes"]
    colours = palette(len(classes))
    pairs, _ = find_segmentation_split(saved["data"]["path"], "val")
    columns = []
    with tempfile.TemporaryDirectory() as scratch:
        for image_path, mask_path in pairs[:args.images]:
            found = predict_files(task, model, saved, [str(image_path)], out=scratch)[0]
            truth = colours[read_mask(mask_path)]  # 255 (ignored) has its own colour in the map
            predicted = colours[np.asarray(Image.open(found["mask"]))]
            column = [Image.open(image_path).convert("RGB"), Image.fromarray(truth), Image.fromarray(predicted)]
            columns.append([p.resize((p.width * args.scale, p.height * args.scale), Image.NEAREST) for p in column])
    width, height = columns[0][0].size
    legend_height = 22 * ((len(classes) + 3) // 4) + 8
    sheet = Image.new("RGB", (width * len(columns), 3 * height + legend_height), "white")
    for i, column in enumerate(columns):
        for row, picture in enumerate(column):
            sheet.paste(picture, (i * width, row * height))
    draw = ImageDraw.Draw(sheet)
    cell = sheet.width // 4
    for index, name in enumerate(classes):
        x, y = (index % 4) * cell + 8, 3 * height + 6 + 22 * (index // 4)
        draw.rectangle([x, y, x + 16, y + 16], fill=tuple(int(c) for c in colours[index]), outline="grey")
        draw.text((x + 22, y + 3), name, fill="black")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out)
    print(f"wrote {out}: val scenes (top), true masks (middle), predicted masks (bottom)")
    return out


if __name__ == "__main__":
    main()
