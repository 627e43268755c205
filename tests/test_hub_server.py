"""The local Hub speaks the protocol the real clients use: huggingface_hub's downloads, listings and errors, timm's
`hf-hub:` names and transformers' / diffusers' `from_pretrained` run against it unchanged, from an empty cache of the
test's own, and never reach huggingface.co; and huggingface_hub's uploads (create_repo, upload_folder, upload_file,
create_commit, over the LFS protocol) make commits that those downloads then read."""

import hashlib
import http.client
import io
import json
import os
import sys
import types
import urllib.error
import urllib.request
from pathlib import Path

import httpx2
import huggingface_hub as hh
import pytest
import torch
from huggingface_hub import constants, hf_api
from huggingface_hub.errors import (
    BadRequestError,
    EntryNotFoundError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import _http
from safetensors.torch import load as load_safetensors

from .hub_fixture import ActiveHub, pointed_at
from .hub_publish import publish_diffusers, publish_timm, publish_transformers
from .hub_server import git_blob_id

REPO = "vitlab-test/tiny"
CONFIG = b'{"model_type": "tiny"}'


def weights(size: int, seed: int) -> bytes:
    """Stand-in bytes for a weights file (any content: the server does not read it)."""
    return hashlib.shake_256(f"{seed}".encode()).digest(size)


def test_download_by_branch_by_commit_and_by_an_older_commit(local_hub):
    first = local_hub.publish(REPO, {"config.json": CONFIG, "model.safetensors": weights(1000, 1)})
    model = Path(hh.hf_hub_download(REPO, "model.safetensors"))
    config = Path(hh.hf_hub_download(REPO, "config.json"))
    assert model.read_bytes() == weights(1000, 1) and config.read_bytes() == CONFIG
    assert model.parent.name == first  # the snapshot is the commit of X-Repo-Commit
    # blobs are named by the ETag: sha256 for an LFS file, git's blob id for a regular one
    assert model.resolve().name == hashlib.sha256(weights(1000, 1)).hexdigest()
    assert config.resolve().name == git_blob_id(CONFIG)

    second = local_hub.publish(REPO, {"model.safetensors": weights(1000, 2)})
    assert second != first and len(second) == 40
    assert Path(hh.hf_hub_download(REPO, "model.safetensors")).read_bytes() == weights(1000, 2)
    assert Path(hh.hf_hub_download(REPO, "model.safetensors", revision=first)).read_bytes() == weights(1000, 1)
    assert Path(hh.hf_hub_download(REPO, "config.json", revision=second)).read_bytes() == CONFIG  # kept from first
    assert (local_hub.cache / "models--vitlab-test--tiny" / "refs" / "main").read_text() == second

    # a branch with a '/' (the client sends it as %2F), created from main
    pr = local_hub.publish(REPO, {"model.safetensors": weights(1000, 3)}, branch="refs/pr/1")
    path = Path(hh.hf_hub_download(REPO, "model.safetensors", revision="refs/pr/1"))
    assert path.read_bytes() == weights(1000, 3) and path.parent.name == pr
    assert ("HEAD", f"/{REPO}/resolve/refs%2Fpr%2F1/model.safetensors") in local_hub.requests
    assert local_hub.file(REPO, "config.json", "refs/pr/1") == CONFIG


def test_a_cached_file_is_not_fetched_again(local_hub):
    sha = local_hub.publish(REPO, {"model.safetensors": weights(1000, 1)})
    path = hh.hf_hub_download(REPO, "model.safetensors")
    assert ("GET", f"/{REPO}/resolve/main/model.safetensors") in local_hub.requests
    local_hub.clear_log()
    assert hh.hf_hub_download(REPO, "model.safetensors") == path
    assert local_hub.requests == [("HEAD", f"/{REPO}/resolve/main/model.safetensors")]  # a branch may have moved
    local_hub.clear_log()
    assert hh.hf_hub_download(REPO, "model.safetensors", revision=sha) == path
    assert local_hub.requests == []  # a commit never changes: nothing asked


def test_snapshot_download_and_the_listings(local_hub):
    files = {"config.json": CONFIG, "model.safetensors": weights(2000, 1), "README.md": b"# tiny\n",
             "unet/config.json": b"{}", "unet/diffusion_pytorch_model.safetensors": weights(500, 2)}
    sha = local_hub.publish(REPO, files)
    local_hub.tree_page_size = 2  # 5 files and a folder: the listing comes in 3 pages
    folder = Path(hh.snapshot_download(REPO))
    assert folder.name == sha
    assert {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()} == files
    tree = [path for method, path in local_hub.requests if "/tree/" in path]
    assert tree == [f"/api/models/{REPO}/tree/{sha}"] * 3
    assert ("GET", f"/api/models/{REPO}/revision/main") in local_hub.requests

    # the module-level functions are bound to an HfApi made at import: the fixture points it here too
    assert hh.list_repo_files(REPO) == sorted(files)
    info = hh.model_info(REPO, files_metadata=True)
    assert info.id == REPO and info.sha == sha
    lfs = {s.rfilename: s.lfs for s in info.siblings}
    assert lfs["model.safetensors"].sha256 == hashlib.sha256(files["model.safetensors"]).hexdigest()
    assert lfs["config.json"] is None
    unet = list(hh.HfApi().list_repo_tree(REPO, "unet"))
    assert [entry.path for entry in unet] == ["unet/config.json", "unet/diffusion_pytorch_model.safetensors"]
    top = {entry.path: type(entry).__name__ for entry in hh.HfApi().list_repo_tree(REPO, expand=True)}
    assert top == {"unet": "RepoFolder", "config.json": "RepoFile", "model.safetensors": "RepoFile",
                   "README.md": "RepoFile"}
    assert hh.file_exists(REPO, "unet/config.json") and not hh.file_exists(REPO, "vae/config.json")


def test_offline_mode_reads_the_cache_and_fails_cleanly_for_the_rest(local_hub):
    local_hub.publish(REPO, {"config.json": CONFIG, "model.safetensors": weights(1000, 1)})
    config = hh.hf_hub_download(REPO, "config.json")
    local_hub.offline(True)
    local_hub.clear_log()
    assert hh.is_offline_mode() and os.environ["HF_HUB_OFFLINE"] == "1"
    assert hh.hf_hub_download(REPO, "config.json") == config  # main -> its commit, from the cache's refs
    with pytest.raises(LocalEntryNotFoundError):
        hh.hf_hub_download(REPO, "model.safetensors")
    with pytest.raises(LocalEntryNotFoundError):
        hh.snapshot_download("vitlab-test/never-downloaded")
    assert local_hub.requests == []
    local_hub.offline(False)
    assert Path(hh.hf_hub_download(REPO, "model.safetensors")).read_bytes() == weights(1000, 1)


def test_a_broken_download_is_resumed_with_a_range_request(local_hub, no_retry_wait, monkeypatch):
    # the client writes what it received in chunks of DOWNLOAD_CHUNK_SIZE (10 MiB): a smaller chunk lets it keep
    # the part of a small file that came before the break, and ask for the rest
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 16 * 1024)
    local_hub.publish(REPO, {"model.safetensors": weights(300_000, 1)})
    local_hub.cut("model.safetensors", after_bytes=100_000)  # the next GET only
    assert Path(hh.hf_hub_download(REPO, "model.safetensors")).read_bytes() == weights(300_000, 1)
    first, resumed = [r for r in local_hub.log if r.method == "GET"]
    assert (first.status, first.body_bytes, first.headers.get("range")) == (200, 100_000, None)
    kept = 6 * 16 * 1024  # the whole chunks before the break
    assert (resumed.status, resumed.headers["range"], resumed.body_bytes) == (206, f"bytes={kept}-", 300_000 - kept)


