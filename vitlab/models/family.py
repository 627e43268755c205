"""What a model family says about itself to the layers above it (the command line, the runtimes, interop).

A family is one file in `models/`: its config dataclass (decorated with `@register_config`, mixing in
`ModelFamily`), its model, its presets (`@register_model`). The config class declares, as data and small methods:

    family          its name, the key of saved configs ("vit", ...)
    title           its name in prose ("Deformable DETR")
    description     one line: the paper and what the model is
    columns         what `vitlab models`'s columns mean for it, where not the obvious
    tasks           the kinds of training (task packages) that train it
    summary()       the sizes `vitlab models` and `vitlab convert` print (image, patch, dim, depth, heads, classes)
    not_exportable  why its model cannot be one tensors-in, tensors-out graph (None: it can)
    wrong_on        runtime backends measured to compute it wrongly, with why
    int8_fp32       module paths (fnmatch patterns) its int8 graphs keep in fp32, with why (runtime/quantize.py)
    int8_transformer  whether its graph is attention blocks (OpenVINO's quantizer then keeps their non-linear
                    parts in fp32 and smooths the activations' outliers into the weights)
    pack_outputs()  a graph's outputs back into what the model returns (a tensor, or its output dataclass)
    releases        its released checkpoints by tag (filled by the families that have them)
    for_data()      the config fitted to a task's data: its classes, channels, image size (and the stochastic
                    depth the task trains with), each set on the family's own field for it (`data_fields`)
    fact()          what the config says of one of those facts (its image size, its classes), read back

and the model class subclasses `Model`, which says what the layers above ask of a model (its graph, its tasks,
the parameters kept out of weight decay, its layer groups, how it adapts a checkpoint), with the defaults of a
family that has nothing to say. Nothing above `models/` needs to know a family by name: it asks the config and the
model, and never probes them for a hook.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn


@dataclass(frozen=True)
class Paper:
    """The paper a family comes from, as a model card cites it."""

    title: str
    authors: str  # "Dosovitskiy, Alexey and others": BibTeX's form, the first author and "others"
    venue: str  # "ICLR"
    year: int
    arxiv: str  # "2010.11929"

    @property
    def url(self) -> str:
        return f"https://arxiv.org/abs/{self.arxiv}"

    def bibtex(self) -> str:
        key = f"{self.authors.split(',')[0].lower()}{self.year}"
        return (f"@inproceedings{{{key},\n  title = {{{self.title}}},\n  author = {{{self.authors}}},\n"
                f"  booktitle = {{{self.venue}}},\n  year = {{{self.year}}},\n  eprint = {{{self.arxiv}}},\n"
                f"  archivePrefix = {{arXiv}}\n}}")


@dataclass(frozen=True)
class Release:
    """A released checkpoint of a family: where it is, what format it is in, and the figure its authors report.

    A model's first listed release is its default (`create_model(name, pretrained=True)`), as in timm.
    """

    tag: str  # "detr_resnet50.coco": the model name, a dot, the release
    source: str  # a Hugging Face repo id ("facebook/detr-resnet-50") or a URL
    format: str  # what interop reads it as ("timm", "huggingface", "official", ...)
    filename: str = ""  # the file within a hub repo (the file's name, for a URL)
    revision: str = ""  # a pinned hub revision (a commit)
    sha256: str = ""  # where the source publishes or fixes one: all 64 hex digits, or torch.hub's first 8 or more
    licence: str = ""
    metric: dict[str, float] = field(default_factory=dict)  # the release's own reference figure: {"box_ap": 42.0}
    dataset: str = ""  # what `metric` was measured on
    overrides: dict[str, Any] = field(default_factory=dict)  # config fields the release sets beyond its preset's
    note: str = ""  # what could not be verified, or what the source needs (a browser, a licence to accept)
    labels: Callable[[], tuple[str, ...]] | None = None  # its classes' names (models/labels.py), read when asked
    # how its images were prepared when it was scored (a Preprocessing record, models/release_inputs.py)
    preprocessing: dict[str, Any] = field(default_factory=dict)

    @property
    def config_overrides(self) -> dict[str, Any]:
        """The config fields a model of this release has beyond its preset's: `overrides`, and its labels."""
        return {**self.overrides, **({"labels": self.labels()} if self.labels else {})}

    @property
    def model(self) -> str:
        """The registered model the release is for."""
        return self.tag.partition(".")[0]

    @property
    def on_hub(self) -> bool:
        """Whether `source` is a Hugging Face repo id (else a URL)."""
        return "://" not in self.source


