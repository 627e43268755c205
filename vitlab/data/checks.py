"""Up-front checks of a whole split: a COCO instances file with its image folder, or image/mask pairs.

A run reads its annotations when it starts, so every problem is found then, all at once, and not as a crash on
the batch that happens to hold the bad box (a box written as a string stops training with "could not convert
string to float"; a NaN box trains silently on NaN losses; a mask of the wrong size fails mid-epoch).

    report, coco = check_coco(image_dir, "annotations/instances_train.json")
    print(report.format())           # counts, then the problems by kind: how many, the first few, what to do
    coco = keep_good(report, coco, skip_bad_images=False, skip_bad_annotations=True)   # or DataCheckError

Each problem has a kind, and each kind says what to do (`FIXES`) and which option may drop the bad entries instead
(`DROPPED_BY`): `skip_bad_annotations` drops a bad annotation, a bad image entry with its annotations, or a bad
mask's pair; `skip_bad_images` drops an image missing on disk or unreadable, with its annotations. Kinds that no
option may drop (a file that is not COCO, a category listed twice) always stop the run.

The COCO check is linear in the file and touches the file system once per image (one stat; decoding every image
only when asked, as `vitlab check-data` and `skip_bad_images` do): 100,000 annotations take about a second.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .images import DEFAULT_MAX_PIXELS, BadImageError, image_size, open_image, read_image

__all__ = ["DROPPED_BY", "FIXES", "CheckReport", "DataCheckError", "Problem", "check_coco", "check_image_files",
           "check_masks", "keep_good"]

FIRST = 5  # problems shown of each kind

# what to do about each kind of problem
FIXES = {
    "not a COCO file": "give a COCO instances JSON: an object with `images`, `annotations` and `categories` lists",
    "category entry incomplete": "give every category an `id` (an integer) and a `name`",
    "duplicate category id": "give every category its own id",
    "image entry incomplete": "give every image entry an `id` and a `file_name` (relative to the image folder)",
    "duplicate image id": "give every image entry its own id",
    "image missing": "put the file in the image folder (or point --data at the right folder), or remove the entry",
    "unreadable image": "replace the file with a readable image, or remove it",
    "annotation incomplete": "give every annotation an `id`, an `image_id`, a `bbox` and a `category_id`",
    "duplicate annotation id": "give every annotation its own id",
    "bad box": "write `bbox` as [x, y, width, height]: four finite numbers, in pixels",
    "box without area": "give the box a positive width and height, or remove the annotation",
    "unknown image": "point `image_id` at an entry of `images`, or remove the annotation",
    "unknown category": "point `category_id` at an entry of `categories`, or add the category",
    "mask missing": "add the mask (a single-channel PNG of the image's stem), or remove the image",
    "mask unreadable": "replace the mask with a single-channel (L, P or I) PNG of class indices",
    "mask size differs": "save the mask at its image's size",
    "mask value out of range": "fix the mask's values (0 … classes − 1, 255 to ignore), or give the right number of "
                               "classes",
}
DROPPED_BY = {
    "image entry incomplete": "skip_bad_annotations", "duplicate image id": "skip_bad_annotations",
    "annotation incomplete": "skip_bad_annotations", "duplicate annotation id": "skip_bad_annotations",
    "bad box": "skip_bad_annotations", "box without area": "skip_bad_annotations",
    "unknown image": "skip_bad_annotations", "unknown category": "skip_bad_annotations",
    "mask missing": "skip_bad_annotations", "mask unreadable": "skip_bad_annotations",
    "mask size differs": "skip_bad_annotations", "mask value out of range": "skip_bad_annotations",
    "image missing": "skip_bad_images", "unreadable image": "skip_bad_images",
}


@dataclass(frozen=True)
class Problem:
    """One problem: the file it is in, the entry (an image or annotation id, a pair's stem), what is wrong."""

    file: str
    entry: str
    detail: str

    def __str__(self) -> str:
        return f"{self.file}: {self.entry + ' ' if self.entry else ''}{self.detail}"


@dataclass
class CheckReport:
    """What a check found in one split. `counts`: what it holds ("images": 16, ...); `problems`: kind -> every
    problem of that kind; `bad`: kind -> the positions (in the split's own list) of the entries it would drop."""

    title: str
    counts: dict[str, int] = field(default_factory=dict)
    problems: dict[str, list[Problem]] = field(default_factory=dict)
    bad: dict[str, dict[str, set[int]]] = field(default_factory=dict)  # kind -> list name -> positions

    def add(self, kind: str, file: str | os.PathLike[str], entry: str, detail: str,
            drop: tuple[str, int] | None = None) -> None:
        """Record a problem; `drop`: (the list it is in, its position) of the entry that skipping would drop."""
        self.problems.setdefault(kind, []).append(Problem(str(file), entry, detail))
        if drop is not None:
            self.bad.setdefault(kind, {}).setdefault(drop[0], set()).add(drop[1])

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def num_problems(self) -> int:
        return sum(len(found) for found in self.problems.values())

    def format(self, first: int = FIRST) -> str:
        """The title and counts on one line, then each kind: its count, what to do, the first few problems."""
        counts = ", ".join(f"{number:,} {what}" for what, number in self.counts.items())
        lines = [f"{self.title}: {counts}" if counts else self.title]
        if self.ok:
            return lines[0] + "; no problems found"
        lines[0] += f"; {self.num_problems:,} problem(s):"
        for kind, found in self.problems.items():
            lines.append(f"  {len(found):,} × {kind}: {FIXES.get(kind, 'fix it')}")
            lines += [f"    {problem}" for problem in found[:first]]
            if len(found) > first:
                lines.append(f"    … and {len(found) - first:,} more")
        return "\n".join(lines)

    def blocking(self, skip_bad_images: bool = False, skip_bad_annotations: bool = False) -> list[str]:
        """The kinds of problem that the given options do not drop."""
        allowed = {"skip_bad_images": skip_bad_images, "skip_bad_annotations": skip_bad_annotations}
        return [kind for kind in self.problems if not allowed.get(DROPPED_BY.get(kind, ""), False)]

    def raise_unless_skipped(self, skip_bad_images: bool = False, skip_bad_annotations: bool = False) -> None:
        """DataCheckError listing every problem, unless the options drop every kind found."""
        if self.blocking(skip_bad_images, skip_bad_annotations):
            raise DataCheckError(self)

    def dropped(self, list_name: str) -> set[int]:
        """Positions in `list_name` that skipping drops (every kind's)."""
        return set().union(*(by_list.get(list_name, set()) for by_list in self.bad.values()))

    def warning_reasons(self) -> dict[str, list[str]]:
        """kind -> the problems, as text, for `warn_skipped`."""
        return {kind: [str(problem) for problem in found] for kind, found in self.problems.items()}


class DataCheckError(ValueError):
    """A split with problems: the message lists them all, grouped by kind, with what to do."""

    def __init__(self, report: CheckReport) -> None:
        self.report = report
        options = sorted({DROPPED_BY[kind] for kind in report.problems if kind in DROPPED_BY})
        flags = " or ".join(f"--{name.replace('_', '-')}" for name in options)
        skip = f", or pass {flags} to leave the bad entries out" if flags else ""
        if report.num_problems == 1:
            (kind, (problem,)), = report.problems.items()
            message = f"{problem}; {FIXES.get(kind, 'fix it')}{skip}"
        else:
            message = f"{report.format()}\nFix these{skip}."
        super().__init__(message)


# -- COCO ----------------------------------------------------------------------------------------------------------
def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _hashable(value: Any) -> bool:
    return isinstance(value, int | str) and not isinstance(value, bool)


def _label(entry: dict[str, Any], index: int, what: str) -> str:
    return f"{what} {entry['id']}" if isinstance(entry, dict) and _hashable(entry.get("id")) else \
        f"{what} entry #{index}"


def load_coco(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed instances file, or FileNotFoundError / DataCheckError saying why not."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no COCO annotations at {path}; give the instances JSON (e.g. "
                                f"annotations/instances_train.json)")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        report = CheckReport(f"COCO annotations {path}")
        report.add("not a COCO file", path, "", f"is not valid JSON ({error})")
        raise DataCheckError(report) from error


def check_coco(image_dir: str | os.PathLike[str], annotations: str | os.PathLike[str], decode: bool = False,
               max_pixels: int = DEFAULT_MAX_PIXELS, coco: dict[str, Any] | None = None
               ) -> tuple[CheckReport, dict[str, Any]]:
    """Check a COCO split: the instances file `annotations` (already parsed: `coco`) and the images it lists in
    `image_dir`. Every image is stat'ed once; with `decode` each is also fully decoded (slow on a large set).
    Returns the report (every problem, nothing raised for them) and the parsed file."""
    path, image_dir = Path(annotations), Path(image_dir)
    coco = load_coco(path) if coco is None else coco
    report = CheckReport(f"COCO annotations {path} (images in {image_dir})")
    missing = [key for key in ("images", "annotations", "categories") if not isinstance(coco, dict)
               or not isinstance(coco.get(key), list)]
    if missing:
        report.add("not a COCO file", path, "", f"has no {', '.join(missing)} list (it is not a COCO instances file)")
        return report, coco
    categories = _check_categories(report, path, coco["categories"])
    listed = {entry.get("id") for entry in coco["images"] if isinstance(entry, dict) and _hashable(entry.get("id"))}
    good_images = _check_images(report, path, image_dir, coco["images"], decode, max_pixels)
    _check_annotations(report, path, coco["annotations"], good_images, listed, categories)
    report.counts = {"images": len(coco["images"]), "annotations": len(coco["annotations"]),
                     "categories": len(coco["categories"])}
    return report, coco


def _check_categories(report: CheckReport, path: Path, categories: list[Any]) -> set[Any]:
    seen: Counter = Counter()
    for index, category in enumerate(categories):
        if not isinstance(category, dict) or not _hashable(category.get("id")) or "name" not in category:
            report.add("category entry incomplete", path, _label(category, index, "category"),
                       f"is {json.dumps(category)[:80]}")
            continue
        seen[category["id"]] += 1
        if seen[category["id"]] == 2:
            report.add("duplicate category id", path, f"category {category['id']}", "is listed more than once")
    return set(seen)


def _check_images(report: CheckReport, path: Path, image_dir: Path, images: list[Any], decode: bool,
                  max_pixels: int) -> dict[Any, int]:
    """Image id -> its position, of the entries that are well-formed and unique (their files checked too)."""
    ids = Counter(entry.get("id") for entry in images if isinstance(entry, dict) and _hashable(entry.get("id")))
    good: dict[Any, int] = {}
    for index, entry in enumerate(images):
        label = _label(entry, index, "image")
        if not isinstance(entry, dict) or not _hashable(entry.get("id")) or \
                not isinstance(entry.get("file_name"), str) or not entry["file_name"]:
            lacks = [key for key in ("id", "file_name") if not isinstance(entry, dict) or key not in entry]
            detail = f"has no {' and no '.join(lacks)}" if lacks else f"is {json.dumps(entry)[:80]}"
            report.add("image entry incomplete", path, label, detail, ("images", index))
            continue
        if ids[entry["id"]] > 1:
            report.add("duplicate image id", path, label, f"({entry['file_name']}) shares its id with "
                       f"{ids[entry['id']] - 1} other entr{'y' if ids[entry['id']] == 2 else 'ies'}",
                       ("images", index))
            continue
        file = image_dir / entry["file_name"]
        if not file.is_file():
            report.add("image missing", file, label, "is listed in the annotations but is not on disk",
                       ("images", index))
            continue
        if decode:
            try:
                read_image(file, None, max_pixels)
            except BadImageError as error:
                report.add("unreadable image", file, label, f"{error.reason}", ("images", index))
                continue
        good[entry["id"]] = index
    return good


def _check_annotations(report: CheckReport, path: Path, annotations: list[Any], good_images: dict[Any, int],
                       listed: set[Any], categories: set[Any]) -> None:
    """Each annotation's fields; `good_images`: the ids of the images that passed, `listed`: every id listed (an
    annotation of a listed but bad image goes with its image, and is not reported again)."""
    ids = Counter(ann.get("id") for ann in annotations if isinstance(ann, dict) and _hashable(ann.get("id")))
    repeated: set[Any] = set()
    for index, ann in enumerate(annotations):
        label, drop = _label(ann, index, "annotation"), ("annotations", index)
        lacks = [key for key in ("id", "image_id", "bbox", "category_id") if not isinstance(ann, dict)
                 or key not in ann]
        if lacks:
            report.add("annotation incomplete", path, label, f"has no {', '.join(lacks)}", drop)
            continue
        label += f" (image {ann['image_id']})"
        if _hashable(ann["id"]) and ids[ann["id"]] > 1:
            if ann["id"] in repeated:  # the first keeps its id; each later one is the problem
                report.add("duplicate annotation id", path, label, "repeats an earlier annotation's id", drop)
                continue
            repeated.add(ann["id"])
        box = ann["bbox"]
        if not isinstance(box, list | tuple) or len(box) != 4 or not all(_is_number(v) for v in box):
            report.add("bad box", path, label, f"has bbox {json.dumps(box)[:60]}, not four finite numbers", drop)
        elif box[2] <= 0 or box[3] <= 0:
            report.add("box without area", path, label, f"has bbox {json.dumps(box)}: width and height must be "
                       f"above 0", drop)
        elif not _hashable(ann["image_id"]) or ann["image_id"] not in good_images:
            if not _hashable(ann["image_id"]) or ann["image_id"] not in listed:
                report.add("unknown image", path, label, f"names image_id {json.dumps(ann['image_id'])}, which "
                           f"is not among the images", drop)
        elif not _hashable(ann["category_id"]) or ann["category_id"] not in categories:
            report.add("unknown category", path, label, f"has category_id {json.dumps(ann['category_id'])}, "
                       f"which is not among the categories {sorted(categories, key=str)[:10]}", drop)


def keep_good(report: CheckReport, coco: dict[str, Any], skip_bad_images: bool = False,
              skip_bad_annotations: bool = False, warn: bool = True) -> dict[str, Any]:
    """The COCO dictionary without the bad entries: DataCheckError unless the options drop every kind found, and
    then a warning that says how many of each kind were left out. An image dropped takes its annotations."""
    if report.ok:
        return coco
    report.raise_unless_skipped(skip_bad_images, skip_bad_annotations)
    bad_images = report.dropped("images")
    images = [entry for index, entry in enumerate(coco["images"]) if index not in bad_images]
    kept_ids = {entry["id"] for entry in images}
    bad_annotations = report.dropped("annotations")
    annotations = [ann for index, ann in enumerate(coco["annotations"])
                   if index not in bad_annotations and ann["image_id"] in kept_ids]
    if warn:
        from .images import warn_skipped

        warn_skipped(report.title, report.warning_reasons())
    return {**coco, "images": images, "annotations": annotations}


# -- masks ---------------------------------------------------------------------------------------------------------
def _mask_values(path: Path) -> np.ndarray:
    """The mask's class indices (H, W), read as segmentation.read_mask reads them; BadImageError if unreadable,
    ValueError if it holds colours."""
    with open_image(path, hint="replace the mask") as mask:
        if mask.mode not in ("L", "P", "I", "I;16"):
            raise ValueError(f"is a {mask.mode} image, not one class index per pixel (a single-channel or palette "
                             f"PNG)")
        return np.asarray(mask, dtype=np.int64)


def check_masks(pairs: Iterable[tuple[Path, Path]], num_classes: int | None, title: str, ignore_index: int = 255,
                decode_images: bool = False, max_pixels: int = DEFAULT_MAX_PIXELS) -> CheckReport:
    """Check (image, mask) pairs: both files there, the mask readable and of its image's size (the image's from its
    header, not decoded, unless `decode_images`), its values below `num_classes` or `ignore_index`. The report's
    `bad["…"]["pairs"]` holds the positions of the bad pairs."""
    pairs = list(pairs)
    report = CheckReport(title, {"pairs": len(pairs)})
    for index, (image_path, mask_path) in enumerate(pairs):
        stem, drop = "", ("pairs", index)  # the file names the pair
        if not Path(image_path).is_file():
            report.add("image missing", image_path, "", "is not on disk", drop)
            continue
        try:
            size = read_image(image_path, None, max_pixels).size if decode_images else \
                image_size(image_path, max_pixels)
        except BadImageError as error:
            report.add("unreadable image", image_path, "", error.reason, drop)
            continue
        if not Path(mask_path).is_file():
            report.add("mask missing", mask_path, stem, f"is not on disk, but its image {image_path} is", drop)
            continue
        try:
            values = _mask_values(Path(mask_path))
        except (BadImageError, ValueError) as error:
            report.add("mask unreadable", mask_path, stem, getattr(error, "reason", str(error)), drop)
            continue
        if values.shape[::-1] != tuple(size):
            report.add("mask size differs", mask_path, stem, f"is {values.shape[1]}×{values.shape[0]} pixels but its "
                       f"image {image_path} is {size[0]}×{size[1]}", drop)
            continue
        if num_classes is not None:
            bad = np.unique(values[(values >= num_classes) & (values != ignore_index) | (values < 0)])
            if bad.size:
                report.add("mask value out of range", mask_path, stem, f"has values {bad[:5].tolist()}, but there "
                           f"are {num_classes} classes (0 … {num_classes - 1}, and {ignore_index} to ignore)", drop)
    return report


# -- plain image files ---------------------------------------------------------------------------------------------
def check_image_files(files: Iterable[Path], title: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> CheckReport:
    """Decode every file: the ones that fail, by kind ("image missing", "unreadable image")."""
    files = list(files)
    report = CheckReport(title, {"images": len(files)})
    for index, file in enumerate(files):
        try:
            read_image(file, None, max_pixels)
        except BadImageError as error:
            kind = "image missing" if error.kind == "missing" else "unreadable image"
            report.add(kind, file, "", error.reason, ("images", index))
    return report