def test_an_interrupted_download_raises_leaves_no_file_and_a_retry_succeeds(local_hub, no_retry_wait):
    sha = local_hub.publish(REPO, {"model.safetensors": weights(300_000, 1)})
    local_hub.cut("model.safetensors", after_bytes=100_000, times=None)  # every GET, the client's retries too
    with pytest.raises(httpx2.TransportError, match="peer closed connection"):
        hh.hf_hub_download(REPO, "model.safetensors")
    assert sum(method == "GET" for method, _ in local_hub.requests) == 6  # the client's own retries
    storage = local_hub.cache / "models--vitlab-test--tiny"
    assert not (storage / "snapshots" / sha / "model.safetensors").exists()
    assert [p.name for p in storage.rglob("*") if p.is_file() and "blobs" in p.parts] == []  # no partial blob
    local_hub.uncut()
    assert Path(hh.hf_hub_download(REPO, "model.safetensors")).read_bytes() == weights(300_000, 1)


def test_a_missing_repo_file_or_revision_raises_the_clients_typed_errors(local_hub):
    sha = local_hub.publish(REPO, {"config.json": CONFIG})
    with pytest.raises(RepositoryNotFoundError):
        hh.hf_hub_download("vitlab-test/nothing-here", "config.json")
    with pytest.raises(RemoteEntryNotFoundError):
        hh.hf_hub_download(REPO, "model.safetensors")
    # the absence is cached under the commit (X-Repo-Commit on the 404): what offline loads of optional files use
    assert (local_hub.cache / "models--vitlab-test--tiny" / ".no_exist" / sha / "model.safetensors").exists()
    for revision in ("v2", "0" * 40):
        with pytest.raises(RevisionNotFoundError):
            hh.hf_hub_download(REPO, "config.json", revision=revision)
    with pytest.raises(RepositoryNotFoundError):
        hh.model_info("vitlab-test/nothing-here")
    with pytest.raises(RevisionNotFoundError):
        hh.snapshot_download(REPO, revision="v2")
    with pytest.raises(EntryNotFoundError):
        list(hh.HfApi().list_repo_tree(REPO, "no-such-folder"))


