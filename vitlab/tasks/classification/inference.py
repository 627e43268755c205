"""A finished classification run at work: its held-out evaluation (`vitlab eval`) and top-k predictions for image
files (`vitlab predict`), each through the run's own preprocessing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...engine.speed import check_bf16, maybe_compile
from .evaluate import evaluate, with_test_time_flip
from .reports import confusion_text, plot_confusion


def eval_loader_for_run(task, saved: dict[str, Any], data: str | None = None, data_dir: str | None = None,
                        batch_size: int = 256, split: str = "test"):
    """(loader, classes, split) of a part of a run's data (or of other data, seen through the run's own
    preprocessing): `split` "test" or "val"; the test part falls back to the validation part where the data has
    none, and the returned split says which was read."""
    data_record = saved["data"]
    bundle = task.datasets(augment=False, saved=data_record, data=data, data_dir=data_dir or data_record["data_dir"])
    if bundle.classes != data_record["classes"]:
        raise ValueError(f"the data's classes {bundle.classes} differ from the classes the run was trained on "
                         f"{data_record['classes']}; evaluate on data with the same class folders")
    _, val, test = task.loaders(bundle, eval_batch_size=batch_size)
    if split == "test" and test is not None:
        return test, bundle.classes, "test"
    return val, bundle.classes, "val"


def evaluate_run(task, model: nn.Module, saved: dict[str, Any], run_dir: str | Path, data: str | None = None,
                 data_dir: str | None = None, batch_size: int = 256, bf16: bool = False, compile: bool = False,
                 plot: bool = True, split: str = "test", test_time_flip: bool | None = None) -> dict[str, Any]:
    if bf16:
        check_bf16("cpu")
    loader, classes, split = eval_loader_for_run(task, saved, data, data_dir, batch_size, split)
    flip = run_flips(saved) if test_time_flip is None else test_time_flip
    result = evaluate(with_test_time_flip(maybe_compile(model, compile), flip), loader, bf16=bf16,
                      num_classes=len(classes))
    result["test_time_flip"] = flip
    result["classes"] = classes
    result["split"] = split
    result["run_dir"] = str(run_dir)
    if plot:
        name = "confusion.png" if data is None else "confusion-other-data.png"  # keep the run's own picture
        result["confusion_png"] = str(plot_confusion(result["confusion"], classes, Path(run_dir) / name))
    return result


def run_flips(saved: dict[str, Any]) -> bool:
    """Whether the run scores images with test-time flip (runs from before the option: no)."""
    return bool(saved.get("config", {}).get("test_time_flip"))


def format_evaluation(result: dict[str, Any], which: str) -> str:
    classes = result["classes"]
    flip = ", with test-time flip" if result.get("test_time_flip") else ""
    lines = [f"accuracy: {result['accuracy']:.4f} on {result['num_images']} {result.get('split', 'test')} images "
             f"({result['run_dir']}, {which}{flip})",
             "per-class accuracy:"]
    lines += [f"  {name:<20} {acc:.4f}" for name, acc in zip(classes, result["per_class_accuracy"])]
    lines += ["confusion matrix (rows: true class, columns: predicted):", confusion_text(result["confusion"], classes)]
    return "\n".join(lines)


@torch.inference_mode()
def predict_files(task, model: nn.Module, saved: dict[str, Any], paths: list[str], top_k: int = 3
                  ) -> list[dict[str, Any]]:
    """Top-k classes of each image file, preprocessed as the run's evaluation data was."""
    from ...data.images import INPUT_HINT, read_image
    from ...data.transforms import build_eval_transform
    from ..base import class_names

    data = saved["data"]
    transform = build_eval_transform(data["img_size"], data["mean"], data["std"], data["channels"])
    pictures = [read_image(path, data["channels"], hint=INPUT_HINT) for path in paths]
    images = torch.stack([transform(picture) for picture in pictures])  # (B, C, H, W)
    probs = with_test_time_flip(model, run_flips(saved))(images).softmax(-1)
    k = min(top_k, probs.shape[-1])
    values, indices = probs.topk(k, dim=-1)
    labels = class_names(model, saved)
    return [
        {"image": str(path),
         "top_k": [{"class": labels[i], "index": int(i), "probability": float(p)}
                   for p, i in zip(row_p.tolist(), row_i.tolist())]}
        for path, row_p, row_i in zip(paths, values, indices)
    ]


def format_prediction(item: dict[str, Any]) -> str:
    ranked = ", ".join(f"{p['class']} {p['probability']:.3f}" for p in item["top_k"])
    return f"{item['image']}: {ranked}"


# ---- the server ----------------------------------------------------------------------------------------------------
def answer(task, model: nn.Module, saved: dict[str, Any], image: Path, folder: Path, context: dict[str, Any],
           top_k: int = 3, attention: bool = True) -> dict[str, Any]:
    from ...data.images import INPUT_HINT, read_image

    item = predict_files(task, model, saved, [str(image)], top_k=top_k)[0]
    result: dict[str, Any] = {"top_k": item["top_k"]}
    if attention:
        picture = read_image(str(image), saved["data"]["channels"], hint=INPUT_HINT)
        result["attention"] = attention_pictures(model, saved, picture)
    return result


def attention_pictures(model: nn.Module, saved: dict[str, Any], image) -> dict[str, Any] | None:
    """The rollout over the image and each head's class-token map of the last layer, as pictures (None for a
    classifier without attention blocks, such as a ResNet)."""
    from ...viz.attention import image_attention
    from ...viz.render import attention_panels

    if not hasattr(model, "blocks"):
        return None
    shown, rollout, heads, _ = image_attention(model, image, saved["data"])
    panels = attention_panels(shown, rollout, heads)
    return {"rollout_png": panels[1], "heads_png": list(panels[2:]), "layer": len(model.blocks) - 1}


def examples(saved: dict[str, Any], count: int) -> list[Path]:
    """One image of each of the first classes of the run's image folder (its test/ or val/ split where it has one),
    or the Fashion-MNIST examples beside the code for a run on one-channel images."""
    from ..base import DOCS_EXAMPLES, IMAGE_SUFFIXES

    data = saved.get("data", {})
    if data.get("name") and Path(data["name"]).is_dir():
        root = Path(data["name"])
        split = next((root / name for name in ("test", "val") if (root / name).is_dir()), root)
        found = []
        for name in list(data.get("classes", []))[:count]:
            found += sorted(p for p in (split / name).glob("*") if p.suffix.lower() in IMAGE_SUFFIXES)[:1]
        return found
    if DOCS_EXAMPLES.is_dir() and data.get("channels", 3) == 1:
        return sorted(DOCS_EXAMPLES.glob("*.png"))[:count]
    return []
