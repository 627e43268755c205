"""A run as a Hugging Face Hub repository, with a model card written from the run's own files.

    write_repo("runs/fm", "me/vit-fashion", to="out/vit-fashion")    # vitlab push runs/fm me/vit-fashion --to ...

The folder holds what the repository will: `model.safetensors` (the selected weights, whose metadata carries the
model's config, labels and preprocessing), `config.json` (the run's own record: task, options, data, model config,
the command that trained it and the machine it ran on; what `vitlab predict FOLDER` reads, so the folder answers as
the run does), `README.md` (the card) and `curves.png` where the run drew one.

Every figure in the card is read from the run: the validation figures from the metrics row of the selected
checkpoint, the test figures from the row the test was scored in (a run without one says it was not tested), the
minutes from the last row, the command and machine from config.json. Nothing is typed in.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..engine.run import CONFIG_FILE, CURVES_FILE, PUBLISHED_WEIGHTS, RunDir, read_metrics

REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
CARD_FILE = "README.md"
RUN_RECORD_FILE = "vitlab_run.json"  # the run's record in a repository in another library's form (its config.json)
# --include-graphs: the run's runtime graphs of the published weights (ONNX, OpenVINO, int8), named without the
# weights file's time stamp: graphs/model-g{GRAPH_FORMAT}-{input}.onnx; a pushed run read by name reuses them
PUBLISHED_GRAPHS = "graphs"
GRAPH_SUFFIXES = (".onnx", ".xml", ".bin")
PUBLISH_FORMATS = ("vitlab", "timm", "transformers", "diffusers")
# data sets vitlab reads by name, as the Hub knows them
HUB_DATASETS = {"fashion-mnist": "zalando-datasets/fashion_mnist"}
NOT_FIGURES = ("elapsed_s",)  # bookkeeping, not a result
NOT_FIGURE_SUFFIXES = ("_per_s", "_time_s")


def check_repo_id(repo_id: str) -> str:
    if not REPO_ID.fullmatch(repo_id) or ".." in repo_id or repo_id.endswith((".git", ".")):
        raise ValueError(f"{repo_id!r} is not a Hub repository id: give org/name (letters, digits, '-', '_', '.'), "
                         f"such as me/vit-fashion-mnist")
    return repo_id


def run_graphs(run_dir: str | os.PathLike, weights: str) -> dict[str, Path]:
    """The runtime graphs a run keeps of its `weights` (RUN/runtime/, each recording the model's labels), by the
    names they take in a repository."""
    from ..runtime.export import run_cache

    cache_dir, prefix = run_cache(run_dir, weights)
    graph_format = prefix.rsplit("-", 1)[1]
    return {f"{PUBLISHED_GRAPHS}/{PUBLISHED_WEIGHTS}-{graph_format}-{path.name.removeprefix(prefix + '-')}": path
            for path in sorted(cache_dir.glob(f"{prefix}-*")) if path.suffix in GRAPH_SUFFIXES and path.is_file()}


def seed_published_graphs(snapshot: Path, cache_dir: Path, prefix: str) -> None:
    """A pushed run's graphs (`graphs/` of its snapshot, in this vitlab's graph format) copied into the graph cache
    of its name, under the cache's file names, where they are not there yet: a graph found there is used as it is,
    so the first call does not export the model again."""
    graph_format = prefix.rsplit("-", 1)[1]
    published = f"{PUBLISHED_WEIGHTS}-{graph_format}-"
    for path in sorted((snapshot / PUBLISHED_GRAPHS).glob(f"{published}*")):
        target = cache_dir / f"{prefix}-{path.name.removeprefix(published)}"
        if target.exists():
            continue
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        shutil.copyfile(path, partial)
        os.replace(partial, target)


def write_repo(run_dir: str | os.PathLike, repo_id: str, to: str | os.PathLike, weights: str | None = None,
               licence: str | None = None, fmt: str = "vitlab", include_graphs: bool = False) -> Path:
    """The repository's files for the run at `run_dir`, written to the new folder `to` (refused where it holds
    anything), all or nothing: they are written beside it and moved into place at the end. `weights`: best, last
    or ema (default: the ones the run selected). `fmt`: vitlab's own form, or timm's, transformers' or diffusers'
    (interop/exporters.py: the model in that library's files, the run's record beside them as vitlab_run.json).
    `include_graphs`: the run's ONNX / OpenVINO / int8 graphs of those weights too, under graphs/."""
    check_repo_id(repo_id)
    run = RunDir(run_dir)
    saved = run.read_config()
    which = run.selected_weights(weights)
    source = run.weights_file(which)
    if not source.is_file():
        raise FileNotFoundError(f"{run.path} has no {which} weights ({source.name}): give --weights best, last or "
                                f"ema among those it kept")
    target = Path(to)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"{target} already holds files; give a new or empty folder for the repository")
    graphs = run_graphs(run.path, which) if include_graphs else {}
    if include_graphs and not graphs:
        raise FileNotFoundError(
            f"{run.path} keeps no runtime graphs of its {which} weights to include: make them first (vitlab predict "
            f"{run.path} IMAGE --runtime onnxruntime or openvino; vitlab quantize {run.path} for int8), or push "
            f"without --include-graphs")
    card = model_card(run.path, repo_id, which, licence, fmt, graphs=sorted(graphs))
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        record = {**saved, "published": {"repo_id": repo_id, "weights": which, "format": fmt}}
        if fmt == "vitlab":
            shutil.copyfile(source, staging / f"{PUBLISHED_WEIGHTS}.safetensors")
            (staging / CONFIG_FILE).write_text(json.dumps(record, indent=2) + "\n")
        else:
            from ..interop.exporters import export_to
            from .launch import load_run_model

            folder = export_to(load_run_model(run.path, which), fmt, staging / fmt,
                               saved.get("data", {}).get("preprocessing"))
            for path in folder.iterdir():
                path.rename(staging / path.name)
            folder.rmdir()
            (staging / RUN_RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
        (staging / CARD_FILE).write_text(card)
        if run.file(CURVES_FILE).is_file():
            shutil.copyfile(run.file(CURVES_FILE), staging / CURVES_FILE)
        for name, path in graphs.items():
            (staging / name).parent.mkdir(exist_ok=True)
            shutil.copyfile(path, staging / name)
        if target.exists():
            target.rmdir()  # empty: checked above
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def push(run_dir: str | os.PathLike, repo_id: str, weights: str | None = None, licence: str | None = None, *,
         private: bool = False, revision: str | None = None, message: str | None = None, fmt: str = "vitlab",
         include_graphs: bool = False) -> str:
    """The run's repository files (`write_repo`) uploaded to the Hub as one commit (the repository created where it
    is new, `private` then; `revision`: a branch, made from main where it is new). Returns the commit's URL."""
    from huggingface_hub import HfApi

    check_repo_id(repo_id)
    api = HfApi()
    with tempfile.TemporaryDirectory(prefix="vitlab-push-") as staging:
        folder = write_repo(run_dir, repo_id, Path(staging) / "repo", weights, licence, fmt, include_graphs)
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision not in (None, "main"):
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        commit = api.upload_folder(folder_path=folder, repo_id=repo_id, revision=revision,
                                   commit_message=message or f"vitlab push of {Path(run_dir).name}")
    return str(commit.commit_url)


# ---- the card ------------------------------------------------------------------------------------------------------
def _figures(row: dict[str, Any], prefix: str) -> dict[str, float]:
    """The row's numbers for one split (`val_`, `test_`): name -> value, bookkeeping left out."""
    return {key.removeprefix(prefix): float(value) for key, value in row.items()
            if key.startswith(prefix) and isinstance(value, int | float) and not isinstance(value, bool)
            and key not in NOT_FIGURES and not key.endswith(NOT_FIGURE_SUFFIXES)}


def run_figures(run_dir: str | os.PathLike) -> dict[str, Any]:
    """What the run measured, from its metrics.jsonl: the selected checkpoint's validation figures, the test
    figures (empty where the run was not tested), how it was selected, and its minutes."""
    rows = read_metrics(run_dir)
    if not rows:
        raise ValueError(f"{run_dir} has no metrics yet: it has not finished an evaluation; push it once it has")
    test_row = next((row for row in reversed(rows) if "selected_by" in row), None)
    evaluated = [row for row in rows if "selected_by" not in row and _figures(row, "val_")]
    selected = evaluated[-1] if evaluated else None
    if test_row is not None and evaluated:
        step = test_row.get("selected_step")
        selected = next((row for row in evaluated if row.get("step") == step), selected)
    return {"val": _figures(selected, "val_") if selected else {}, "test": _figures(test_row or {}, "test_"),
            "selected": selected or {}, "selected_by": (test_row or {}).get("selected_by"),
            "minutes": max((row.get("elapsed_s", 0.0) for row in rows), default=0.0) / 60,
            "progress": rows[-1]}


def model_card(run_dir: str | os.PathLike, repo_id: str, weights: str, licence: str | None = None,
               fmt: str = "vitlab", graphs: list[str] | tuple[str, ...] = ()) -> str:
    """The README.md of the run's repository: YAML front matter the Hub reads, then what the model is, its labels,
    data, training, results, use (with the runtime `graphs` the repository holds), limitations and citation."""
    from huggingface_hub import EvalResult, ModelCardData

    from ..models.family import family_config
    from .launch import load_run_model, load_task

    run = RunDir(run_dir)
    task, saved = load_task(run.path)
    model = load_run_model(run.path, weights)
    config = family_config(model)
    family = type(config)
    figures = run_figures(run.path)
    inference = task._inference() if task.inference_module else None
    pipeline_tag = inference.hub_pipeline_tag(task) if hasattr(inference, "hub_pipeline_tag") else None
    data = saved.get("data", {})
    data_name = str(data.get("name") or data.get("path") or saved.get("config", {}).get("data") or "")
    base = _base_model(saved.get("config", {}).get("weights"))
    licence = licence or (base[1] if base else None) or "unknown"

    split = {"val": "validation", "test": "test"}
    results = [EvalResult(task_type=pipeline_tag or task.name, dataset_type=HUB_DATASETS.get(data_name, "custom"),
                          dataset_name=_data_title(data_name), dataset_split=split[part], metric_type=name,
                          metric_value=round(value, 6), metric_name=f"{split[part]} {name}")
               for part in ("val", "test") for name, value in figures[part].items()]
    card_data = ModelCardData(
        library_name=fmt, pipeline_tag=pipeline_tag, license=licence,
        tags=["vitlab", family.family, task.name, *([pipeline_tag] if pipeline_tag else [])],
        datasets=[HUB_DATASETS[data_name]] if data_name in HUB_DATASETS else None,
        base_model=base[0] if base else None,
        metrics=sorted({name for part in ("val", "test") for name in figures[part]}) or None,
        model_name=repo_id, eval_results=results or None)

    parameters = sum(p.numel() for p in model.parameters())
    preprocessing = data.get("preprocessing")
    lines = ["---", card_data.to_yaml(), "---", "", f"# {repo_id}", "",
             f"{family.description or family.family}, trained with vitlab "
             f"({task.name}) on {_data_title(data_name) or 'its own data'}.", "",
             "## The model", "",
             f"- **Architecture**: {config.describe()} (`{saved.get('model_config', {}).get('name', family.family)}`)",
             f"- **Parameters**: {parameters:,}"]
    if family.paper is not None:
        lines.append(f"- **Paper**: [{family.paper.title}]({family.paper.url}) ({family.paper.venue} "
                     f"{family.paper.year})")
    if preprocessing:
        lines.append(f"- **Input**: {_describe_preprocessing(preprocessing)}")
    lines += ["", "## Labels", ""]
    labels = list(config.labels)
    if labels:
        lines += [f"{len(labels)} classes, by output index:", "", "| index | label |", "| ---: | --- |"]
        lines += [f"| {i} | {name} |" for i, name in enumerate(labels)]
    else:
        lines.append("None: the model's outputs are not classes, or its classes were not named.")
    lines += ["", "## Data", "", f"- **Data**: {data_name or 'not recorded'}"]
    for part in ("train", "val", "test"):
        count = data.get(f"num_{part}")
        if count is not None:
            lines.append(f"- **{split.get(part, part).capitalize()}**: {count:,} images")
    if isinstance(data.get("split"), dict) and data["split"].get("val_from"):
        lines.append(f"- The validation images were held out of `{data['split']['val_from']}` "
                     f"(fraction {data['split'].get('val_fraction', 0):.4g}, seed {data['split'].get('seed')})")
    lines += ["", "## Training", ""]
    command = saved.get("command")
    if command:
        lines += ["```bash", command, "```", ""]
        if saved.get("resumed_with"):
            lines += [f"resumed with `{saved['resumed_with']}`", ""]
    else:
        lines += ["Started from Python (`vitlab.train`); its options are in `config.json`.", ""]
    loop, machine, progress = saved.get("loop", {}), saved.get("machine"), figures["progress"]
    done = (f"{progress['epoch']} epochs" if "epoch" in progress else f"{progress.get('step', 0)} steps")
    lines.append(f"- **Length**: {done}, {figures['minutes']:.1f} minutes of training and evaluation")
    if loop:
        lines.append(f"- **Optimiser**: {loop.get('optimizer')}, learning rate {loop.get('lr')}, batch "
                     f"{loop.get('batch_size')}, weight decay {loop.get('weight_decay')}, {loop.get('schedule')} "
                     f"schedule, seed {loop.get('seed')}")
    if machine:
        lines.append(f"- **Machine**: {machine.get('cpu')} ({machine.get('isa')}), {machine.get('threads')} threads, "
                     f"torch {machine.get('torch')}" + (f", {machine['gpu']}" if machine.get("gpu") else ""))
    selected = figures["selected"]
    if figures["selected_by"]:
        when = (f"epoch {selected['epoch']}" if "epoch" in selected else f"step {selected.get('step')}")
        lines.append(f"- **Selected**: the checkpoint of {when}, by validation `{figures['selected_by']}`; these "
                     f"weights are its `{weights}`")
    else:
        lines.append(f"- **Weights**: its `{weights}`")
    lines += ["", "## Results", ""]
    lines += _table("Validation (the selected checkpoint)", figures["val"])
    if figures["test"]:
        lines += _table("Test (scored once, after selection)", figures["test"])
    else:
        lines += ["Not evaluated on a test set: the run's data had none, or the run has not finished.", ""]
    if run.file(CURVES_FILE).is_file():
        lines += [f"![training curves]({CURVES_FILE})", ""]
    usage = USAGE[fmt](repo_id, pipeline_tag or "image-classification")
    lines += ["## How to use it", "", "```python", *usage, "```", "",
              "```bash", f"vitlab predict hf-hub:{repo_id} image.jpg", "```", ""]
    if graphs:
        lines += ["Graphs for ONNX Runtime and OpenVINO, exported by vitlab from these weights (each records the "
                  "labels); `vitlab predict` and `vitlab serve` with `--runtime onnxruntime` or `openvino` use them "
                  "as they are, and each loads alone with `vitlab.runtime.load(FILE)`:", "",
                  *[f"- `{name}`" for name in graphs if not name.endswith(".bin")], ""]
    lines += ["## Limitations", "",
              f"Measured only on the held-out images of {_data_title(data_name) or 'its data'} listed above. It was "
              "not tested on other data, other image sizes or kinds of picture than those, nor for robustness or "
              "bias; its figures say nothing about them.", ""]
    if family.paper is not None:
        lines += ["## Citation", "", "```bibtex", family.paper.bibtex(), "```", ""]
    return "\n".join(lines)


# the lines that load the repository (its id, the Hub's pipeline tag for its task), in the library whose form it has
USAGE = {
    "vitlab": lambda repo, tag: ["import vitlab", "", f'predict = vitlab.pipeline(model="hf-hub:{repo}")',
                                 'print(predict("image.jpg"))'],
    "timm": lambda repo, tag: ["import timm", "",
                               f'model = timm.create_model("hf-hub:{repo}", pretrained=True).eval()',
                               "labels = model.pretrained_cfg['label_names']"],
    "transformers": lambda repo, tag: ["from transformers import pipeline", "",
                                       f'predict = pipeline("{tag}", model="{repo}")', 'print(predict("image.jpg"))'],
    "diffusers": lambda repo, tag: ["from diffusers import VQModel", "",
                                    f'vqgan = VQModel.from_pretrained("{repo}")'],
}


def _table(title: str, figures: dict[str, float]) -> list[str]:
    if not figures:
        return [f"{title}: none recorded.", ""]
    return [f"{title}:", "", "| metric | value |", "| --- | ---: |",
            *[f"| {name} | {value:.4f} |" for name, value in figures.items()], ""]


def _data_title(name: str) -> str:
    return "Fashion-MNIST" if name == "fashion-mnist" else name


def _describe_preprocessing(record: dict[str, Any]) -> str:
    from ..data.preprocessing import Preprocessing

    rule = Preprocessing.from_dict(record)
    steps = []
    if rule.rescale:
        steps.append(f"kept ratio within {max(rule.rescale)} × {min(rule.rescale)}")
    elif isinstance(rule.resize, tuple):
        steps.append(f"resized to {rule.resize[0]} × {rule.resize[1]}")
    elif rule.resize:
        steps.append(f"shorter side to {rule.resize}" + (f", longer at most {rule.max_size}" if rule.max_size else ""))
    elif rule.max_size:
        steps.append(f"longer side to {rule.max_size}")
    else:
        steps.append("at its own size")
    if rule.crop:
        steps.append(f"centre {rule.crop[0]} × {rule.crop[1]}")
    steps.append(f"{rule.channels} channel{'s' if rule.channels > 1 else ''}, normalised with mean "
                 f"{[round(v, 4) for v in rule.mean]} and std {[round(v, 4) for v in rule.std]}")
    return "; ".join(steps)


def _base_model(weights: str | None) -> tuple[str, str | None] | None:
    """(Hub repo id, licence) of what the run was fine-tuned from, where that is on the Hub."""
    if not weights:
        return None
    from ..interop.hub import HF_HUB_PREFIX, release_named

    if weights.startswith(HF_HUB_PREFIX):
        return weights.removeprefix(HF_HUB_PREFIX).split("@")[0], None
    release = release_named(weights)
    if release is not None and REPO_ID.fullmatch(release.source):
        return release.source, release.licence
    return None