def test_headers_and_ranges_as_the_hub_sends_them(local_hub):
    data = weights(1000, 1)
    sha = local_hub.publish(REPO, {"model.safetensors": data, "config.json": CONFIG})
    url = f"{local_hub.url}/{REPO}/resolve/main/"

    def fetch(name: str, method: str = "GET", **headers: str) -> tuple[int, http.client.HTTPMessage, bytes]:
        try:
            with urllib.request.urlopen(urllib.request.Request(url + name, method=method, headers=headers)) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers, error.read()

    status, headers, body = fetch("model.safetensors", "HEAD")
    sha256 = hashlib.sha256(data).hexdigest()
    assert (status, body, headers["X-Repo-Commit"], headers["Content-Length"]) == (200, b"", sha, "1000")
    assert headers["ETag"] == headers["X-Linked-Etag"] == f'"{sha256}"' and headers["X-Linked-Size"] == "1000"
    status, headers, body = fetch("config.json", "HEAD")
    assert headers["ETag"] == f'"{git_blob_id(CONFIG)}"' and "X-Linked-Etag" not in headers

    status, headers, body = fetch("model.safetensors", Range="bytes=10-19")
    assert (status, headers["Content-Range"], body) == (206, "bytes 10-19/1000", data[10:20])
    assert fetch("model.safetensors", Range="bytes=-5")[2] == data[-5:]
    status, headers, _ = fetch("model.safetensors", Range="bytes=1000-")
    assert (status, headers["Content-Range"]) == (416, "bytes */1000")

    status, headers, _ = fetch("nothing.bin")
    assert (status, headers["X-Error-Code"], headers["X-Repo-Commit"]) == (404, "EntryNotFound", sha)
    url = f"{local_hub.url}/vitlab-test/other/resolve/main/"
    assert fetch("config.json", "HEAD")[1]["X-Error-Code"] == "RepoNotFound"
    url = f"{local_hub.url}/{REPO}/resolve/v2/"
    assert fetch("config.json", "HEAD")[1]["X-Error-Code"] == "RevisionNotFound"
    assert fetch("config.json", "POST")[0] == 405  # uploads go through the API, not to a file's URL


