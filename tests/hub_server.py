"""A local stand-in for the Hugging Face Hub, for tests: the part of the Hub's HTTP protocol that downloads and
uploads use.

It speaks what `huggingface_hub` (2.x) asks of the Hub when it downloads, so that `hf_hub_download`,
`snapshot_download`, `HfApi.model_info` / `list_repo_files`, and the libraries built on them (timm's `hf-hub:` names,
transformers' and diffusers' `from_pretrained`) run unchanged against 127.0.0.1:

- `HEAD`/`GET /{org}/{name}/resolve/{revision}/{path}`: the file, with the headers the client builds its cache from:
  `X-Repo-Commit` (the snapshot folder), `ETag` (the blob's name: git's blob id for a regular file, the sha256 for an
  LFS file, which the Hub also sends as `X-Linked-Etag`), `Content-Length` (and `X-Linked-Size` for LFS files), and
  `Range` answered with 206, which the client sends to resume a broken download;
- `GET /api/models/{org}/{name}[/revision/{revision}]`: the repo's info (`id`, `sha`, `siblings`, ...);
- `GET /api/models/{org}/{name}/tree/{revision}[/{path}]`: the file listing, `recursive`, paginated by a `Link` header;
- errors as the Hub sends them: 404 with `X-Error-Code` RepoNotFound / RevisionNotFound / EntryNotFound, from which
  the client raises its own typed errors (and, for EntryNotFound, `X-Repo-Commit`, from which it caches the absence).

And what it asks when it uploads (`HfApi.create_repo`, `create_branch`, `upload_file`, `upload_folder`,
`create_commit`), over the legacy LFS protocol, as the client does when xet is off (HF_HUB_DISABLE_XET, which the
`local_hub` fixture sets: with xet on, the client would ask for a xet token, which is not served):

- `POST /api/validate-yaml`: a README.md's front matter, checked before a commit that holds it (that it closes and
  is made of `key: value` lines; not the Hub's schema);
- `POST /api/repos/create`: a model repo, made as the Hub makes one, with an initial commit of a `.gitattributes`
  (LocalHub's LFS rules in git's words), so that it has a `main` at once; 409 with the repo's `url` when it exists,
  which `exist_ok=True` accepts;
- `POST /api/models/{org}/{name}/branch/{branch}`: a branch, from `startingPoint` or main (409 when it exists);
- `POST /api/models/{org}/{name}/preupload/{revision}`: each file's `uploadMode`, "lfs" where LocalHub stores it in
  LFS (`is_lfs`: the suffixes of the Hub's default .gitattributes, or 10 MiB and more), else "regular"; and the `oid`
  of the file already there, from which the client leaves an unchanged file out of the commit;
- `POST /{org}/{name}.git/info/lfs/objects/batch`: git-lfs's batch API, "basic" transfer: for each object the repo
  lacks, an `upload` action (a `PUT` of the bytes to `/{org}/{name}.git/info/lfs/objects/{sha256}` here, whose
  sha256 is checked) and a `verify` action (`POST .../objects/verify`); an object the repo has gets no actions;
- `POST /api/models/{org}/{name}/commit/{revision}`: the client's NDJSON commit (`header` with `summary` and
  `parentCommit`, `file` with base64 content, `lfsFile` naming an uploaded object by its sha256, `deletedFile`), made
  through the same machinery as `publish` (a new branch starts from main); 412 when `parentCommit` is no longer the
  branch's head, 404 EntryNotFound for a deleted file that is not there, 400 for what is not served (`deletedFolder`,
  `copyFile`, pull requests).

Any token, or none, is accepted: LocalHub has no users. Request bodies are read (by Content-Length, or chunked), so a
kept-alive connection carries the next request. Files are always served from here, never redirected to a CDN: the
client follows a redirect that stays on the same host, and then needs the metadata headers on the final answer, so a
redirect would only add a hop. No xet headers are ever sent, so the client downloads over plain HTTP. Model repos
only (no datasets or spaces); other writes (a POST to a file's URL, DELETE, ...) are answered 405.

Standard library only: `http.server`'s ThreadingHTTPServer, one thread per connection.
"""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
import re
import threading
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode

# What the Hub's default .gitattributes sends to LFS (by suffix), and the size above which it refuses a regular file:
# LFS files are named by their sha256 in the client's cache, regular ones by their git blob id.
LFS_SUFFIXES = frozenset((
    ".7z", ".arrow", ".bin", ".bz2", ".ckpt", ".ftz", ".gz", ".h5", ".joblib", ".mlmodel", ".model", ".msgpack",
    ".npy", ".npz", ".onnx", ".ot", ".parquet", ".pb", ".pickle", ".pkl", ".pt", ".pth", ".rar", ".safetensors",
    ".tar", ".tflite", ".tgz", ".wasm", ".xz", ".zip", ".zst",
))
LFS_THRESHOLD = 10 * 1024 * 1024
# The .gitattributes of a repo made by create_repo, as the Hub writes one: LocalHub's suffix rule, in git's words
GITATTRIBUTES = "".join(f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in sorted(LFS_SUFFIXES)).encode()
SHA256 = re.compile(r"[0-9a-f]{64}")  # an LFS object's name
# The Hub's page sizes for the tree listing (fewer entries per page when the listing is expanded)
TREE_PAGE, TREE_PAGE_EXPANDED = 1000, 50
CHUNK = 64 * 1024


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(path: str, size: int) -> bool:
    """Whether the Hub keeps a file of this name and size in LFS: what `Blob.of` stores and preupload answers."""
    return posixpath.splitext(path)[1].lower() in LFS_SUFFIXES or size >= LFS_THRESHOLD


