"""Renders the tables the README and the documentation site show from the results files, so that every number
there is one a benchmark recorded.

    python benchmarks/report.py            # rewrite every generated block in README.md and docs/**/*.md
    python benchmarks/report.py --check    # exit 1, naming the blocks, where a page differs from a fresh render

A page asks for a block with `<!-- report: NAME -->` ... `<!-- /report -->`; the text between the markers is
replaced by BLOCKS[NAME](), rendered from benchmarks/results/*.json. The systems table reads each system's
headline measurement here and, beside it, the figure its authors report for a released model (the family's
release list, vitlab/models/*.py), with the machine's ISA where the results file records it. A block may take
words after its name (`<!-- report: runtime_ratios runtimes-avx2 -->`), given to its function. A page quotes a
results table with `<!-- results: benchmarks/results/NAME.md -->` ... `<!-- /results -->`: the text between is
replaced by that file, which must be what NAME's renderer in TABLES makes from NAME.json (--check says where not).

A number in a sentence is written between `<!-- value: NAME | PATH | FORMAT -->` and `<!-- /value -->`: the text
between is replaced by the value PATH reaches in benchmarks/results/NAME.json, written with FORMAT (a str.format
template of the value, `{pct}` being 100 times it; `{}` when left out). PATH is keys joined by dots, where a key
may be followed by a selector:

    rows[model=vit_small_patch16_224,batch=32,label=vitlab compile].ratio_to_base   the first element that matches
    curve[-1].map_50                                                                  an element by its index
    curve[max=map_50].train_min                                                       the element with the largest
    rows[label=vitlab openvino bf16]*.ratio_to_base.@max                              every match; then @min, @max,
    rows[*].first_call_s.@max                                                         @mean, @sum, @len, @first or
                                                                                      @last of them
    curve[map_50>=0.5].train_min                                                      the first element whose
    rows[gain<0]*.epoch.@len                                                          number compares so (>=, <=,
                                                                                      >, <), or every one

and PATH may be `PATH - PATH`, `PATH + PATH` or `PATH / PATH`: the difference, sum or ratio of two values of the
file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as `python benchmarks/report.py`: the repository root makes `vitlab` importable
RESULTS = ROOT / "benchmarks" / "results"
BLOCK = re.compile(r"(<!-- report: (\w+)((?: [^\s>]+)*) -->\n)(.*?)(<!-- /report -->)", re.S)
VALUE = re.compile(r"(?<!`)(<!-- value: (.+?) -->)(.*?)(<!-- /value -->)", re.S)  # `quoted` in a code span: not one
QUOTED = re.compile(r"(<!-- results: (\S+) -->\n)(.*?)(<!-- /results -->)", re.S)


def _load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def _isa(result: dict) -> str:
    machine = result.get("machine") or {}
    return machine.get("cpu_capability") or "ISA not recorded"


def _best(curve: list[dict], key: str) -> dict:
    return max(curve, key=lambda row: row[key])


def _reported(tag: str) -> str:
    """A release's reported figure, as its family file lists it: 'box_ap 42.0 (COCO val2017)'."""
    from vitlab.models import list_pretrained

    release = next(r for r in list_pretrained(tag) if r.tag == tag)
    figures = ", ".join(f"{key} {value}" for key, value in release.metric.items())
    return f"{figures} ({release.dataset}; `{tag}`)"


# one row per system: (system, paper, year, file, page, headline here from its results file, reference figure)
def _transformer() -> tuple[str, str]:
    result = _load("seq2seq_tasks")
    finals = {row["task"]: row.get("test_exact_acc", row.get("final_exact_acc")) for row in result["results"]}
    text = ", ".join(f"{task} {100 * acc:.1f} %" for task, acc in finals.items())
    return (f"test exact-sequence accuracy, 4,000 steps, checkpoint chosen on val: {text} "
            f"([seq2seq_tasks](benchmarks/results/seq2seq_tasks.json); {_isa(result)})"), "—"


