"""curves.png of a run of every kind: the suite's shared runs (one per task, tests/conftest.py) draw theirs once,
at their end; every other run of the suite draws none (`--curves never`, the suite's default)."""

from __future__ import annotations

import json

from PIL import Image


def test_every_kind_of_run_draws_its_metrics(trained):
    runs = [name for name in trained if name not in ("scenes", "photos")]
    for name, run in zip(runs, trained.all_of(runs)):
        saved = json.loads((run / "config.json").read_text())
        assert saved["loop"]["curves"] == "end", name
        with Image.open(run / "curves.png") as picture:
            assert picture.format == "PNG" and picture.width >= 400, (name, picture.size)