@dataclass(frozen=True)
class Blob:
    """A file's content, with the ids the Hub gives it."""

    data: bytes
    sha256: str
    lfs: bool
    oid: str  # git's blob id of what git stores: the content, or for an LFS file its pointer
    pointer_size: int | None  # the LFS pointer's length

    @classmethod
    def of(cls, path: str, data: bytes, lfs: bool | None = None) -> Blob:
        """`lfs`: None for the Hub's rule (`is_lfs`); True for a file committed as an LFS object, whatever its name."""
        sha256 = hashlib.sha256(data).hexdigest()
        if is_lfs(path, len(data)) if lfs is None else lfs:
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {len(data)}\n".encode()
            return cls(data, sha256, True, git_blob_id(pointer), len(pointer))
        return cls(data, sha256, False, git_blob_id(data), None)

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.oid


@dataclass(frozen=True, eq=False)  # compared by identity: an entry and its commit refer to each other
class Entry:
    """A file in a commit's tree, and the commit that last changed it (the tree listing's `lastCommit`)."""

    blob: Blob
    last_commit: Commit


@dataclass(frozen=True, eq=False)
class Commit:
    sha: str
    parent: str | None
    title: str
    date: str  # the Hub's ISO format, with milliseconds and a Z
    files: dict[str, Entry] = field(repr=False)


@dataclass
class Repo:
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)  # name -> commit sha
    private: bool = False
    # sha256 -> bytes: the LFS objects of its commits and those uploaded for the next ones (the LFS batch answers
    # "already there" for these, and a commit's lfsFile names one)
    lfs_objects: dict[str, bytes] = field(default_factory=dict)


@dataclass
class Logged:
    """One request as the server saw it: the path is as sent (still percent-encoded), without the query."""

    method: str
    path: str
    query: str
    headers: dict[str, str]  # names in lower case: `record.headers.get("range")`
    status: int | None = None
    body_bytes: int = 0  # bytes of the body actually written (fewer than Content-Length when cut)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes = b""
    # for a file: the file (cut and Range apply), its names for cut(), and the offset the body starts at
    file: bytes | None = None
    names: tuple[str, ...] = ()
    start: int = 0