@dataclass
class ExportSpec:
    """A model as a graph: `outputs(model, *inputs)` returns the tensors named `output_names`, in order.

    `dynamic`: per input, axis -> name of a free dimension ("batch", "height", ...); `method`: the model's method
    the graph stands in for (`forward`, or a VQGAN's `decode`); `task`: a multi-task model's task index.
    `meta`: recorded in the exported file (a restorer's degradation); `onnx_fusion`: what onnxruntime's transformer
    optimizer is to fuse in the ONNX graph, where the family's graph is one it knows.
    """

    kind: str  # a label for messages and files: "classifier", "detector", ...
    outputs: Callable[..., tuple[torch.Tensor, ...]]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    example: tuple[torch.Tensor, ...]
    dynamic: tuple[dict[int, str], ...]
    method: str = "forward"
    task: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    onnx_fusion: dict[str, Any] | None = None  # onnxruntime transformer optimizer's arguments (model_type, ...)


@dataclass(frozen=True)
class ModelFamily:
    """Mixed into a family's config dataclass: the defaults of what a family declares (see the module's doc), and
    the one field every family's config has, its `labels`."""

    # what each output class is, by index (a detector's "no object" column is not one): filled from the data when a
    # run trains (for_data) and written wherever the config goes; () where unknown or not classes (a restorer's)
    labels: tuple[str, ...] = field(default=(), kw_only=True)

    family: ClassVar[str]
    title: ClassVar[str] = ""  # its name in prose: "Deformable DETR"
    description: ClassVar[str] = ""
    paper: ClassVar[Paper | None] = None  # what a model card cites
    columns: ClassVar[str] = ""
    tasks: ClassVar[tuple[str, ...]] = ()  # the kinds of training that train it ("classification", ...)
    not_exportable: ClassVar[str | None] = None
    wrong_on: ClassVar[dict[str, str]] = {}
    int8_fp32: ClassVar[dict[str, str]] = {}
    int8_transformer: ClassVar[bool] = True
    releases: ClassVar[dict[str, Release]] = {}
    # the field each of a task's data facts goes to (for_data); a family names its own where it differs (a VQGAN's
    # image size is its `resolution`)
    data_fields: ClassVar[dict[str, str]] = {"classes": "num_classes", "labels": "labels", "channels": "in_chans",
                                             "image_size": "img_size", "drop_path": "drop_path_rate"}

    def for_data(self, **facts: Any) -> Any:
        """This config fitted to what a task's data says: `classes` (how many) and their `labels` (names, by index:
        the count where `classes` is not said), `channels`, `image_size`, and the `drop_path` rate the task trains
        with; each set on the family's field for it (`data_fields`), None: not said. A fact the family has no field
        for is refused (a greyscale image for a model that cannot take one), but for stochastic depth, which a family
        without it (a convnet) does not have to offer."""
        import dataclasses

        names = {f.name for f in dataclasses.fields(self)}
        if facts.get("labels") is not None:
            facts = {**facts, "labels": tuple(str(label) for label in facts["labels"])}
            if facts.get("classes") is None and self.data_fields["classes"] in names:
                facts["classes"] = len(facts["labels"])
        changes = {}
        for fact, value in facts.items():
            if fact not in self.data_fields:
                raise TypeError(f"unknown data fact {fact!r}; the facts are {', '.join(self.data_fields)}")
            if value is None or (fact == "drop_path" and self.data_fields[fact] not in names):
                continue
            if self.data_fields[fact] not in names:
                raise ValueError(f"the {self.family} family has no {self.data_fields[fact]}: a model of it cannot be "
                                 f"fitted to data with {fact}={value}")
            changes[self.data_fields[fact]] = value
        count = getattr(self, self.data_fields["classes"], None)
        if changes.get(self.data_fields["classes"], count) != count and "labels" not in changes:
            changes["labels"] = ()  # a head for other classes, unnamed: the release's names no longer apply
        fitted = dataclasses.replace(self, **changes)
        check_labels(fitted)
        return fitted

    def fact(self, name: str) -> Any:
        """What this config says of one of a task's data facts (`data_fields`): its `classes`, `labels`, `channels`,
        `image_size`; None where the family has no field for it."""
        return getattr(self, self.data_fields[name], None)

    def named(self, labels: tuple[str, ...] | None) -> Any:
        """This config with `labels` where they name each class of its head; else as it is (a file whose head is
        not the release's: its classes are unknown, not the release's)."""
        import dataclasses

        count = getattr(self, self.data_fields["classes"], None)
        if not labels or (count is not None and len(labels) != count):
            return self
        return dataclasses.replace(self, labels=tuple(labels))

    def summary(self) -> dict[str, Any]:
        """The sizes shown for a model of this config: image, patch, dim, depth, heads, classes (None: not one)."""
        fields = {"image": "img_size", "patch": "patch_size", "dim": "dim", "depth": "depth", "heads": "num_heads",
                  "classes": "num_classes"}
        return {column: getattr(self, name, None) for column, name in fields.items()}

    def describe(self) -> str:
        """One line about a model of this config, its family's title and its sizes: "ViT 192 wide, 12 deep, 3
        heads, patch 16, image 224, 1000 classes"."""
        words = {"dim": "{} wide", "depth": "{} deep", "heads": "{} heads", "patch": "patch {}", "image": "image {}",
                 "classes": "{} classes"}
        sizes = self.summary()
        shown = [(sizes[key] if isinstance(sizes[key], str) and key == "classes" else words[key].format(
            _shown(sizes[key]))) for key in words if sizes.get(key) is not None]
        return f"{self.title or self.family} {', '.join(shown)}"

    @staticmethod
    def pack_outputs(outputs: list[Any]) -> Any:
        """A graph's outputs, in order -> what the model's graphed method returns in eval mode."""
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _shown(value: Any) -> str:
    if isinstance(value, tuple | list):
        return "×".join(map(str, value))
    return str(value)