def test_a_plain_url_is_served_and_can_be_cut(local_hub, tmp_path):
    data = weights(5000, 1)
    url = local_hub.serve_url("/releases/v1/vit_tiny.pth", data)
    torch.hub.download_url_to_file(url, str(tmp_path / "w.pth"), progress=False)
    assert (tmp_path / "w.pth").read_bytes() == data
    local_hub.cut("vit_tiny.pth", after_bytes=1000)
    with urllib.request.urlopen(url) as response, pytest.raises(http.client.IncompleteRead):
        assert response.headers["Content-Length"] == "5000"
        response.read()
    assert local_hub.requests == [("GET", "/releases/v1/vit_tiny.pth")] * 2


def test_timm_loads_a_timm_published_vit_with_the_published_weights(local_hub):
    timm = pytest.importorskip("timm")
    sha = publish_timm(local_hub, "vitlab-test/vit-timm", "vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2,
                       num_classes=10)
    assert sorted(hh.list_repo_files("vitlab-test/vit-timm")) == ["config.json", "model.safetensors"]
    published = load_safetensors(local_hub.file("vitlab-test/vit-timm", "model.safetensors"))
    for name in ("hf-hub:vitlab-test/vit-timm", f"hf-hub:vitlab-test/vit-timm@{sha}"):
        model = timm.create_model(name, pretrained=True)
        state = model.state_dict()
        assert state.keys() == published.keys()
        assert all(torch.equal(state[key], published[key]) for key in state)
        assert len(model.blocks) == 2 and model.num_classes == 10  # the architecture from config.json's model_args
    local_hub.offline(True)
    local_hub.clear_log()
    model = timm.create_model("hf-hub:vitlab-test/vit-timm", pretrained=True)  # from the cache alone
    assert torch.equal(model.head.weight, published["head.weight"]) and local_hub.requests == []


def test_transformers_loads_a_save_pretrained_vit_with_the_published_weights(local_hub):
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                    image_size=32, patch_size=8)
    reference = transformers.ViTModel(config).eval()
    publish_transformers(local_hub, "vitlab-test/vit-hf", reference)
    model = transformers.AutoModel.from_pretrained("vitlab-test/vit-hf")
    # transformers asks the repo's info first (main's commit), then downloads by that commit
    assert local_hub.requests[0] == ("GET", "/api/models/vitlab-test/vit-hf")
    assert type(model) is transformers.ViTModel
    state, expected = model.state_dict(), reference.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[key], expected[key]) for key in state)
    local_hub.offline(True)
    local_hub.clear_log()
    model = transformers.AutoModel.from_pretrained("vitlab-test/vit-hf")  # from the cache alone
    assert torch.equal(model.pooler.dense.weight, expected["pooler.dense.weight"]) and local_hub.requests == []


@pytest.mark.filterwarnings("ignore:The `local_dir_use_symlinks` argument is deprecated")  # diffusers passes it
def test_diffusers_loads_a_save_pretrained_model_from_a_subfolder(local_hub):
    diffusers = pytest.importorskip("diffusers")
    reference = diffusers.AutoencoderKL(block_out_channels=(8,), down_block_types=("DownEncoderBlock2D",),
                                        up_block_types=("UpDecoderBlock2D",), latent_channels=2, norm_num_groups=4,
                                        layers_per_block=1, sample_size=16)
    publish_diffusers(local_hub, "vitlab-test/pipe", reference, subfolder="vae")
    assert hh.list_repo_files("vitlab-test/pipe") == ["vae/config.json", "vae/diffusion_pytorch_model.safetensors"]
    model = diffusers.AutoencoderKL.from_pretrained("vitlab-test/pipe", subfolder="vae")
    state, expected = model.state_dict(), reference.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[key], expected[key]) for key in state)


def test_the_fixture_points_every_client_at_the_local_hub(local_hub):
    assert constants.ENDPOINT == hf_api.api.endpoint == hh.HfApi().endpoint == local_hub.url
    assert os.environ["HF_ENDPOINT"] == local_hub.url
    assert constants.HF_HUB_CACHE == os.environ["HF_HUB_CACHE"] == str(local_hub.cache)
    assert not constants.HF_HUB_OFFLINE and constants.HF_HUB_DISABLE_XET and constants.HF_HUB_DISABLE_TELEMETRY
    with pytest.raises(RuntimeError, match=r"refusing a request to https://huggingface\.co"):
        _http.get_session().get("https://huggingface.co/api/models/google/vit-base-patch16-224")
    assert local_hub.requests == []


