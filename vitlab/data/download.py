"""Download a file over HTTP(S), check its MD5, and only then put it in place.

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

from tqdm.auto import tqdm

__all__ = ["ChecksumError", "DownloadError", "download_file", "md5_of_file"]

_CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """A file could not be fetched (network error, HTTP error)."""


class ChecksumError(DownloadError):
    """A downloaded file's MD5 differs from the expected one; the file has been deleted."""


def md5_of_file(path: str | os.PathLike[str]) -> str:
    """Hex MD5 digest of a file, read in 1 MiB chunks."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download_file(
    url: str,
    dest: str | os.PathLike[str],
    md5: str | None = None,
    *,
    timeout: float = 60.0,
    progress: bool = True,
) -> Path:
    """Download ``url`` to ``dest``, verifying the MD5 digest before the file appears under its name.

    Args:
        url: source address.
        dest: final path; its folder is created if needed.
        md5: expected hex digest; ``None`` skips the check.
        timeout: seconds to wait for the server on connect and on each read.
        progress: show a tqdm progress bar (tqdm hides it when stderr is not a terminal).

    Returns:
        ``dest`` as a Path.

    Raises:
        DownloadError: the server could not be reached or answered with an error.
        ChecksumError: the downloaded bytes do not have the expected MD5 (nothing is left on disk).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # The temporary file lives next to the destination: os.replace is only atomic within one file system.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.md5(usedforsecurity=False)
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
                size = int(response.headers.get("Content-Length") or 0) or None
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
                        digest.update(chunk)
                        bar.update(len(chunk))
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            raise DownloadError(
                f"could not download {url} to {dest}: {exc}. Check the network connection and the URL, "
                f"or put the file at {dest} yourself."
            ) from exc
        got = digest.hexdigest()
        if md5 is not None and got != md5.lower():
            raise ChecksumError(
                f"downloaded {dest.name} from {url} has md5 {got}, expected {md5.lower()}; the file was deleted. "
                "The download was corrupted or the server holds a different file: retry, or fetch the file by "
                f"other means and place it at {dest}."
            )
        os.replace(tmp, dest)
    except BaseException:
        # Covers checksum errors, network errors mid-stream and Ctrl-C alike: never leave a partial file.
        tmp.unlink(missing_ok=True)
        raise
    return dest
