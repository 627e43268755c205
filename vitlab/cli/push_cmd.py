"""`vitlab push RUN_DIR org/name --to DIR`: a run as a Hugging Face Hub repository, its model card written from the
run's own files (tasks/publish.py). The folder is what the repository holds; `hf upload org/name DIR` uploads it."""

from __future__ import annotations

import argparse

from ..commands import command


@command("push", order=75)
def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("push", help="a run as a Hub repository: weights, config and a model card")
    p.add_argument("run_dir", help="a run folder written by `vitlab train`")
    p.add_argument("repo_id", help="the repository it is for, org/name")
    p.add_argument("--to", metavar="DIR", help="write the repository's files to this new folder (model.safetensors, "
                   "config.json, README.md: the card, curves.png)")
    p.add_argument("--weights", choices=("best", "last", "ema"),
                   help="which of the run's weights (default: the ones it selected: best, else last)")
    p.add_argument("--license", dest="licence", help="the card's license (default: that of the release it was "
                   "fine-tuned from, else unknown)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..tasks.publish import check_repo_id, write_repo

    check_repo_id(args.repo_id)
    if not args.to:
        raise ValueError("uploading from vitlab is not built yet: write the repository's files with --to DIR, then "
                         f"upload them with `hf upload {args.repo_id} DIR`")
    folder = write_repo(args.run_dir, args.repo_id, args.to, args.weights, args.licence)
    print(f"wrote {folder}: {', '.join(sorted(path.name for path in folder.iterdir()))}")
    print(f"upload it with: hf upload {args.repo_id} {folder}")
    return 0