class LocalHub:
    """A Hugging Face Hub on 127.0.0.1 (a free port), serving the model repos that tests publish into it, or that a
    client creates and uploads to (`hub.file()` / `hub.sha()` read those back as they read a published one).

    `with LocalHub() as hub:` ... or `hub = LocalHub()` ... `hub.close()`. Clients reach it at `hub.url`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._repos: dict[str, Repo] = {}
        self._urls: dict[str, bytes] = {}
        self._cuts: dict[str, list] = {}  # target -> [after_bytes, times left (None: until uncut)]
        self._log: list[Logged] = []
        self._commits_made = 0
        self.errors: list[str] = []  # tracebacks of the server's own failures (a test should fail on any)
        self.tree_page_size: int | None = None  # None: the Hub's page sizes; a test may set 1 to see pagination
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.hub = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"LocalHub {self.url}", daemon=True)
        self._thread.start()

    def __enter__(self) -> LocalHub:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    # ---- what tests publish ------------------------------------------------------------------------------------

    def publish(self, repo_id: str, files: Mapping[str, bytes | Path], branch: str = "main", *,
                delete: Iterable[str] = (), message: str | None = None, sha: str | None = None) -> str:
        """Add a commit to model repo `repo_id` (created if new) on `branch`: the branch's files, with `files` added
        or replaced and `delete` removed, as an upload to the Hub does. Returns the commit's sha; earlier commits stay
        addressable by theirs. A new branch starts from main's last commit. `sha`: the commit's id, where a test
        needs a given one (a release pinned to the real Hub's commit)."""
        _check_repo_id(repo_id)
        contents = {}
        for path, value in files.items():
            if isinstance(value, Path):
                value = value.read_bytes()
            if not isinstance(value, bytes | bytearray):  # a str could be a path or a text: say which
                raise TypeError(f"{path}: give bytes or a pathlib.Path, not {type(value).__name__}")
            path = _repo_path(path)
            contents[path] = Blob.of(path, bytes(value))
        with self._lock:
            repo = self._repos.get(repo_id, Repo())  # registered once the commit is made
            return self._add_commit(repo_id, repo, contents, branch, delete=delete, message=message, sha=sha).sha

    def _add_commit(self, repo_id: str, repo: Repo, contents: Mapping[str, Blob], branch: str, *,
                    delete: Iterable[str] = (), message: str | None = None, sha: str | None = None) -> Commit:
        """The commit of `publish`, and of an upload: called with the lock held, so that an upload's checks (its
        parent commit, the files it deletes) and its commit see the same branch head."""
        parent_sha = repo.branches.get(branch, repo.branches.get("main"))
        parent = repo.commits[parent_sha] if parent_sha else None
        self._commits_made += 1
        # a commit's id only has to be unique and 40 hex digits, as the client checks; the counter makes it so
        # even when the same files are published twice
        digest = hashlib.sha1(f"{repo_id}\0{parent_sha}\0{branch}\0{self._commits_made}".encode())
        for path in sorted(contents):
            digest.update(f"\0{path}\0{contents[path].oid}".encode())
        date = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        old = dict(parent.files) if parent else {}
        for path in delete:
            if old.pop(path, None) is None:
                raise KeyError(f"{repo_id}@{branch} has no file {path!r} to delete")
        commit = Commit(sha or digest.hexdigest(), parent_sha, message or f"Upload {len(contents)} files", date, old)
        for path, blob in contents.items():  # a file keeps its last commit when published again unchanged
            same = path in old and old[path].blob == blob
            commit.files[path] = old[path] if same else Entry(blob, commit)
        repo.lfs_objects.update((blob.sha256, blob.data) for blob in contents.values() if blob.lfs)
        repo.commits[commit.sha] = commit
        repo.branches[branch] = commit.sha
        self._repos[repo_id] = repo
        return commit

    def publish_folder(self, repo_id: str, folder: str | Path, branch: str = "main", *,
                       path_in_repo: str = "", message: str | None = None) -> str:
        """`publish` every file under `folder` (at `path_in_repo` in the repo)."""
        folder = Path(folder)
        prefix = path_in_repo.strip("/") + "/" if path_in_repo.strip("/") else ""
        files = {prefix + path.relative_to(folder).as_posix(): path
                 for path in sorted(folder.rglob("*")) if path.is_file()}
        if not files:
            raise ValueError(f"no files under {folder}")
        return self.publish(repo_id, files, branch, message=message)

    def serve_url(self, path: str, data: bytes | Path) -> str:
        """Serve `data` at `path` on this server, outside any repo (a release hosted elsewhere than the Hub);
        returns the full URL."""
        path = "/" + path.lstrip("/")
        with self._lock:
            self._urls[path] = data.read_bytes() if isinstance(data, Path) else bytes(data)
        return self.url + quote(path)

    def sha(self, repo_id: str, revision: str = "main") -> str:
        """The commit a branch (or a commit sha) of a published repo stands for."""
        return self._commit(repo_id, revision).sha

    def file(self, repo_id: str, path: str, revision: str = "main") -> bytes:
        """A published file's bytes, to compare with what a client got."""
        return self._commit(repo_id, revision).files[path].blob.data

    def _commit(self, repo_id: str, revision: str) -> Commit:
        with self._lock:
            commit = self._resolve(self._repos[repo_id], revision)
        if commit is None:
            raise KeyError(f"{repo_id} has no revision {revision!r}")
        return commit

    # ---- what tests look at and inject ------------------------------------------------------------------------

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request so far, in order; the path as sent (percent-encoded), without query."""
        with self._lock:
            return [(r.method, r.path) for r in self._log]

    @property
    def log(self) -> list[Logged]:
        """The requests with their query, headers (Range, ...), status and body bytes written."""
        with self._lock:
            return list(self._log)

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    def cut(self, path_or_filename: str, after_bytes: int, times: int | None = 1) -> None:
        """Break the next `times` GETs of a file (None: every GET until `uncut`): the answer announces the whole
        Content-Length, then the connection closes after `after_bytes` bytes of the file, as a network failure does.

        The file is named by its request path (as in `requests`, unquoted), by its path in its repo, or by its file
        name. The cut is at a byte of the file, not of the answer: a resumed download (a Range request starting past
        `after_bytes`) gets its headers and nothing more, so a client that resumes makes no progress."""
        if after_bytes < 0:
            raise ValueError("after_bytes must be >= 0")
        with self._lock:
            self._cuts[path_or_filename] = [after_bytes, times]

    def uncut(self, path_or_filename: str | None = None) -> None:
        """Stop cutting one file (None: all of them)."""
        with self._lock:
            if path_or_filename is None:
                self._cuts.clear()
            else:
                self._cuts.pop(path_or_filename, None)

    def _take_cut(self, names: tuple[str, ...]) -> int | None:
        """Where to cut this GET of a file, if a cut names it (using up one of its times)."""
        with self._lock:
            for name in names:
                if name in self._cuts:
                    after_bytes, times = self._cuts[name]
                    if times is not None:
                        if times <= 1:
                            del self._cuts[name]
                        else:
                            self._cuts[name][1] = times - 1
                    return after_bytes
        return None

    # ---- the protocol ------------------------------------------------------------------------------------------

    def _resolve(self, repo: Repo, revision: str) -> Commit | None:
        """A branch name or a full commit sha, as the client sends them (short shas and tags are not served)."""
        sha = repo.branches.get(revision, revision)
        return repo.commits.get(sha)

    def _route(self, method: str, raw_path: str, params: dict[str, list[str]], body: bytes) -> Reply:
        if method not in ("GET", "HEAD"):
            return self._write(method, raw_path, params, body)
        with self._lock:
            served = self._urls.get(unquote(raw_path))
        if served is not None:
            return _file_reply(served, {}, names=(unquote(raw_path), posixpath.basename(unquote(raw_path))))
        segments = raw_path.split("/")[1:]  # split before unquoting: the client sends a branch's '/' as %2F
        if segments[:2] == ["api", "models"] and len(segments) >= 4:
            return self._api(segments[2:], params, raw_path)
        if len(segments) >= 5 and segments[2] == "resolve":
            repo_id = f"{unquote(segments[0])}/{unquote(segments[1])}"
            return self._resolve_file(repo_id, unquote(segments[3]), unquote("/".join(segments[4:])))
        return _error(404, None, f"LocalHub serves no {raw_path}")

    def _lookup(self, repo_id: str, revision: str) -> Commit | Reply:
        with self._lock:
            repo = self._repos.get(repo_id)
            commit = self._resolve(repo, revision) if repo else None
        if repo is None:
            return _error(404, "RepoNotFound", "Repository not found")
        if commit is None:
            return _error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    def _resolve_file(self, repo_id: str, revision: str, path: str) -> Reply:
        commit = self._lookup(repo_id, revision)
        if isinstance(commit, Reply):
            return commit
        entry = commit.files.get(path)
        if entry is None:
            # the client caches the absence under this commit (.no_exist), which offline loads rely on
            return _error(404, "EntryNotFound", f"{path} does not exist on {revision!r}",
                          {"X-Repo-Commit": commit.sha})
        blob = entry.blob
        headers = {"X-Repo-Commit": commit.sha, "ETag": f'"{blob.etag}"'}
        if blob.lfs:
            headers |= {"X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": str(len(blob.data))}
        return _file_reply(blob.data, headers, names=(f"/{repo_id}/resolve/{revision}/{path}", path,
                                                       posixpath.basename(path)))

    def _api(self, segments: list[str], params: dict[str, list[str]], raw_path: str) -> Reply:
        repo_id = f"{unquote(segments[0])}/{unquote(segments[1])}"
        rest = segments[2:]
        if not rest or (rest[0] == "revision" and len(rest) >= 2):  # huggingface_hub sends a '/' in it as %2F
            commit = self._lookup(repo_id, unquote("/".join(rest[1:])) if rest else "main")
            if isinstance(commit, Reply):
                return commit
            return _json(self._model_info(repo_id, commit, blobs=_flag(params, "blobs")))
        if rest[0] == "tree" and len(rest) >= 2:
            commit = self._lookup(repo_id, unquote(rest[1]))
            if isinstance(commit, Reply):
                return commit
            return self._tree(commit, unquote("/".join(rest[2:])).strip("/"), params, raw_path)
        return _error(404, None, f"LocalHub serves no /api/models/{'/'.join(segments)}")

    def _model_info(self, repo_id: str, commit: Commit, blobs: bool) -> dict[str, Any]:
        with self._lock:
            repo = self._repos[repo_id]
            first = min(repo.commits.values(), key=lambda c: c.date).date
        siblings = []
        for path, entry in sorted(commit.files.items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:  # files_metadata=True
                sibling |= {"size": len(entry.blob.data), "blobId": entry.blob.oid}
                if entry.blob.lfs:
                    sibling["lfs"] = {"size": len(entry.blob.data), "sha256": entry.blob.sha256,
                                      "pointerSize": entry.blob.pointer_size}
            siblings.append(sibling)
        return {"_id": _object_id(repo_id), "id": repo_id, "modelId": repo_id,
                "author": repo_id.split("/")[0], "sha": commit.sha, "lastModified": commit.date, "createdAt": first,
                "private": repo.private, "disabled": False, "gated": False, "downloads": 0, "likes": 0, "tags": [],
                "siblings": siblings, "usedStorage": sum(len(e.blob.data) for e in commit.files.values())}

    def _tree(self, commit: Commit, path: str, params: dict[str, list[str]], raw_path: str) -> Reply:
        recursive, expand = _flag(params, "recursive"), _flag(params, "expand")
        prefix = path + "/" if path else ""
        under = {p: e for p, e in commit.files.items() if p.startswith(prefix)}
        if path and not under:
            return _error(404, "EntryNotFound", f"{path} does not exist on {commit.sha}", {"X-Repo-Commit": commit.sha})
        folders: dict[str, list[Entry]] = {}  # every folder under `path`, with the files in it at any depth
        for p, entry in under.items():
            parts = p[len(prefix):].split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                folders.setdefault(prefix + "/".join(parts[:depth]), []).append(entry)
        listed = []
        for folder, entries in sorted(folders.items()):
            if recursive or "/" not in folder[len(prefix):]:
                oid = hashlib.sha1("\0".join(sorted(e.blob.oid for e in entries)).encode()).hexdigest()
                item = {"type": "directory", "oid": oid, "size": 0, "path": folder}
                if expand:
                    item["lastCommit"] = _commit_json(max((e.last_commit for e in entries), key=lambda c: c.date))
                listed.append(item)
        for p, entry in sorted(under.items()):
            if recursive or "/" not in p[len(prefix):]:
                item = {"type": "file", "oid": entry.blob.oid, "size": len(entry.blob.data), "path": p}
                if entry.blob.lfs:
                    item["lfs"] = {"oid": entry.blob.sha256, "size": len(entry.blob.data),
                                   "pointerSize": entry.blob.pointer_size}
                if expand:
                    item["lastCommit"] = _commit_json(entry.last_commit)
                    item["securityFileStatus"] = {"status": "safe", "avScan": {"virusFound": False,
                                                  "virusNames": None}, "pickleImportScan": None}
                listed.append(item)
        # the Hub pages with a cursor in a Link header, which the client follows as given
        size = self.tree_page_size or (TREE_PAGE_EXPANDED if expand else TREE_PAGE)
        start = int(params.get("cursor", ["0"])[0])
        reply = _json(listed[start:start + size])
        if start + size < len(listed):
            query = {k: v[0] for k, v in params.items()} | {"cursor": str(start + size)}
            reply.headers["Link"] = f'<{self.url}{raw_path}?{urlencode(query)}>; rel="next"'
        return reply

    # ---- uploads -----------------------------------------------------------------------------------------------

    def _write(self, method: str, raw_path: str, params: dict[str, list[str]], body: bytes) -> Reply:
        """The requests of an upload, in the order the client makes them: create the repo, ask each file's upload
        mode, upload the LFS files (batch, PUT, verify), commit."""
        segments = raw_path.split("/")[1:]
        if method == "POST" and segments == ["api", "repos", "create"]:
            return self._create_repo(body)
        if method == "POST" and segments == ["api", "validate-yaml"]:
            return self._validate_yaml(body)
        if method == "POST" and segments[:2] == ["api", "models"] and len(segments) >= 6 and segments[5]:
            repo_id = f"{unquote(segments[2])}/{unquote(segments[3])}"
            revision = unquote("/".join(segments[5:]))  # the client quotes a branch's '/' as %2F
            if segments[4] == "preupload":
                return self._preupload(repo_id, revision, params, body)
            if segments[4] == "commit":
                return self._upload_commit(repo_id, revision, params, body)
            if segments[4] == "branch":
                return self._create_branch(repo_id, revision, body)
        if len(segments) == 6 and unquote(segments[1]).endswith(".git") and segments[2:5] == ["info", "lfs", "objects"]:
            repo_id, target = f"{unquote(segments[0])}/{unquote(segments[1])[:-len('.git')]}", segments[5]
            if method == "POST" and target == "batch":
                return self._lfs_batch(repo_id, body)
            if method == "POST" and target == "verify":
                return self._lfs_verify(repo_id, body)
            if method == "PUT" and SHA256.fullmatch(target):
                return self._lfs_put(repo_id, target, body)
        return _error(405, None, f"LocalHub takes no {method} at {raw_path}: uploads go through create_repo, "
                                 "preupload, the LFS batch API and commit")

    def _repo(self, repo_id: str) -> Repo:
        """The repo an upload goes to (called with the lock held): 404 RepoNotFound, from which the client raises
        RepositoryNotFoundError, where there is none (an upload does not create one, as on the Hub)."""
        repo = self._repos.get(repo_id)
        if repo is None:
            raise _Refused(_error(404, "RepoNotFound", "Repository not found"))
        return repo

    def _validate_yaml(self, body: bytes) -> Reply:
        """What the client asks before it commits a README.md: whether its YAML front matter is metadata the Hub
        takes. Here: that the front matter closes (`---` ... `---`) and its top level is `key: value` lines; the
        Hub's own schema checks (license names, model-index fields) are not made, a test checks the card itself."""
        content = _json_body(body).get("content")
        if not isinstance(content, str):
            raise _bad("validate-yaml takes {'content': the README's text}")
        lines = content.splitlines()
        errors = []
        if lines and lines[0].strip() == "---":
            end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == "---"), None)
            if end is None:
                errors.append({"message": "the metadata block (---) is not closed"})
            else:
                errors += [{"message": f"line {i + 1}: not a 'key: value' line: {line!r}"}
                           for i, line in enumerate(lines[1:end], 1)
                           if line and not line.startswith((" ", "-", "#")) and ":" not in line]
        if errors:
            return Reply(400, {"Content-Type": "application/json; charset=utf-8"},
                         json.dumps({"errors": errors, "warnings": []}).encode())
        return _json({"errors": [], "warnings": []})

    def _create_repo(self, body: bytes) -> Reply:
        payload = _json_body(body)
        name, organization, repo_type = payload.get("name"), payload.get("organization"), payload.get("type")
        if repo_type not in (None, "model"):
            raise _bad(f"LocalHub serves model repos only, not {repo_type!r} ones")
        if not isinstance(name, str) or not isinstance(organization, str | None):
            raise _bad("a repo is created from a 'name' and an 'organization'")
        if not organization and "/" not in name:  # the Hub would use the token's user, and LocalHub has no users
            raise _bad(f"LocalHub has no user to create {name!r} for: give the repo id as 'org/name'")
        repo_id = f"{organization}/{name}" if organization else name
        try:
            _check_repo_id(repo_id)
        except ValueError as error:
            raise _bad(str(error)) from None
        url = f"{self.url}/{repo_id}"
        private = payload.get("visibility", "private" if payload.get("private") else "public") == "private"
        with self._lock:
            if repo_id in self._repos:  # exist_ok=True takes this 409, and reads the url from it
                return _error(409, None, "You already created this model repo", extra={"url": url})
            # the Hub's first commit: a .gitattributes, so that main exists (model_info has a sha) before any upload
            gitattributes = {".gitattributes": Blob.of(".gitattributes", GITATTRIBUTES)}
            self._add_commit(repo_id, Repo(private=private), gitattributes, "main", message="initial commit")
        return _json({"url": url, "name": repo_id, "id": _object_id(repo_id)})

    def _create_branch(self, repo_id: str, branch: str, body: bytes) -> Reply:
        start = (_json_body(body) if body else {}).get("startingPoint") or "main"
        if not isinstance(start, str):
            raise _bad("a branch's 'startingPoint' is a revision")
        with self._lock:
            repo = self._repo(repo_id)
            if branch in repo.branches:  # exist_ok=True takes this 409
                return _error(409, None, f"Reference already exists: refs/heads/{branch}")
            if not branch or branch in repo.commits:
                raise _bad(f"not a branch name: {branch!r}")
            commit = self._resolve(repo, start)
            if commit is None:
                return _error(404, "RevisionNotFound", f"Invalid rev id: {start}")
            repo.branches[branch] = commit.sha
        return _json({})

    def _base(self, repo: Repo, revision: str) -> Commit | None:
        """The commit an upload to `revision` starts from: its head, or main's for a new branch, as in `publish`."""
        return self._resolve(repo, revision) or self._resolve(repo, "main")

    def _preupload(self, repo_id: str, revision: str, params: dict[str, list[str]], body: bytes) -> Reply:
        _no_pull_request(params)
        files = _json_body(body).get("files")
        if not isinstance(files, list) or not all(
                isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("size"), int)
                for f in files):
            raise _bad("preupload takes {'files': [{'path', 'size', 'sample'}, ...]}")
        with self._lock:
            base = self._base(self._repo(repo_id), revision)
        answer = []
        for file in files:
            path = _checked_path(file["path"])
            mode = "lfs" if is_lfs(path, file["size"]) else "regular"
            item: dict[str, Any] = {"path": file["path"], "uploadMode": mode, "shouldIgnore": False}
            entry = base.files.get(path) if base else None
            if entry is not None:  # what the client compares with its file's sha256 (LFS) or git blob id (regular)
                item["oid"] = entry.blob.sha256 if entry.blob.lfs else entry.blob.oid
            answer.append(item)
        return _json({"files": answer, "commitOid": base.sha if base else None})

    def _lfs_batch(self, repo_id: str, body: bytes) -> Reply:
        """git-lfs's batch API (docs/api/batch.md in git-lfs), for uploads: where to PUT each object and where to
        verify it, both here (the Hub answers an S3 URL, which the client PUTs to as it is)."""
        payload = _json_body(body)
        if payload.get("operation") != "upload":
            raise _bad("LocalHub's LFS batch API answers uploads only: downloads go through resolve")
        transfers, algorithm = payload.get("transfers", ["basic"]), payload.get("hash_algo", "sha256")
        if not isinstance(transfers, list) or "basic" not in transfers or algorithm != "sha256":
            raise _bad("LocalHub's LFS batch API offers the 'basic' transfer of sha256-named objects only")
        objects = payload.get("objects")
        if not isinstance(objects, list) or not all(isinstance(o, dict) for o in objects):
            raise _bad("an LFS batch request lists its 'objects'")
        with self._lock:
            present = set(self._repo(repo_id).lfs_objects)
        href = f"{self.url}/{quote(repo_id)}.git/info/lfs/objects"
        answer = []
        for obj in objects:
            oid, size = obj.get("oid"), obj.get("size")
            if not (isinstance(oid, str) and SHA256.fullmatch(oid) and isinstance(size, int) and size >= 0):
                answer.append({"oid": str(oid), "size": size if isinstance(size, int) else 0,
                               "error": {"code": 422, "message": "an object is named by its sha256 and has a size"}})
            elif oid in present:  # no actions: the client skips the upload
                answer.append({"oid": oid, "size": size})
            else:
                answer.append({"oid": oid, "size": size, "authenticated": True,
                               "actions": {"upload": {"href": f"{href}/{oid}", "expires_in": 3600},
                                           "verify": {"href": f"{href}/verify", "expires_in": 3600}}})
        reply = _json({"transfer": "basic", "objects": answer, "hash_algo": "sha256"})
        reply.headers["Content-Type"] = "application/vnd.git-lfs+json"
        return reply

    def _lfs_put(self, repo_id: str, oid: str, body: bytes) -> Reply:
        if hashlib.sha256(body).hexdigest() != oid:
            raise _bad(f"the bytes PUT for LFS object {oid} have sha256 {hashlib.sha256(body).hexdigest()}")
        with self._lock:
            self._repo(repo_id).lfs_objects[oid] = body
        return Reply(200, {"ETag": f'"{hashlib.md5(body).hexdigest()}"'})  # what S3 answers

    def _lfs_verify(self, repo_id: str, body: bytes) -> Reply:
        payload = _json_body(body)
        oid, size = payload.get("oid"), payload.get("size")
        with self._lock:
            data = self._repo(repo_id).lfs_objects.get(oid) if isinstance(oid, str) else None
        if data is None:
            return _error(404, None, f"LFS object {oid} was not uploaded")
        if size != len(data):
            raise _bad(f"LFS object {oid} has {len(data)} bytes, not {size}")
        return _json({})

    def _upload_commit(self, repo_id: str, branch: str, params: dict[str, list[str]], body: bytes) -> Reply:
        _no_pull_request(params)
        header, added, deleted = _commit_operations(body)
        with self._lock:
            repo = self._repo(repo_id)
            if branch not in repo.branches and branch in repo.commits:
                raise _bad(f"a commit goes to a branch, not onto commit {branch}")
            base = self._base(repo, branch)
            parent = header.get("parentCommit")
            if parent is not None and not (isinstance(parent, str) and len(parent) >= 7 and base is not None
                                           and base.sha.startswith(parent)):  # a full sha or its first 7+ digits
                return _error(412, None, "A commit has happened since. Please refresh and try again.")
            files = base.files if base else {}
            for path in deleted:
                if path not in files:  # the message the client looks for to add its own advice
                    return _error(404, "EntryNotFound", f"A file with this name doesn't exist: {path}")
            contents = {}
            for path, value in added.items():
                if isinstance(value, bytes):
                    contents[path] = Blob.of(path, value)
                    continue
                oid, size = value
                data = repo.lfs_objects.get(oid)
                if data is None:
                    raise _bad(f"{path}: LFS object {oid} was never uploaded (the LFS batch API comes first)")
                if size is not None and size != len(data):
                    raise _bad(f"{path}: LFS object {oid} has {len(data)} bytes, not {size}")
                contents[path] = Blob.of(path, data, lfs=True)
            commit = self._add_commit(repo_id, repo, contents, branch, delete=deleted, message=header["summary"])
        url = f"{self.url}/{repo_id}/commit/{commit.sha}"
        return _json({"success": True, "commitOid": commit.sha, "commitUrl": url, "hookOutput": "",
                      "pullRequestUrl": None})

    # ---- the connection ----------------------------------------------------------------------------------------

    def _handle(self, handler: _Handler, method: str) -> None:
        raw_path, _, query = handler.path.partition("?")
        record = Logged(method, raw_path, query, {k.lower(): v for k, v in handler.headers.items()})
        with self._lock:
            self._log.append(record)
        try:
            reply = self._route(method, raw_path, parse_qs(query), _read_body(handler))
        except _Refused as refused:  # a request LocalHub does not take, answered as the Hub would
            reply = refused.reply
        except Exception:  # noqa: BLE001 -- a bug here: answer 500 and keep the traceback for the test to fail on
            self.errors.append(traceback.format_exc())
            reply = _error(500, None, "LocalHub failed; see hub.errors")
        try:
            self._send(handler, method, reply, record)
        except ConnectionError:  # the client went away mid-answer: its business, not a server failure
            handler.close_connection = True

    def _send(self, handler: _Handler, method: str, reply: Reply, record: Logged) -> None:
        body, cut_at = reply.body, None
        if reply.file is not None:
            reply = _ranged(reply, handler.headers.get("Range")) if method == "GET" else reply
            body = reply.body
            if method == "GET":
                after = self._take_cut(reply.names)
                if after is not None:
                    cut_at = max(0, min(len(body), after - reply.start))
        handler.send_response(reply.status)
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        record.status = reply.status
        if method == "HEAD":
            return
        to_send = body if cut_at is None else body[:cut_at]
        for offset in range(0, len(to_send), CHUNK):
            handler.wfile.write(to_send[offset:offset + CHUNK])
            record.body_bytes += len(to_send[offset:offset + CHUNK])
        if cut_at is not None and cut_at < len(body):
            handler.close_connection = True  # closing before Content-Length bytes: the client sees a broken body