def test_everything_pointed_is_put_back_afterwards(tmp_path):
    from huggingface_hub.utils import _cache_manager

    names = ("ENDPOINT", "HF_HUB_CACHE", "HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_XET")
    original = {name: getattr(constants, name) for name in names}
    endpoint, cache, offline = constants.ENDPOINT, constants.HF_HUB_CACHE, constants.HF_HUB_OFFLINE
    copied, api_endpoint, factory = _cache_manager.HF_HUB_CACHE, hf_api.api.endpoint, _http._GLOBAL_CLIENT_FACTORY
    environment = dict(os.environ)
    # a module that copied constants before (the fixture patches it) and one that copies them during the test
    before = sys.modules["vitlab_test_copied_before"] = types.ModuleType("vitlab_test_copied_before")
    before.HF_HUB_OFFLINE, before.HUGGINGFACE_CO_RESOLVE_ENDPOINT = offline, endpoint
    try:
        with ActiveHub() as hub, pytest.MonkeyPatch.context() as monkeypatch:
            with pointed_at(hub, tmp_path, monkeypatch):
                during = sys.modules["vitlab_test_copied_during"] = types.ModuleType("vitlab_test_copied_during")
                during.HF_HUB_CACHE, during.ENDPOINT = constants.HF_HUB_CACHE, constants.ENDPOINT
                assert str(tmp_path / "hub") == _cache_manager.HF_HUB_CACHE == during.HF_HUB_CACHE
                assert hub.url == before.HUGGINGFACE_CO_RESOLVE_ENDPOINT
                hub.offline(True)
                assert constants.HF_HUB_OFFLINE is before.HF_HUB_OFFLINE is True
            assert (cache, endpoint) == (during.HF_HUB_CACHE, during.ENDPOINT)
        assert original == {name: getattr(constants, name) for name in names}
        assert (copied, api_endpoint, factory) == (_cache_manager.HF_HUB_CACHE, hf_api.api.endpoint,
                                                   _http._GLOBAL_CLIENT_FACTORY)
        assert environment == dict(os.environ)
        assert (offline, endpoint) == (before.HF_HUB_OFFLINE, before.HUGGINGFACE_CO_RESOLVE_ENDPOINT)
    finally:
        del sys.modules["vitlab_test_copied_before"]
        sys.modules.pop("vitlab_test_copied_during", None)


# ---- uploads: the real client's create_repo / upload_folder / upload_file / create_commit ---------------------------
NEW = "vitlab-test/pushed"
TOKEN = "vitlab-test-token"  # any token, or none, is accepted: sent to see that it reaches the server
# huggingface_hub's lfs.py PUTs a file object as `data=`, which its HTTP client (httpx2) deprecates
lfs_put_warning = pytest.mark.filterwarnings("ignore:Use 'content=<...>' to upload raw bytes:DeprecationWarning")


def upload_api() -> hh.HfApi:
    """The client as a library that uploads makes it: the fixture points its endpoint at the local hub (the
    environment and huggingface_hub.constants) and turns xet off, so that it uploads over the LFS protocol."""
    api = hh.HfApi(token=TOKEN)
    assert api.endpoint == constants.ENDPOINT and constants.HF_HUB_DISABLE_XET
    return api