class Model(nn.Module):
    """What the layers above ask of every family's model; a family overrides what it has to say.

        export_spec(example, task)   the graph the runtimes run (ExportSpec); default: none (the config's
                                     `not_exportable` says why, for a family that cannot be one graph)
        task_names                   a multi-task model's tasks, in the order of its heads (IPT's degradations);
                                     () for a model of one task
        task_index(task)             the head of a task, by name or index; None for a model of one task
        no_weight_decay()            names of parameters kept out of weight decay (position embeddings, tokens)
        num_layer_groups, layer_id   layer-wise learning-rate decay: how many groups, and a parameter's group
                                     (0 groups: the model has none, and layer decay is refused)
        adapt_checkpoint(state)      a checkpoint made ready for this model before it is loaded (a head for other
                                     classes, positions for another grid); default: the state as it is
        classifier_keys()            the state's tensors whose rows are its classes, in label order (any rows
                                     after them, a detector's "no object", are not classes): fine-tuning matches
                                     them to a checkpoint's by name (models/adapt.py); default: none
        reads_prefix_only,           whether the head reads only the prefix tokens of the last block, and the
        forward_lean(images)         forward that computes only those rows (engine/lean.py trains through it)
        lean_exact                   whether forward_lean is the forward exactly in the current mode

    `create_model` refuses a family whose model is not a Model: a missing hook would otherwise be a silent default.
    """

    config: ModelFamily  # the family's config the model was built from
    model_name: str | None = None  # the registered name it was created by (create_model sets it)
    task_names: tuple[str, ...] = ()
    num_layer_groups: int = 0
    reads_prefix_only: bool = False
    lean_exact: bool = False

    def export_spec(self, example: tuple[torch.Tensor, ...] | None = None, task: int | str | None = None
                    ) -> ExportSpec:
        raise NotImplementedError(f"{type(self).__name__} declares no runtime graph (Model.export_spec)")

    def task_index(self, task: int | str) -> int | None:
        return None

    def no_weight_decay(self) -> set[str]:
        return set()

    def layer_id(self, name: str) -> int:
        raise ValueError(f"{type(self).__name__} has no layer groups for layer decay (Model.num_layer_groups is 0)")

    def adapt_checkpoint(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return state

    def classifier_keys(self) -> tuple[str, ...]:
        return ()

    def forward_lean(self, images: torch.Tensor) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no lean forward (Model.reads_prefix_only is False)")


def family_config(module: nn.Module) -> ModelFamily | None:
    """The family config of a vitlab model, read through whatever stands in for it (the inference path's wrapper, a
    runtime's, torch.compile's: each forwards the model's attributes); None for a module that is no vitlab model
    (a test's stand-in, a plain torch module). The one place the layers above ask a module whether it is one."""
    config = getattr(module, "config", None)
    return config if isinstance(config, ModelFamily) else None


def check_labels(config: ModelFamily) -> None:
    """Refuse labels that disagree with the head: one name per output class, where the family counts classes."""
    classes = getattr(config, config.data_fields["classes"], None)  # None: a family without classes (a restorer)
    if config.labels and classes is not None and len(config.labels) != classes:
        raise ValueError(f"{len(config.labels)} labels for a head of {classes} classes: a {config.family} config's "
                         f"labels name each class of its head, in order; give {classes} names or none")
