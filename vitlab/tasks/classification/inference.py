"""A finished classification run at work: its held-out evaluation (`vitlab eval`) and top-k predictions for image
files (`vitlab predict`), each through the run's own preprocessing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...engine.speed import check_bf16, maybe_compile
from ..base import class_names
from ..sources import keeps_results
from .evaluate import evaluate, with_test_time_flip
from .reports import confusion_text, plot_confusion


def eval_loader_for_run(task, saved: dict[str, Any], data: str | None = None, data_dir: str | None = None,
                        batch_size: int = 256, split: str = "test"):
    """(loader, classes, split) of a part of a run's data (or of other data, seen through the run's own
    preprocessing): `split` "test" or "val"; the test part falls back to the validation part where the data has
    none, and the returned split says which was read."""
    data_record = saved["data"]
    bundle = task.datasets(augment=False, saved=data_record, data=data,
                           data_dir=data_dir or data_record.get("data_dir"))
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
    if "source" in saved:  # a model by name, on the user's image folder: its classes matched by name
        loader, classes, split = _named_loader(saved, data, batch_size, split)
        model = LogitsOf(model, columns_by_name(class_names(model, saved), classes, saved["source"]))
    else:
        loader, classes, split = eval_loader_for_run(task, saved, data, data_dir, batch_size, split)
    flip = run_flips(saved) if test_time_flip is None else test_time_flip
    result = evaluate(with_test_time_flip(maybe_compile(model, compile), flip), loader, bf16=bf16,
                      num_classes=len(classes))
    result["test_time_flip"] = flip
    result["classes"] = classes
    result["split"] = split
    result["run_dir"] = str(run_dir)
    if plot and keeps_results(run_dir):  # a run's own folder, never one given to read
        name = "confusion.png" if data is None else "confusion-other-data.png"  # keep the run's own picture
        result["confusion_png"] = str(plot_confusion(result["confusion"], classes, Path(run_dir) / name))
    return result


def _named_loader(saved: dict[str, Any], data: str | None, batch_size: int, split: str):
    """(loader, classes, split) of an image folder for a model by name: its `split` part (test/ or val/, the other
    where one is missing), else the whole folder, each image through the model's own preprocessing."""
    from ...data.folder import ImageFolderDataset
    from ...engine.loaders import EpochDataLoader

    if not data or Path(data).expanduser() == Path("fashion-mnist"):
        raise ValueError("--data: give an image folder (one subfolder per class, named as the model's classes) to "
                         "score a model by name on")
    root = Path(data).expanduser()
    order = ("test", "val") if split == "test" else ("val", "test")
    found = next((name for name in order if (root / name).is_dir()), None)
    preprocessing = preprocessing_of(saved["data"])
    dataset = ImageFolderDataset(root / found if found else root, transform=preprocessing,
                                 channels=preprocessing.channels)
    return EpochDataLoader(dataset, batch_size, pad=False), dataset.classes, found or "all"


def columns_by_name(classes: list[str], folder_classes: list[str], source: str) -> list[int]:
    """The model's output column of each of the folder's classes, by name; a class the model does not know is
    refused."""
    column = {name: i for i, name in reversed(list(enumerate(classes)))}
    unknown = [name for name in folder_classes if name not in column]
    if unknown:
        raise ValueError(f"{source} does not know {len(unknown)} of the folder's classes: "
                         f"{', '.join(unknown[:10])}{' ...' if len(unknown) > 10 else ''} (its classes are named "
                         f"{', '.join(classes[:5])}, ...); fine-tune it on this data (vitlab train --weights "
                         f"{source} --data ...), which keeps the rows of the classes it knows")
    return [column[name] for name in folder_classes]


class LogitsOf(nn.Module):
    """A classifier answering among some of its classes only: its logits (B, K) -> (B, len(columns))."""

    def __init__(self, model: nn.Module, columns: list[int]) -> None:
        super().__init__()
        self.model, self.columns = model, columns

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(images)[..., self.columns]


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


