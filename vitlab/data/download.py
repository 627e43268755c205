"""Download a file over HTTP(S), check its MD5 or SHA-256, and only then put it in place.

The file is streamed to a temporary name in the destination folder and renamed with ``os.replace`` once its
checksum is right. Renaming within one folder is atomic, so a reader never sees a half-written or unverified
file under the real name, and an interrupted download leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..atomic import user_file_mode

__all__ = ["ChecksumError", "DownloadError", "download_file", "md5_of_file", "sha256_of_file"]

_CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """A file could not be fetched (network error, HTTP error)."""


class ChecksumError(DownloadError):
    """A downloaded file's MD5 differs from the expected one; the file has been deleted."""


def md5_of_file(path: str | os.PathLike[str]) -> str:
    """Hex MD5 digest of a file, read in 1 MiB chunks."""
    return _digest_of_file(path, hashlib.md5(usedforsecurity=False))


def sha256_of_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 digest of a file, read in 1 MiB chunks."""
    return _digest_of_file(path, hashlib.sha256())


def _digest_of_file(path: str | os.PathLike[str], digest: Any) -> str:
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download_file(
    url: str,
    dest: str | os.PathLike[str],
    md5: str | None = None,
    *,
    sha256: str | None = None,
    timeout: float = 60.0,
    progress: bool = True,
) -> Path:
    """Download ``url`` to ``dest``, verifying its digest before the file appears under its name.

    Args:
        url: source address.
        dest: final path; its folder is created if needed.
        md5: expected hex digest; ``None`` skips the check.
        sha256: expected hex SHA-256 digest, or its first 8 or more digits (torch.hub names its files so);
            ``None`` skips the check.
        timeout: seconds to wait for the server on connect and on each read.
        progress: show a tqdm progress bar (tqdm hides it when stderr is not a terminal).

    Returns:
        ``dest`` as a Path.

    Raises:
        DownloadError: the server could not be reached or answered with an error.
        ChecksumError: the downloaded bytes do not have the expected digest (nothing is left on disk).
    """
    if sha256 is not None and len(sha256) < 8:
        raise ValueError(f"a sha256 to check against has at least 8 hex digits, not {sha256!r}")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # The temporary file lives next to the destination: os.replace is only atomic within one file system.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        digests = {"md5": hashlib.md5(usedforsecurity=False), "sha256": hashlib.sha256()}
        received = 0
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
                size = int(response.headers.get("Content-Length") or 0) or None
                if response.headers.get_content_type() == "text/html":
                    # a sign-in or "confirm the download" page (Google Drive's), not the file
                    raise DownloadError(f"{url} answered with a web page, not a file: it needs a browser. Open it in "
                                        f"one, download the file and put it at {dest} (or pass its path instead)")
                bar = tqdm(
                    total=size,
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    desc=dest.name,
                    disable=None if progress else True,
                    leave=False,
                )
                with bar:
                    while chunk := response.read(_CHUNK):
                        out.write(chunk)
                        for digest in digests.values():
                            digest.update(chunk)
                        received += len(chunk)
                        bar.update(len(chunk))
            if size is not None and received != size:
                raise DownloadError(f"the download of {url} was cut short: {received:,} of {size:,} bytes; retry")
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            raise DownloadError(
                f"could not download {url} to {dest}: {exc}. Check the network connection and the URL, "
                f"or put the file at {dest} yourself."
            ) from exc
        for name, expected in (("md5", md5), ("sha256", sha256)):
            got = digests[name].hexdigest()
            if expected is not None and not (got == expected.lower() or (name == "sha256" and got.startswith(
                    expected.lower()))):
                raise ChecksumError(
                    f"downloaded {dest.name} from {url} has {name} {got}, expected {expected.lower()}; the file was "
                    "deleted. The download was corrupted or the server holds a different file: retry, or fetch the "
                    f"file by other means and place it at {dest}."
                )
        os.chmod(tmp, user_file_mode())  # mkstemp's 0600 would hide the file from other users
        os.replace(tmp, dest)
    except BaseException:
        # Covers checksum errors, network errors mid-stream and Ctrl-C alike: never leave a partial file.
        tmp.unlink(missing_ok=True)
        raise
    return dest