class _Refused(Exception):
    """An answer other than the usual one, raised from deep in an upload's checks."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.headers.get("X-Error-Message", reply.status))
        self.reply = reply


def _bad(message: str) -> _Refused:
    """A 400, from which the client raises BadRequestError with `message`."""
    return _Refused(_error(400, None, message))


def _check_repo_id(repo_id: str) -> None:
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"a model repo id is 'org/name', not {repo_id!r}")


def _repo_path(path: str) -> str:
    """A file's path in a repo, without the slashes around it; ValueError for what cannot be one ('', '..', ...)."""
    path = path.strip("/")
    if not path or any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"not a file path in a repo: {path!r}")
    return path


def _checked_path(path: Any) -> str:
    """`_repo_path` of a path an upload sent: 400 for one that cannot be."""
    try:
        return _repo_path(path) if isinstance(path, str) else _repo_path("")
    except ValueError as error:
        raise _bad(str(error)) from None


def _no_pull_request(params: dict[str, list[str]]) -> None:
    if _flag(params, "create_pr"):
        raise _bad("LocalHub opens no pull requests (create_pr): commit to a branch")


def _object_id(repo_id: str) -> str:
    """The Hub's database id of a repo (24 hex digits), made up from its name."""
    return hashlib.md5(repo_id.encode()).hexdigest()[:24]


