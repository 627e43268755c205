"""Released weights by name: a release tag ("detr_resnet50.coco") or a Hugging Face repo ("hf-hub:org/name@rev")
turned into a file on disk, fetched once into the Hugging Face cache and read from there afterwards.

    a path that exists           itself
    hf-hub:org/name[/sub][@rev]  the repo's weights (config.json, then the first of model.safetensors,
                                 diffusion_pytorch_model.safetensors, pytorch_model.bin, ...), downloaded through
                                 huggingface_hub into its cache, shared with timm and transformers
    a release tag                the file its family lists (`list_pretrained`): a hub file at its pinned revision,
                                 or a URL, downloaded into the same cache folder with its checksum checked

Offline (`HF_HUB_OFFLINE=1`, or `offline=True`, the CLI's `--offline`) only the cache is read; what is not there
is an error that gives the `vitlab download` command to run on a machine that is online.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ..checkpoint import WEIGHT_FILE_SUFFIXES  # names of files, never tags
from ..data.download import ChecksumError, DownloadError, download_file, sha256_of_file
from ..models.family import Release
from ..models.registry import list_models, list_pretrained

HF_HUB_PREFIX = "hf-hub:"
# the weights a Hugging Face folder may hold, in the order they are preferred (safetensors: no unpickling)
HUB_WEIGHT_FILES = ("model.safetensors", "diffusion_pytorch_model.safetensors", "pytorch_model.bin",
                    "diffusion_pytorch_model.bin")
NEEDS_A_BROWSER = ("drive.google.com",)  # a confirmation page stands before the file
URL_CACHE_FOLDER = "vitlab--url-releases"  # in the hub's cache, beside its models--org--name folders
HF_PROCESSOR_FILE = "preprocessor_config.json"  # a transformers image processor's configuration

__all__ = ["HF_HUB_PREFIX", "ChecksumError", "DownloadError", "OfflineError", "UnknownReleaseError", "cache_dir",
           "default_release", "download", "fetch", "find_release", "is_offline", "names_remote_weights",
           "release_for", "release_named"]


class UnknownReleaseError(ValueError):
    """A name that is neither a file nor a release tag."""


class OfflineError(FileNotFoundError):
    """Weights asked for offline that the cache does not hold."""


def is_offline(offline: bool | None = None) -> bool:
    """`offline` if said; else whether HF_HUB_OFFLINE is set (read now, not at import, so a flag can set it)."""
    if offline is not None:
        return offline
    from huggingface_hub import constants

    return constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def cache_dir() -> Path:
    """The Hugging Face hub cache (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub)."""
    from huggingface_hub import constants

    return Path(os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE)


# ---- names -------------------------------------------------------------------------------------------------------
def find_release(tag: str) -> Release:
    """The release listed under `tag`; an unknown tag is an error naming the close ones."""
    releases = {release.tag: release for release in list_pretrained()}
    if tag in releases:
        return releases[tag]
    close = difflib.get_close_matches(tag, list(releases), n=5, cutoff=0.6)
    model = tag.partition(".")[0]
    same_model = [t for t in releases if t.startswith(model + ".")]
    hint = (f"; did you mean {', '.join(close)}?" if close else
            f"; {model}'s releases: {', '.join(same_model)}" if same_model else "")
    raise UnknownReleaseError(f"no release is called {tag!r}{hint} (`vitlab models --pretrained` lists all "
                              f"{len(releases)})")


def default_release(model_name: str) -> Release:
    """A registered model's default release: the first its family lists for it."""
    for release in _releases_in_listed_order():
        if release.model == model_name:
            return release
    models_with = sorted({r.model for r in list_pretrained()})
    raise UnknownReleaseError(f"{model_name!r} has no released weights; the models that have: "
                              f"{', '.join(models_with)}")


def release_for(model_name: str, pretrained: bool | str) -> Release:
    """What `create_model(model_name, pretrained=...)` loads: True → the default release; a tag, whole
    ("vit_base_patch16_224.augreg2_in21k_ft_in1k") or its part after the model's name ("augreg2_in21k_ft_in1k")."""
    if pretrained is True:
        return default_release(model_name)
    tag = str(pretrained)
    release = find_release(tag if "." in tag or tag.startswith(model_name) else f"{model_name}.{tag}")
    if release.model != model_name:
        raise ValueError(f"release {release.tag!r} is for {release.model}, not {model_name}: build "
                         f"create_model({release.model!r}, pretrained={release.tag!r})")
    return release


