"""`vitlab models [PATTERN]`: the registered models with their sizes and parameter counts, by family, each family
with its own one-line description and what its columns mean. `--pretrained`: the released weights instead, by
tag, with their reference figures and where they come from."""

from __future__ import annotations

import argparse
from itertools import groupby

import torch

from ..commands import command


@command("models", order=90)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "models", help="list registered models", formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("pattern", nargs="?", default="*", help="shell-style pattern, e.g. 'vit_*_patch16_*'")
    parser.add_argument("--pretrained", action="store_true",
                        help="list the released weights (tags for --weights and pretrained=) matching the pattern")
    parser.add_argument("--markdown", action="store_true",
                        help="with --pretrained: a markdown table (the one in the README and the docs)")
    parser.set_defaults(run=run)


COLUMNS = ("image", "patch", "dim", "depth", "heads", "classes")


def run(args: argparse.Namespace) -> int:
    if args.pretrained:
        if args.markdown:
            print(releases_markdown(args.pattern))
            return 0
        return list_releases(args.pattern)
    from ..models import create_model, get_config, list_models
    from ..models.vit import count_parameters

    names = list_models(args.pattern)
    if not names:
        raise ValueError(f"no registered model matches {args.pattern!r}; try `vitlab models` for all of them")
    print(f"{'model':<32} {'image':>9} {'patch':>7} {'dim':>5} {'depth':>5} {'heads':>5} {'classes':>7} {'params':>13}")
    by_family = sorted(names, key=lambda name: (get_config(name).family, name))
    for _, members in groupby(by_family, key=lambda name: get_config(name).family):
        members = list(members)
        config = get_config(members[0])
        columns = f" ({config.columns})" if config.columns else ""
        print(f"── {config.family}: {config.description}{columns}")
        for name in members:
            with torch.device("meta"):  # count without allocating
                model = create_model(name)
            sizes = model.config.summary()
            image, patch, dim, depth, heads, classes = (_shown(sizes.get(key)) for key in COLUMNS)
            print(f"{name:<32} {image:>9} {patch:>7} {dim:>5} {depth:>5} {heads:>5} {classes:>7} "
                  f"{count_parameters(model):>13,}")
    return 0


def list_releases(pattern: str) -> int:
    """One line per release: its tag, the figure its authors report and on what, its licence and its source (the
    hub repo, or the URL's host); a note where something about it could not be verified or needs a hand."""
    from ..models import list_pretrained

    releases = list_pretrained(pattern if any(c in pattern for c in "*?[.") else f"{pattern}*")
    if not releases:
        raise ValueError(f"no release matches {pattern!r}; `vitlab models --pretrained` lists all of them")
    width = max(len(r.tag) for r in releases)
    print(f"{'release':<{width}}  {'reported':<16} {'on':<24} {'licence':<10} source")
    for r in releases:
        key, value = next(iter(r.metric.items()), ("—", ""))  # the first figure; all of them on the next line
        dataset = r.dataset if len(r.dataset) <= 24 else r.dataset[:23] + "…"
        source = r.source + (f"@{r.revision[:7]}" if r.revision else "")
        print(f"{r.tag:<{width}}  {f'{key} {value}':<16} {dataset:<24} {r.licence:<10} {source}")
        if len(r.metric) > 1 or len(r.dataset) > 24:
            figures = ", ".join(f"{k} {v}" for k, v in r.metric.items())
            print(f"{'':<{width}}  reported: {figures} on {r.dataset}")
        if r.note:
            print(f"{'':<{width}}  note: {r.note}")
    print(f"{len(releases)} releases; load one with --weights TAG, or vitlab.create_model(name, pretrained=TAG)")
    return 0


def releases_markdown(pattern: str = "*") -> str:
    """The releases as a markdown table: tag, the authors' figure and its data, licence, source (a link), and what
    could not be verified or needs a hand."""
    from ..models import list_pretrained

    rows = ["| release | reported | on | licence | source | note |", "|---|---|---|---|---|---|"]
    for r in list_pretrained(pattern):
        figures = ", ".join(f"{key} {value}" for key, value in r.metric.items()) or "—"
        link = r.source if not r.on_hub else f"https://huggingface.co/{r.source}"
        where = r.source if not r.on_hub else r.source + (f"@{r.revision[:7]}" if r.revision else "")
        note = r.note.replace("|", "/")
        rows.append(f"| `{r.tag}` | {figures} | {r.dataset} | {r.licence} | [{where.split('://')[-1][:48]}]({link}) "
                    f"| {note} |")
    return "\n".join(rows)


def _shown(value) -> str:
    """28 -> "28", (16, 16) -> "16×16", None (not a size this model has) -> "—"."""
    if value is None:
        return "—"
    return "×".join(map(str, value)) if isinstance(value, tuple | list) else str(value)
