"""The options every task that starts from weights shares: what `--weights` also takes, and `--strict`."""

from __future__ import annotations

from typing import Any

from ..engine.options import option
from ..models.family import Release

WEIGHTS_BY_NAME = ("; or a release tag (vitlab models --pretrained) or hf-hub:org/name[@revision], whose model is "
                   "built where --model is not given")


def strict_option() -> Any:
    return option(True, "refuse --weights whose keys do not fit the model (a head or position grid of another size "
                  "is adapted, with a warning); false: load what fits",
                  valued=True, group="model")


def released(weights: str | None) -> Release | None:
    """The release a --weights value names by its tag (None for a file, a run, an hf-hub: name, or nothing)."""
    from ..interop.hub import release_named

    return release_named(weights)