def _vit() -> tuple[str, str]:
    result = _load("fashion_mnist_recipe")
    run = next(r for r in result["results"] if r["variant"] == "default")
    flip = ", test-time flip" if run["recipe"].get("test_time_flip") else ""
    return (f"Fashion-MNIST test accuracy {100 * run['test_acc']:.2f} % ({run['model']}{flip}, "
            f"{run['train_time_s'] / 60:.1f} min of training; "
            f"[fashion_mnist_recipe](benchmarks/results/fashion_mnist_recipe.json); {_isa(result)})",
            _reported("vit_base_patch16_224.augreg2_in21k_ft_in1k"))


def _deit() -> tuple[str, str]:
    result = _load("deit_distillation")
    rows = {row["kind"]: row for row in result["table"]}
    return (f"Fashion-MNIST test accuracy, 3 epochs, mean of 2 seeds: {rows['hard']['mean']:.2f} % with hard "
            f"distillation against {rows['none']['mean']:.2f} % without "
            f"([deit_distillation](benchmarks/results/deit_distillation.json); {_isa(result)})",
            _reported("deit_base_distilled_patch16_224.fb_in1k"))


def _with_denoising(model: str) -> str:
    """A detector's headline: its best val AP50 with denoising queries, and the test AP50 of that selection."""
    result = _load("denoising_detection")["results"][model]
    best = _best(result["denoising"]["curve"], "map_50")
    return (f"scenes AP50 {best['map_50']:.3f} after {best['train_min']:.0f} min with denoising queries (test "
            f"{result['denoising']['test']['map_50']:.3f}; [denoising_detection]"
            f"(benchmarks/results/denoising_detection.json); {_isa(result['denoising'])})")


def _detr() -> tuple[str, str]:
    return _with_denoising("detr_small"), _reported("detr_resnet50.coco")


def _deformable() -> tuple[str, str]:
    return _with_denoising("deformable_detr_small"), _reported("deformable_detr_resnet50.coco_two_stage")


def _setr() -> tuple[str, str]:
    result = _load("setr_scenes")
    best = max((_best(run["curve"], "miou") | {"model": name} for name, run in result["results"].items()
                if name.startswith("setr")), key=lambda row: row["miou"])
    return (f"scenes mIoU {best['miou']:.3f} after {best['train_min']:.0f} min ({best['model']}; "
            f"[setr_scenes](benchmarks/results/setr_scenes.json); {_isa(result)})",
            _reported("setr_mla_vit_large_patch16_384.ade20k"))


def _ipt() -> tuple[str, str]:
    result = _load("ipt_restoration")
    scores = result["scores"]["ipt"]["degradations"]
    sr2, noise = scores["sr2"], scores["denoise30"]
    return (f"ipt_small, 20 min: ×2 {sr2['psnr_y']:.2f} dB Y-PSNR (bicubic {sr2['input_psnr_y']:.2f}), σ 30 "
            f"{noise['psnr_y']:.2f} dB (input {noise['input_psnr_y']:.2f}) "
            f"([ipt_restoration](benchmarks/results/ipt_restoration.json); {_isa(result)})",
            _reported("ipt_base.sr2"))


def _vqgan() -> tuple[str, str]:
    result = _load("vqgan_fashion_mnist")
    final = result["final"]
    return (f"Fashion-MNIST reconstruction PSNR {final['psnr']:.2f} dB, codebook usage {100 * final['usage']:.0f} %, "
            f"samples classified right {100 * final['class_acc']:.1f} % "
            f"([vqgan_fashion_mnist](benchmarks/results/vqgan_fashion_mnist.json); {_isa(result)})",
            _reported("vqgan_f16_16384.imagenet"))


# (system, paper, year, code, its page, its walkthrough, its headline); pages are under docs/
SYSTEMS: list[tuple[str, str, str, str, str, str, Callable[[], tuple[str, str]]]] = [
    ("The Transformer", "Attention Is All You Need", "2017", "models/seq2seq.py", "systems/transformer.md",
     "annotated_transformer.md", _transformer),
    ("ViT", "An Image is Worth 16x16 Words", "2021", "models/vit.py", "systems/vit.md", "annotated_vit.md", _vit),
    ("DeiT", "Training data-efficient image transformers", "2021", "models/deit.py", "systems/deit.md",
     "annotated_deit.md", _deit),
    ("DETR", "End-to-End Object Detection with Transformers", "2020", "models/detr.py", "systems/detr.md",
     "annotated_detr.md", _detr),
    ("Deformable DETR", "Deformable DETR", "2021", "models/deformable_detr.py", "systems/deformable_detr.md",
     "annotated_deformable_detr.md", _deformable),
    ("SETR", "Rethinking Semantic Segmentation ... with Transformers", "2021", "models/setr.py", "systems/setr.md",
     "annotated_setr.md", _setr),
    ("IPT", "Pre-Trained Image Processing Transformer", "2021", "models/ipt.py", "systems/ipt.md",
     "annotated_ipt.md", _ipt),
    ("VQGAN", "Taming Transformers for High-Resolution Image Synthesis", "2021", "models/vqgan.py",
     "systems/vqgan.md", "annotated_vqgan.md", _vqgan),
]