def files_of(folder: str | Path) -> dict[str, bytes]:
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_create_repo_makes_an_initial_commit_and_exist_ok_takes_an_existing_repo(local_hub):
    api = upload_api()
    url = api.create_repo(NEW)
    assert (url, url.repo_id, url.repo_type) == (f"{local_hub.url}/{NEW}", NEW, "model")
    # as on the Hub: a first commit of a .gitattributes, so that main has a sha before any upload
    info = api.model_info(NEW)
    assert len(info.sha) == 40 and info.sha == local_hub.sha(NEW) and not info.private
    assert api.list_repo_files(NEW) == [".gitattributes"]
    assert b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n" in local_hub.file(NEW, ".gitattributes")

    with pytest.raises(HfHubHTTPError) as error:
        api.create_repo(NEW)
    assert error.value.response.status_code == 409
    assert api.create_repo(NEW, exist_ok=True) == url
    assert api.model_info(NEW).sha == info.sha  # nothing committed
    assert api.create_repo("vitlab-test/secret", private=True).repo_id == "vitlab-test/secret"
    assert api.model_info("vitlab-test/secret").private
    with pytest.raises(BadRequestError, match="model repos only"):
        api.create_repo("vitlab-test/data", repo_type="dataset")
    create = [r for r in local_hub.log if r.path == "/api/repos/create"]
    assert len(create) == 5 and create[0].headers["authorization"] == f"Bearer {TOKEN}"


@lfs_put_warning
def test_upload_folder_twice_makes_two_commits_and_each_commit_downloads_its_files(local_hub, tmp_path):
    api = upload_api()
    folder = tmp_path / "repo"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_bytes(CONFIG)
    (folder / "sub" / "notes.txt").write_text("first\n")
    (folder / "model.safetensors").write_bytes(weights(4000, 1))  # a few KB: LFS by its suffix
    api.create_repo(NEW, exist_ok=True)
    local_hub.clear_log()
    first = api.upload_folder(folder_path=folder, repo_id=NEW, commit_message="first")
    sha256 = hashlib.sha256(weights(4000, 1)).hexdigest()
    # the order of an upload: upload modes, the LFS file alone through the batch API (PUT, verify), then the commit
    assert local_hub.requests == [("POST", f"/api/models/{NEW}/preupload/main"),
                                  ("POST", f"/{NEW}.git/info/lfs/objects/batch"),
                                  ("PUT", f"/{NEW}.git/info/lfs/objects/{sha256}"),
                                  ("POST", f"/{NEW}.git/info/lfs/objects/verify"),
                                  ("POST", f"/api/models/{NEW}/commit/main")]
    assert all(r.status == 200 for r in local_hub.log)
    assert first.oid == local_hub.sha(NEW) and first.commit_url == f"{local_hub.url}/{NEW}/commit/{first.oid}"
    assert first.repo_url.repo_id == NEW
    lfs = {s.rfilename: s.lfs for s in api.model_info(NEW, files_metadata=True).siblings}
    assert lfs["model.safetensors"].sha256 == sha256 and lfs["config.json"] is None

    (folder / "sub" / "notes.txt").write_text("second\n")
    (folder / "model.safetensors").write_bytes(weights(4000, 2))
    (folder / "extra.bin").write_bytes(weights(100, 3))
    second = api.upload_folder(folder_path=folder, repo_id=NEW, revision="main", commit_message="second")
    assert second.oid != first.oid and second.oid == local_hub.sha(NEW)
    # each file's last commit: config.json, unchanged, is still the first's
    last = {f.path: f.last_commit.title for f in api.list_repo_tree(NEW, recursive=True, expand=True)
            if isinstance(f, hf_api.RepoFile)}
    assert last == {".gitattributes": "initial commit", "config.json": "first", "sub/notes.txt": "second",
                    "model.safetensors": "second", "extra.bin": "second"}

    old = Path(hh.snapshot_download(NEW, revision=first.oid))
    assert old.name == first.oid
    assert files_of(old) == {".gitattributes": local_hub.file(NEW, ".gitattributes"), "config.json": CONFIG,
                             "sub/notes.txt": b"first\n", "model.safetensors": weights(4000, 1)}
    new = files_of(hh.snapshot_download(NEW, revision=second.oid))
    assert new == {".gitattributes": local_hub.file(NEW, ".gitattributes")} | files_of(folder)
    assert Path(hh.hf_hub_download(NEW, "model.safetensors")).read_bytes() == weights(4000, 2)
    path = Path(hh.hf_hub_download(NEW, "model.safetensors", revision=first.oid))
    assert path.read_bytes() == weights(4000, 1) and path.resolve().name == sha256  # served as LFS

    # the same folder again: every file unchanged (preupload's oids), so the client commits nothing and answers
    # main's commit; the LFS objects the repo has are not uploaded again (the batch answers them without actions)
    local_hub.clear_log()
    assert api.upload_folder(folder_path=folder, repo_id=NEW, commit_message="third").oid == second.oid
    assert local_hub.requests == [("POST", f"/api/models/{NEW}/preupload/main"),
                                  ("POST", f"/{NEW}.git/info/lfs/objects/batch"),
                                  ("GET", f"/api/models/{NEW}/revision/main")]


