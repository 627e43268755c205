"""`vitlab push RUN_DIR org/name`: a run as a Hugging Face Hub repository (one commit), its model card written from
the run's own files (tasks/publish.py); `--to DIR` writes the repository's files there instead of uploading."""

from __future__ import annotations

import argparse

from ..commands import command


@command("push", order=75)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("push", help="a run as a Hub repository: weights, config and a model card")
    p.add_argument("run_dir", help="a run folder written by `vitlab train`")
    p.add_argument("repo_id", help="the repository it is for, org/name")
    p.add_argument("--to", metavar="DIR", help="write the repository's files to this new folder (model.safetensors, "
                   "config.json, README.md: the card, curves.png) instead of uploading them")
    p.add_argument("--format", dest="fmt", choices=("vitlab", "timm", "transformers", "diffusers"),
                   default="vitlab", help="the repository's form: vitlab's own (every family; default), or the model "
                   "as timm, transformers or diffusers load it (the families they have), with the same card")
    p.add_argument("--private", action="store_true", help="a new repository is created private")
    p.add_argument("--revision", metavar="BRANCH", help="commit to this branch (made from main where it is new)")
    p.add_argument("--message", help="the commit's message (default: vitlab push of RUN_DIR's name)")
    p.add_argument("--weights", choices=("best", "last", "ema"),
                   help="which of the run's weights (default: the ones it selected: best, else last)")
    p.add_argument("--include-graphs", action="store_true", help="the run's ONNX / OpenVINO / int8 graphs of those "
                   "weights too (under graphs/, each recording the labels), which `vitlab predict hf-hub:org/name "
                   "--runtime ...` then uses without exporting again; made by predicting or serving the run on that "
                   "backend, or by `vitlab quantize`")
    p.add_argument("--license", dest="licence", help="the card's license (default: that of the release it was "
                   "fine-tuned from, else unknown)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..tasks.publish import check_repo_id, push, write_repo

    check_repo_id(args.repo_id)
    if args.to:
        folder = write_repo(args.run_dir, args.repo_id, args.to, args.weights, args.licence, args.fmt,
                            args.include_graphs)
        print(f"wrote {folder}: {', '.join(sorted(path.name for path in folder.iterdir()))}")
        return 0
    url = push(args.run_dir, args.repo_id, args.weights, args.licence, private=args.private, revision=args.revision,
               message=args.message, fmt=args.fmt, include_graphs=args.include_graphs)
    print(f"pushed {args.run_dir} to {args.repo_id}: {url}")
    print(f"use it: vitlab predict hf-hub:{args.repo_id} IMAGE")
    return 0