def _read_body(handler: _Handler) -> bytes:
    """The request's body, read whole (by Content-Length, or chunked), so that the kept-alive connection carries the
    next request: a body left unread would be taken for it. A body that cannot be read is answered 400, and the
    connection closed, since where the next request would start is unknown."""
    try:
        if "chunked" in handler.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while size := int(handler.rfile.readline(1024).split(b";")[0].strip(), 16):
                chunks.append(handler.rfile.read(size))
                if len(chunks[-1]) < size or handler.rfile.readline(1024).strip():
                    raise ValueError("a chunk cut short")
            while handler.rfile.readline(1024).strip():  # trailers, up to the empty line
                pass
            return b"".join(chunks)
        length = int(handler.headers.get("Content-Length") or 0)
        if length < 0:
            raise ValueError(f"Content-Length {length}")
        body = handler.rfile.read(length) if length else b""
        if len(body) < length:
            raise ValueError(f"{len(body)} of Content-Length {length} bytes before the connection closed")
        return body
    except (ValueError, OSError) as error:
        handler.close_connection = True
        raise _bad(f"LocalHub could not read the request's body: {error}") from None


def _json_body(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except ValueError as error:
        raise _bad(f"the request's body is not JSON: {error}") from None
    if not isinstance(value, dict):
        raise _bad("the request's body is not a JSON object")
    return value


def _commit_operations(body: bytes) -> tuple[dict[str, Any], dict[str, bytes | tuple[str, int | None]], list[str]]:
    """The client's NDJSON commit: its header (`summary`, `description`, `parentCommit`), the files it adds (a regular
    file's bytes, or an LFS file's (sha256, size)) and the files it deletes."""
    try:
        items = [json.loads(line) for line in body.splitlines() if line.strip()]
    except ValueError as error:
        raise _bad(f"a commit is NDJSON, one operation a line: {error}") from None
    if not items or not all(isinstance(item, dict) and isinstance(item.get("value"), dict) for item in items):
        raise _bad("a commit's lines are {'key': ..., 'value': {...}}")
    if items[0].get("key") != "header" or not isinstance(items[0]["value"].get("summary"), str):
        raise _bad("a commit's first line is its header, with a 'summary'")
    added: dict[str, bytes | tuple[str, int | None]] = {}
    deleted: list[str] = []
    for item in items[1:]:
        key, value = item["key"], item["value"]
        if key not in ("file", "lfsFile", "deletedFile"):
            raise _bad(f"LocalHub does not take {key!r} operations in a commit (only file, lfsFile, deletedFile)")
        path = _checked_path(value.get("path"))
        if key == "deletedFile":
            deleted.append(path)
        elif key == "file":
            content, encoding = value.get("content"), value.get("encoding", "base64")
            if not isinstance(content, str) or encoding not in ("base64", "utf-8"):
                raise _bad(f"{path}: a file's 'content' is a string, in base64 or utf-8")
            try:
                added[path] = base64.b64decode(content, validate=True) if encoding == "base64" else content.encode()
            except ValueError as error:
                raise _bad(f"{path}: not base64: {error}") from None
        else:
            oid, size = value.get("oid"), value.get("size")
            if value.get("algo", "sha256") != "sha256" or not (isinstance(oid, str) and SHA256.fullmatch(oid)):
                raise _bad(f"{path}: an lfsFile names its object by its sha256 ('oid')")
            added[path] = (oid, size if isinstance(size, int) else None)
    return items[0]["value"], added, list(dict.fromkeys(deleted))  # a file deleted twice is deleted once


def _flag(params: dict[str, list[str]], name: str) -> bool:
    return params.get(name, ["false"])[0].lower() in ("1", "true")


def _commit_json(commit: Commit) -> dict[str, str]:
    return {"id": commit.sha, "title": commit.title, "date": commit.date}


def _json(value: Any) -> Reply:
    return Reply(200, {"Content-Type": "application/json; charset=utf-8"}, json.dumps(value).encode())


def _error(status: int, code: str | None, message: str, headers: dict[str, str] | None = None, *,
           extra: dict[str, Any] | None = None) -> Reply:
    """`extra`: more of the JSON body than the error (the 409 of create_repo has the repo's url)."""
    headers = {"Content-Type": "application/json; charset=utf-8", "X-Error-Message": message, **(headers or {})}
    if code:
        headers["X-Error-Code"] = code
    return Reply(status, headers, json.dumps({"error": message, **(extra or {})}).encode())


def _file_reply(data: bytes, headers: dict[str, str], names: tuple[str, ...]) -> Reply:
    headers = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes", **headers}
    return Reply(200, headers, data, file=data, names=names)


def _ranged(reply: Reply, range_header: str | None) -> Reply:
    """The part of a file a `Range: bytes=a-b | a- | -n` asks for (206), or 416 when none of it exists. Anything
    else (several ranges, another unit) is ignored and the whole file sent, as HTTP allows."""
    data = reply.file
    assert data is not None
    spec = (range_header or "").strip()
    if not spec.startswith("bytes=") or "," in spec:
        return reply
    first, _, last = spec[len("bytes="):].strip().partition("-")
    try:
        if first:
            start, end = int(first), int(last) if last else len(data) - 1
        else:
            start, end = max(0, len(data) - int(last)), len(data) - 1
    except ValueError:
        return reply
    end = min(end, len(data) - 1)
    if start >= len(data) or start > end:
        headers = {k: v for k, v in reply.headers.items() if k != "Accept-Ranges"}
        return Reply(416, headers | {"Content-Range": f"bytes */{len(data)}"}, b"")
    headers = reply.headers | {"Content-Range": f"bytes {start}-{end}/{len(data)}"}
    return Reply(206, headers, data[start:end + 1], file=data, names=reply.names, start=start)


class _Server(ThreadingHTTPServer):
    hub: LocalHub
    daemon_threads = True  # a keep-alive connection's thread must not hold up close()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: the client pools its connections
    timeout = 30  # an idle kept-alive connection's thread ends after this

    def do_GET(self) -> None:
        self.server.hub._handle(self, "GET")

    def do_HEAD(self) -> None:
        self.server.hub._handle(self, "HEAD")

    def do_POST(self) -> None:
        self.server.hub._handle(self, "POST")

    def do_PUT(self) -> None:
        self.server.hub._handle(self, "PUT")

    def do_DELETE(self) -> None:
        self.server.hub._handle(self, "DELETE")

    def log_message(self, format: str, *args: Any) -> None:  # the request log is hub.log, not stderr
        pass