@lfs_put_warning
def test_upload_file_to_main_and_to_a_new_branch(local_hub):
    api = upload_api()
    base = local_hub.publish(NEW, {"config.json": CONFIG})  # a repo published by a test takes uploads too
    # the module-level function (the HfApi made at import, which the fixture points here), with no token
    commit = hh.upload_file(path_or_fileobj=b"# pushed\n", path_in_repo="docs/README.md", repo_id=NEW)
    assert local_hub.file(NEW, "docs/README.md") == b"# pushed\n" and local_hub.file(NEW, "config.json") == CONFIG
    assert commit.oid == local_hub.sha(NEW) != base
    assert "authorization" not in local_hub.log[-1].headers
    # an LFS file, from a file object (which the client PUTs as it is)
    with io.BytesIO(weights(3000, 1)) as data:
        api.upload_file(path_or_fileobj=data, path_in_repo="model.safetensors", repo_id=NEW)
    assert local_hub.file(NEW, "model.safetensors") == weights(3000, 1)

    # a branch made by create_branch, and one made by the commit itself (from main, as publish() does)
    api.create_branch(NEW, branch="dev")
    api.create_branch(NEW, branch="dev", exist_ok=True)
    api.upload_file(path_or_fileobj=weights(3000, 2), path_in_repo="model.safetensors", repo_id=NEW, revision="dev")
    pr = api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id=NEW, revision="refs/pr/1")
    assert local_hub.file(NEW, "model.safetensors", "dev") == weights(3000, 2)
    assert local_hub.file(NEW, "model.safetensors", "main") == weights(3000, 1)
    assert local_hub.sha(NEW, "refs/pr/1") == pr.oid and local_hub.file(NEW, "config.json", "refs/pr/1") == b"{}"
    assert ("POST", f"/api/models/{NEW}/commit/refs%2Fpr%2F1") in local_hub.requests
    assert Path(hh.hf_hub_download(NEW, "config.json", revision="refs/pr/1")).read_bytes() == b"{}"


def test_create_commit_deletes_checks_its_parent_and_refuses_what_is_not_served(local_hub):
    api = upload_api()
    api.create_repo(NEW)
    first = api.create_commit(NEW, [hh.CommitOperationAdd("a.txt", b"a"), hh.CommitOperationAdd("b.txt", b"b")],
                              commit_message="two files")
    second = api.create_commit(NEW, [hh.CommitOperationDelete("a.txt")], commit_message="one deleted",
                               parent_commit=first.oid[:7])  # a shorthand, as the client allows
    assert sorted(api.list_repo_files(NEW)) == [".gitattributes", "b.txt"]
    assert sorted(api.list_repo_files(NEW, revision=first.oid)) == [".gitattributes", "a.txt", "b.txt"]
    with pytest.raises(HfHubHTTPError, match="A commit has happened since") as error:  # main moved on
        api.create_commit(NEW, [hh.CommitOperationAdd("c.txt", b"c")], commit_message="late", parent_commit=first.oid)
    assert error.value.response.status_code == 412
    with pytest.raises(RemoteEntryNotFoundError, match="A file with this name doesn't exist"):
        api.create_commit(NEW, [hh.CommitOperationDelete("a.txt")], commit_message="gone already")
    with pytest.raises(BadRequestError, match="deletedFolder"):
        api.create_commit(NEW, [hh.CommitOperationDelete("docs/")], commit_message="a folder")
    with pytest.raises(BadRequestError, match="pull requests"):
        api.upload_file(path_or_fileobj=b"c", path_in_repo="c.txt", repo_id=NEW, create_pr=True)
    assert local_hub.sha(NEW) == second.oid  # none of those committed