def names_remote_weights(source: Any) -> bool:
    """Whether `source` names weights to fetch (an hf-hub: name or a release tag) rather than a file or folder."""
    if not isinstance(source, str | os.PathLike) or Path(source).exists():
        return False
    source = os.fspath(source)
    if source.startswith(HF_HUB_PREFIX):
        return True
    model, dot, release = source.partition(".")
    # a tag is a registered model's name, a dot, a release: "detr_resnet50.coco" (never a path with folders, nor
    # a missing file: "vit_tiny_patch4_28.safetensors")
    return (bool(dot) and os.sep not in source and "/" not in source and model in list_models()
            and Path(source).suffix not in WEIGHT_FILE_SUFFIXES)


def release_named(source: Any) -> Release | None:
    """The release `source` names by its tag (None for a file, a folder, an hf-hub: name, or nothing)."""
    if not source or str(source).startswith(HF_HUB_PREFIX) or not names_remote_weights(source):
        return None
    return find_release(str(source))


# ---- fetching ----------------------------------------------------------------------------------------------------
def fetch(source: str | os.PathLike, *, offline: bool | None = None) -> Path:
    """A local path for a weights source: an existing path as it is; an `hf-hub:` name or a release tag from the
    cache, downloaded first when online. Errors say what to do (see the module's doc)."""
    if Path(source).exists():
        return Path(source)
    source = os.fspath(source)
    if source.startswith(HF_HUB_PREFIX):
        repo_id, subfolder, revision = _parse_hub_name(source)
        return _fetch_hub_folder(repo_id, subfolder, revision, source, is_offline(offline))
    if names_remote_weights(source):
        return _fetch_release(find_release(source), is_offline(offline))
    hint = ""
    if "." in source and os.sep not in source and "/" not in source:
        close = difflib.get_close_matches(source, [r.tag for r in list_pretrained()], n=3, cutoff=0.6)
        hint = f"; releases with a close name: {', '.join(close)}" if close else ""
    raise FileNotFoundError(f"no checkpoint at {source}: give a file or folder, a release tag (`vitlab models "
                            f"--pretrained`) or hf-hub:org/name{hint}")


def download(sources: Iterable[str], to: str | os.PathLike | None = None, *, offline: bool | None = None
             ) -> list[Path]:
    """Fetch releases or hf-hub: repos into the cache ahead of time (for a machine that will go offline); with
    `to`, also copy each into `to/<name>/` (with the config.json it comes with), which `--weights` then reads."""
    found = []
    for source in sources:
        path = fetch(source, offline=offline)
        if to is not None:
            target = Path(to) / source.removeprefix(HF_HUB_PREFIX).replace("/", "--").replace("@", "--")
            target.mkdir(parents=True, exist_ok=True)
            files = sorted(path.iterdir()) if path.is_dir() else [path, path.parent / "config.json"]
            for file in files:
                if file.is_file():
                    _copy_atomically(file, target / file.name)
            path = target if path.is_dir() else target / path.name
        found.append(path)
    return found


def _releases_in_listed_order() -> list[Release]:
    from ..models.registry import list_families

    return [release for family in list_families() for release in vars(family).get("releases", {}).values()]


def _parse_hub_name(source: str) -> tuple[str, str | None, str | None]:
    """"hf-hub:org/name[/sub/folder][@revision]" -> (repo id, subfolder, revision)."""
    name, _, revision = source.removeprefix(HF_HUB_PREFIX).partition("@")
    parts = name.strip("/").split("/")
    if len(parts) < 2 or not all(parts):
        raise ValueError(f"{source!r} does not name a Hugging Face repo: write hf-hub:org/name, optionally "
                         f"/subfolder and @revision (a branch, tag or commit)")
    return "/".join(parts[:2]), "/".join(parts[2:]) or None, revision or None