def preprocessing_of(data: dict[str, Any]):
    """The preprocessing a classification record names (a release's, a file's, a new run's), else the one its run's
    evaluation data went through (a run from before runs recorded it)."""
    from ...data.preprocessing import Preprocessing
    from ...data.transforms import build_eval_transform

    if data.get("preprocessing"):
        return Preprocessing.from_dict(data["preprocessing"])
    return build_eval_transform(data["img_size"], data["mean"], data["std"], data["channels"])


def record_for(task, model: nn.Module, preprocessing) -> dict[str, Any]:
    """What a classification run records of its data, for a model without a run (a release, a hub model): its
    classes (the model's labels; their indices where it has none), its preprocessing (the release's or the file's;
    where none is recorded, the model's input size with ImageNet's mean and std, said on stderr)."""
    import warnings

    from ...data.coco import IMAGENET_MEAN, IMAGENET_STD
    from ...data.preprocessing import Preprocessing
    from ...models.family import family_config

    config = family_config(model)
    if preprocessing is None:
        size, channels = config.fact("image_size"), config.fact("channels") or 3
        side = size if isinstance(size, int) else tuple(size)
        stats = (IMAGENET_MEAN, IMAGENET_STD) if channels == 3 else ((0.5,), (0.5,))
        preprocessing = Preprocessing(resize=side, crop=side, mean=stats[0], std=stats[1], channels=channels)
        warnings.warn(f"no preprocessing is recorded with this model: images are resized to {size} and normalised "
                      f"with {'ImageNet' if channels == 3 else 'a 0.5'} mean and std", stacklevel=2)
    classes = list(config.labels) or [str(i) for i in range(config.fact("classes"))]
    crop = preprocessing.input_size
    return {"classes": classes, "channels": preprocessing.channels, "img_size": crop[0] if crop else None,
            "mean": list(preprocessing.mean), "std": list(preprocessing.std), "preprocessing": preprocessing.to_dict()}


@torch.inference_mode()
def predict_images(task, model: nn.Module, saved: dict[str, Any], images: list, top_k: int = 3,
                   batch_size: int = 32) -> list[list[dict[str, Any]]]:
    """The top-k classes of each image (PIL, any size and mode), preprocessed as the record says, `batch_size` at a
    time: per image [{"class", "index", "probability"}], most likely first."""
    preprocessing = preprocessing_of(saved["data"])
    labels = class_names(model, saved)
    model = with_test_time_flip(model, run_flips(saved))
    answers = []
    for start in range(0, len(images), batch_size):
        batch = torch.stack([preprocessing(image) for image in images[start:start + batch_size]])  # (B, C, H, W)
        probs = model(batch).softmax(-1)
        values, indices = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
        answers += [[{"class": labels[i], "index": int(i), "probability": float(p)}
                     for p, i in zip(row_p.tolist(), row_i.tolist())] for row_p, row_i in zip(values, indices)]
    return answers


def predict_files(task, model: nn.Module, saved: dict[str, Any], paths: list[str], top_k: int = 3
                  ) -> list[dict[str, Any]]:
    """Top-k classes of each image file, preprocessed as the run's evaluation data was."""
    from ...data.images import INPUT_HINT, read_image

    pictures = [read_image(path, saved["data"]["channels"], hint=INPUT_HINT) for path in paths]
    return [{"image": str(path), "top_k": ranked}
            for path, ranked in zip(paths, predict_images(task, model, saved, pictures, top_k))]


def pipeline_answer(model: nn.Module, saved: dict[str, Any], ranked: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One image's answer (`predict_images`) as `vitlab.pipeline` gives it: [{"label", "score"}], most likely
    first."""
    return [{"label": item["class"], "score": item["probability"]} for item in ranked]


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
    shown, rollout, heads, _ = image_attention(model, image, preprocessing_of(saved["data"]))
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


def hub_pipeline_tag(task) -> str:
    """The Hugging Face Hub's pipeline tag of a model of this task (a pushed model card's `pipeline_tag`)."""
    return "image-classification"