def systems(prefix: str = "") -> str:
    """The systems table; `prefix` leads every link from the page it lands on to the repository root."""
    lines = ["| system | paper | code | walkthrough | here, trained on 2 CPU cores | its authors report |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, paper, year, code, page, walkthrough, headline in SYSTEMS:
        here, reference = headline()
        here = here.replace("](benchmarks/", f"]({prefix}benchmarks/")
        lines.append(f"| [{name}]({prefix}docs/{page}) | {paper} ({year}) | `vitlab/{code}` | "
                     f"[annotated]({prefix}docs/{walkthrough}) | {here} | {reference} |")
    return "\n".join(lines)


def runtime_ratios(name: str = "runtimes") -> str:
    """The runtimes benchmark as one row per model and batch, one column per contender: images/s as a multiple of
    its base (timm eager where it applies, else vitlab torch), the fastest fp32 vitlab runtime in bold."""
    result = _load(name)
    rows = [row for row in result["rows"] if "ratio_to_base" in row]
    labels = list(dict.fromkeys(row["label"] for row in rows if row["label"] != "timm eager"))
    cases = list(dict.fromkeys((row["model"], row["batch"]) for row in rows))
    lines = [f"| model, batch ({_isa(result)}) | " + " | ".join(labels) + " |",
             "|---|" + "---:|" * len(labels)]
    for model, batch in cases:
        here = {row["label"]: row for row in rows if (row["model"], row["batch"]) == (model, batch)}
        fp32 = [label for label in here if label.startswith("vitlab") and not label.endswith(("bf16", "int8"))]
        best = max(fp32, key=lambda label: here[label]["ratio_to_base"]) if fp32 else None
        cells = []
        for label in labels:
            if label not in here:
                cells.append("")
            elif here[label]["base"] == label:
                cells.append("1")
            else:
                figure = f"{here[label]['ratio_to_base']:.2f}"
                cells.append(f"**{figure}**" if label == best else figure)
        lines.append(f"| {model}, {batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def results_table(name: str) -> str:
    """The first table of what NAME's renderer (TABLES) makes from benchmarks/results/NAME.json, for a page that
    shows the table without the results file's title and notes."""
    lines = rendered_table(name).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


BLOCKS: dict[str, Callable[..., str]] = {"systems": systems, "runtime_ratios": runtime_ratios,
                                         "results_table": results_table}


# `<!-- value: NAME | PATH | FORMAT -->`: one number of a sentence, read from benchmarks/results/NAME.json
STEP = re.compile(r"(@\w+)|([^.\[\]@]+)|\[([^\]]*)\](\*?)")
REDUCE: dict[str, Callable[[list], object]] = {
    "@min": min, "@max": max, "@sum": sum, "@len": len, "@mean": lambda xs: sum(xs) / len(xs),
    "@first": lambda xs: xs[0], "@last": lambda xs: xs[-1]}  # over the values that are not None (a table's "—")


CONDITION = re.compile(r"(\w+)(>=|<=|=|>|<)(.+)")
COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, "<": lambda a, b: a < b}


def _holds(item: dict, key: str, relation: str, wanted: str) -> bool:
    """Whether item[key] equals `wanted` (as text), or compares with it as a number (>=, <=, >, <)."""
    if relation == "=":
        return str(item.get(key)) == wanted
    found = item.get(key)
    return isinstance(found, (int, float)) and COMPARE[relation](found, float(wanted))


def _select(items: list, selector: str, every: bool, where: str) -> object:
    if not isinstance(items, list):
        raise KeyError(f"{where}: [{selector}] selects from a list; this is a {type(items).__name__}")
    if selector == "*":
        return list(items)
    if re.fullmatch(r"-?\d+", selector):
        return items[int(selector)]
    if re.fullmatch(r"(max|min)=\w+", selector):
        which, key = selector.split("=")
        known = [item for item in items if item.get(key) is not None]  # a row without it (a table's "—") is skipped
        if not known:
            raise KeyError(f"{where}: no element has a value for {key}")
        return (max if which == "max" else min)(known, key=lambda item: item[key])
    conditions = [CONDITION.fullmatch(part) for part in selector.split(",")]
    if not all(conditions):
        raise KeyError(f"{where}: [{selector}] is not a selector (*, an index, max=KEY, min=KEY or conditions "
                       "KEY=VALUE, KEY>=NUMBER, KEY<NUMBER, ... joined by commas)")
    found = [item for item in items if all(_holds(item, *condition.groups()) for condition in conditions)]
    if not found:
        raise KeyError(f"{where}: no element has {selector}")
    return found if every else found[0]


def lookup(record: dict, path: str, where: str = "") -> object:
    """The value PATH reaches in a results record (the grammar is in this module's docstring)."""
    values, many = [record], False
    for reduce, key, selector, every in STEP.findall(path):
        if reduce:
            if not many or reduce not in REDUCE:
                raise KeyError(f"{where}: {reduce} needs a list made by `[...]*` (and is one of {', '.join(REDUCE)})")
            values, many = [REDUCE[reduce]([value for value in values if value is not None])], False
        elif key:
            missing = [value for value in values if not isinstance(value, dict) or key not in value]
            if missing:
                keys = sorted(missing[0]) if isinstance(missing[0], dict) else type(missing[0]).__name__
                raise KeyError(f"{where}: no key {key!r} (there: {keys})")
            values = [value[key] for value in values]
        else:
            every = bool(every) or selector == "*"
            picked = [_select(value, selector, every, where) for value in values]
            values = [item for found in picked for item in found] if every else picked
            many = many or every
    if many:
        raise KeyError(f"{where}: {path} reaches several values; end it with one of {', '.join(REDUCE)}")
    return values[0]


def _lookup_or_pair(record: dict, path: str, where: str) -> object:
    """PATH's value, or the difference, sum or ratio of the two values either side of a " - ", " + " or " / " in it
    ("how far ahead", "both stages together", "how many times as fast"). A key may hold " / " itself ("in place /
    out of place"): the whole path is tried first, then each place it could be split."""
    try:
        return lookup(record, path, where)
    except KeyError as whole:
        for split in re.finditer(r" ([-+/]) ", path):
            try:
                first = lookup(record, path[:split.start()], where)
                second = lookup(record, path[split.end():], where)
            except KeyError:
                continue
            operator = split.group(1)
            return first - second if operator == "-" else first + second if operator == "+" else first / second
        raise whole


def value(spec: str) -> str:
    """The text of a `<!-- value: NAME | PATH | FORMAT -->` marker, from its results file now."""
    parts = [part.strip() for part in spec.split(" | ")]
    if len(parts) not in (2, 3):
        raise ValueError(f"<!-- value: {spec} -->: expected NAME | PATH or NAME | PATH | FORMAT")
    name, path, template = parts if len(parts) == 3 else (*parts, "{}")
    if not (RESULTS / f"{name}.json").is_file():
        raise FileNotFoundError(f"<!-- value: {spec} -->: no benchmarks/results/{name}.json")
    where, record = f"<!-- value: {spec} -->", _load(name)
    found = _lookup_or_pair(record, path, where)
    number = isinstance(found, (int, float)) and not isinstance(found, bool)
    return template.format(found, pct=100 * found if number else found)


def _script(name: str):
    """A benchmark script as a module (they live in benchmarks/, run as files)."""
    import importlib.util

    key = f"benchmarks_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, ROOT / "benchmarks" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module  # before it runs: its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[key]


# results tables the pages quote, each re-rendered from its JSON by the function its benchmark wrote it with
def _harness_report(record: dict) -> str:
    from benchmarks.harness import report

    return report(record)


def _rendered_by(script: str, function: str = "table_of", part: str | None = None) -> Callable[[dict], str]:
    """The renderer a benchmark script wrote its table with, applied to the record (or to its `part`)."""
    return lambda record: getattr(_script(script), function)(record[part] if part else record)


TABLES: dict[str, Callable[[dict], str]] = {
    "speed": _harness_report,
    "ipt_restoration": _rendered_by("ipt_restoration", "markdown"),
    "randaugment": _rendered_by("randaugment", "markdown"),
    "serve_load": _rendered_by("serve_load", "markdown"),
    "setr_memory": _rendered_by("setr_memory", "by_decoder"),
    "setr_scenes": _rendered_by("setr_scenes"),
    "deformable_detr_scenes": _rendered_by("deformable_detr_scenes"),
    "ipt_speed": _rendered_by("ipt_speed", "markdown", "rows"),
    "deformable_detr_speed": _rendered_by("detr_speed"),
    **{name: _rendered_by(name) for name in (
        "denoising_detection", "setr_pretraining", "seq2seq_tasks", "detr_scenes", "detr_speed", "deform_attn_speed",
        "deform_attn_forms", "checkpoint_cost", "int8_detection", "first_call", "setr_speed", "vqgan_speed",
        "fashion_mnist_recipe", "ddp_speedup", "deit_distillation", "vqgan_fashion_mnist")},
    **{f"transfer_{system}": _rendered_by("transfer", "report") for system in ("detection", "segmentation",
                                                                                "classification")},
}


def rendered_table(name: str) -> str:
    """benchmarks/results/NAME.md as its benchmark's renderer makes it now from NAME.json."""
    if name not in TABLES:
        raise KeyError(f"no renderer for {name}: add its benchmark's table function to TABLES in benchmarks/report.py")
    return TABLES[name](_load(name))


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _block(match: re.Match) -> str:
    return BLOCKS[match.group(2)](*match.group(3).split())


def render(text: str) -> str:
    text = BLOCK.sub(lambda m: m.group(1) + _block(m) + "\n" + m.group(5), text)
    text = VALUE.sub(lambda m: m.group(1) + value(m.group(2)) + m.group(4), text)
    return QUOTED.sub(lambda m: m.group(1) + (ROOT / m.group(2)).read_text().strip() + "\n" + m.group(4), text)


def stale() -> list[str]:
    """'page: block' for every generated block whose text differs from a fresh render."""
    out = []
    for page in pages():
        text = page.read_text()
        for match in BLOCK.finditer(text):
            if match.group(2) not in BLOCKS:
                out.append(f"{page.relative_to(ROOT)}: unknown block {match.group(2)!r} (known: {', '.join(BLOCKS)})")
            elif match.group(4) != _block(match) + "\n":
                out.append(f"{page.relative_to(ROOT)}: {match.group(2)}{match.group(3)}")
        for match in VALUE.finditer(text):
            try:
                fresh = value(match.group(2))
            except (KeyError, ValueError, FileNotFoundError, IndexError) as error:
                out.append(f"{page.relative_to(ROOT)}: {error}")
                continue
            if match.group(3) != fresh:
                out.append(f"{page.relative_to(ROOT)}: {match.group(3)!r} where {match.group(2)!r} now reads {fresh!r}")
        for match in QUOTED.finditer(text):
            source = ROOT / match.group(2)
            if not source.is_file():
                out.append(f"{page.relative_to(ROOT)}: quotes {match.group(2)}, which does not exist")
            elif match.group(3).strip() != source.read_text().strip():
                out.append(f"{page.relative_to(ROOT)}: its copy of {match.group(2)}")
            elif source.stem in TABLES and rendered_table(source.stem).strip() != source.read_text().strip():
                out.append(f"{match.group(2)}: not what its renderer makes from {source.stem}.json now")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a block is stale")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        for problem in problems:
            print(f"stale: {problem} (run python benchmarks/report.py)")
        return 1 if problems else 0
    for page in pages():
        text = page.read_text()
        try:
            new = render(text)
        except (KeyError, ValueError, FileNotFoundError, IndexError) as error:
            print(f"error: {page.relative_to(ROOT)}: {error}", file=sys.stderr)
            return 1
        if new != text:
            tmp = page.with_suffix(".md.tmp")
            tmp.write_text(new)
            tmp.replace(page)
            print(f"rendered {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