def test_an_upload_to_a_missing_repo_raises_repository_not_found(local_hub, tmp_path):
    api = upload_api()
    (tmp_path / "config.json").write_bytes(CONFIG)
    with pytest.raises(RepositoryNotFoundError):
        api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id="vitlab-test/nothing-here")
    with pytest.raises(RepositoryNotFoundError):
        api.upload_folder(folder_path=tmp_path, repo_id="vitlab-test/nothing-here")
    # the first request of an upload, as on the Hub: an upload does not create the repo
    assert {path for _, path in local_hub.requests} == {"/api/models/vitlab-test/nothing-here/preupload/main"}
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("vitlab-test/nothing-here")


def test_request_bodies_are_read_by_length_or_chunked_and_lfs_objects_are_checked(local_hub):
    data = weights(1000, 1)
    sha256 = hashlib.sha256(data).hexdigest()
    local_hub.publish(REPO, {"model.safetensors": data})
    connection = http.client.HTTPConnection(local_hub.url.removeprefix("http://"))

    def ask(method: str, path: str, body: bytes | None = None, **headers: str) -> tuple[int, bytes]:
        connection.request(method, path, body, headers)
        with connection.getresponse() as response:
            return response.status, response.read()

    def batch(*oids: str) -> list[dict]:
        body = {"operation": "upload", "transfers": ["basic"], "objects": [{"oid": o, "size": 1000} for o in oids]}
        status, answer = ask("POST", f"/{REPO}.git/info/lfs/objects/batch", json.dumps(body).encode())
        assert status == 200
        return json.loads(answer)["objects"]

    # an object the repo has (a published LFS file) gets no actions; another, where to PUT it and verify it
    new = weights(1000, 2)
    new_sha256 = hashlib.sha256(new).hexdigest()
    have, lack = batch(sha256, new_sha256)
    socket = connection.sock  # every request below goes on this one connection: no body is left unread
    assert have == {"oid": sha256, "size": 1000}
    href = f"{local_hub.url}/{REPO}.git/info/lfs/objects"
    assert lack["actions"]["upload"]["href"] == f"{href}/{new_sha256}"
    assert lack["actions"]["verify"]["href"] == f"{href}/verify"
    verify = json.dumps({"oid": new_sha256, "size": 1000}).encode()
    assert ask("POST", f"/{REPO}.git/info/lfs/objects/verify", verify)[0] == 404  # not uploaded yet
    assert ask("PUT", f"/{REPO}.git/info/lfs/objects/{new_sha256}", data)[0] == 400  # bytes of another sha256
    # chunked (huggingface_hub sends a Content-Length, as above; chunked is HTTP/1.1's other way to send a body)
    connection.putrequest("PUT", f"/{REPO}.git/info/lfs/objects/{new_sha256}")
    connection.putheader("Transfer-Encoding", "chunked")
    connection.endheaders()
    for offset in range(0, len(new), 300):
        part = new[offset:offset + 300]
        connection.send(b"%x\r\n%s\r\n" % (len(part), part))
    connection.send(b"0\r\n\r\n")
    with connection.getresponse() as response:
        assert response.status == 200 and response.read() == b""
    assert ask("POST", f"/{REPO}.git/info/lfs/objects/verify", verify)[0] == 200
    assert batch(new_sha256) == [{"oid": new_sha256, "size": 1000}]
    assert ask("GET", f"/{REPO}/resolve/main/model.safetensors")[1] == data
    assert ask("POST", f"/{REPO}/resolve/main/model.safetensors", b"x" * 10)[0] == 405  # uploads go to the API
    assert ask("POST", "/api/repos/create", b"{not json")[0] == 400
    assert connection.sock is socket
    connection.close()
    assert [r.status for r in local_hub.log] == [200, 404, 400, 200, 200, 200, 200, 405, 400]