def _fetch_hub_folder(repo_id: str, subfolder: str | None, revision: str | None, source: str, offline: bool
                      ) -> Path:
    """config.json (where the repo has one) and the preferred weights file of a hub repo, as one cached folder."""
    from huggingface_hub.errors import EntryNotFoundError

    tried = []
    for filename in HUB_WEIGHT_FILES:
        try:  # offline, a file the cache lacks is a LocalEntryNotFoundError, an EntryNotFoundError too
            weights = _hub_file(repo_id, filename, subfolder, revision, offline)
        except EntryNotFoundError:
            tried.append(filename)
            continue
        try:
            _hub_file(repo_id, "config.json", subfolder, revision, offline)
        except EntryNotFoundError:
            return weights  # a bare state dict, whose keys say what it is
        with contextlib.suppress(EntryNotFoundError):  # how transformers prepares the model's images
            _hub_file(repo_id, HF_PROCESSOR_FILE, subfolder, revision, offline)
        return weights.parent
    if offline:
        raise _offline_error(source)
    where = f"{repo_id}/{subfolder}" if subfolder else repo_id
    raise FileNotFoundError(f"{where} holds none of the weight files vitlab reads ({', '.join(tried)})"
                            + ("; name a subfolder: hf-hub:org/name/subfolder" if not subfolder else ""))


def _hub_file(repo_id: str, filename: str, subfolder: str | None, revision: str | None, offline: bool) -> Path:
    """One file through huggingface_hub (its cache; no request at all for a pinned commit already there)."""
    from huggingface_hub import hf_hub_download

    try:
        return Path(hf_hub_download(repo_id, filename, subfolder=subfolder, revision=revision, cache_dir=cache_dir(),
                                    local_files_only=offline))
    except Exception as error:
        if type(error).__module__.startswith("huggingface_hub"):  # its own errors say what went wrong
            raise
        # a connection broken mid-file (after the client's own retries): huggingface_hub keeps no partial file
        # under the real name, so the next try starts clean
        where = f"{repo_id}/{subfolder}/{filename}" if subfolder else f"{repo_id}/{filename}"
        raise DownloadError(f"could not download {where}{f'@{revision}' if revision else ''}: {error}; check the "
                            f"connection and retry (nothing half-written is kept)") from error


def _fetch_release(release: Release, offline: bool) -> Path:
    if release.on_hub:
        from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

        subfolder, _, filename = release.filename.rpartition("/")
        where = (release.source, subfolder or None, release.revision or None, offline)
        try:
            weights = _hub_file(where[0], filename, *where[1:])
        except LocalEntryNotFoundError as error:
            if offline:
                raise _offline_error(release.tag) from error
            raise
        _check_hub_file(weights, release)
        with contextlib.suppress(EntryNotFoundError):  # what the keys cannot say (a timm model's name, a label map)
            _hub_file(where[0], "config.json", *where[1:])
        return weights
    if urlparse(release.source).hostname in NEEDS_A_BROWSER:
        raise DownloadError(f"{release.tag} is on {urlparse(release.source).hostname}, which needs a browser: open "
                            f"{release.source}, download the file and give its path to --weights (or weights=); "
                            f"{release.note}")
    filename = release.filename or Path(urlparse(release.source).path).name
    target = cache_dir() / URL_CACHE_FOLDER / release.tag / filename
    if target.is_file():
        return target
    if offline:
        raise _offline_error(release.tag)
    return download_file(release.source, target, sha256=release.sha256 or None)


def _check_hub_file(path: Path, release: Release) -> None:
    """The file against the release's sha256: the cache names a large file's blob by its sha256, so that costs
    nothing; anything else is hashed. A mismatch removes the file (and its blob) and refuses it."""
    if not release.sha256:
        return
    blob = path.resolve()
    if blob.name == release.sha256 or sha256_of_file(path).startswith(release.sha256):
        return
    path.unlink(missing_ok=True)
    blob.unlink(missing_ok=True)
    raise ChecksumError(f"{release.tag}: the file from {release.source} ({release.filename}) is not the release's "
                        f"(sha256 should start {release.sha256[:16]}); it was removed. The repo's file changed at "
                        f"that revision or the download was corrupted: retry, or report the release as changed")


def _offline_error(source: str) -> OfflineError:
    return OfflineError(f"{source} is not in the cache ({cache_dir()}) and downloads are off (offline). On a machine "
                        f"that is online run `vitlab download {source}` and copy its cache folder here (or "
                        f"`vitlab download {source} --to DIR` and pass that folder's file to --weights); or go online")


def _copy_atomically(source: Path, target: Path) -> None:
    temporary = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(source, temporary)
    os.replace(temporary, target)
