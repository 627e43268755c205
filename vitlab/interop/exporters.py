"""Exporters: a vitlab model written in another library's own form, the inverse of the converters.

    export_to(model, "timm", "out/")            # timm's hub folder: model.safetensors + config.json
    formats_for("vit")                          # ["timm"]: the libraries a family can be written for

Each family's `interop/<family>_formats.py` registers the forms its models can take with `register_exporter`
(the format, the family, and how to write a model and its preprocessing into a folder); nothing above knows which
family has which. A family with no counterpart in a library, or a model of it the library cannot build, is refused
with the formats it has: vitlab's own format (`vitlab push`) keeps every family.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ..registry import Registry

FOREIGN_FORMATS = ("timm", "transformers", "diffusers")


@dataclass(frozen=True)
class Exporter:
    format: str  # one of FOREIGN_FORMATS
    family: str
    # (model in eval mode, its preprocessing record or None, the folder to fill) -> None; raises ValueError for a
    # model of the family that the library cannot build, saying why
    write: Callable[[nn.Module, dict[str, Any] | None, Path], None]


EXPORTERS: Registry[Exporter] = Registry("exporter", discover=__name__.rpartition(".")[0],
                                         matches=lambda module: module.endswith("_formats"), replace=True)


def register_exporter(exporter: Exporter) -> Exporter:
    if exporter.format not in FOREIGN_FORMATS:
        raise ValueError(f"an exporter writes one of {', '.join(FOREIGN_FORMATS)}, not {exporter.format!r}")
    return EXPORTERS.register(f"{exporter.format}:{exporter.family}", exporter)


def formats_for(family: str) -> list[str]:
    return [e.format for e in EXPORTERS.values() if e.family == family]


def export_to(model: nn.Module, fmt: str, out: str | os.PathLike, preprocessing: dict[str, Any] | None = None
              ) -> Path:
    """`model` written to the new folder `out` in library `fmt`'s own form, all or nothing (written beside it, then
    moved into place)."""
    from ..models.family import family_config

    family = family_config(model).family
    if f"{fmt}:{family}" not in EXPORTERS:
        has = formats_for(family)
        raise ValueError(f"a {family} model has no {fmt} form ({fmt} has no counterpart of it); it can be written "
                         f"for {', '.join(has) if has else 'no other library'}, and vitlab's own format (vitlab push) "
                         f"keeps every family")
    exporter = EXPORTERS[f"{fmt}:{family}"]
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"{target} already holds files; give a new or empty folder for the {fmt} model")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        exporter.write(model.eval(), preprocessing, staging)
        if target.exists():
            target.rmdir()
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
