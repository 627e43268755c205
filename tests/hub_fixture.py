"""The `local_hub` fixture: a LocalHub that huggingface_hub, and every library that downloads through it, talks to
for one test, with the test's own empty cache; nothing reaches huggingface.co.

Setting HF_ENDPOINT / HF_HOME / HF_HUB_OFFLINE in the environment is not enough once huggingface_hub is imported:
`huggingface_hub.constants` reads them once, at import, and some modules copy the values at their own import (e.g.
`huggingface_hub.utils._cache_manager.HF_HUB_CACHE`, diffusers' `HF_HUB_OFFLINE` and `HUGGINGFACE_CO_RESOLVE_ENDPOINT`),
and `huggingface_hub.model_info` / `list_repo_files` are methods of an HfApi made at import, with the endpoint of that
moment. So the fixture sets the environment and patches all of those, restores them after the test, and also makes
huggingface_hub's HTTP client refuse any host but 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from .hub_server import LocalHub

# Copies of a huggingface_hub constant under another name, made at import by libraries built on it
ALIASES = {"HUGGINGFACE_CO_RESOLVE_ENDPOINT": "ENDPOINT"}  # diffusers.utils.constants (and whoever imports it)
LIBRARIES = ("transformers", "diffusers", "timm", "huggingface_hub")  # whose module-level HfApi objects are re-pointed


class ActiveHub(LocalHub):
    """The LocalHub of the `local_hub` fixture: huggingface_hub is pointed at it for the test.

    `home` is HF_HOME and `cache` HF_HUB_CACHE (both under a temporary folder of the test); `offline(True)` turns
    offline mode on, `offline(False)` off again, in the environment (HF_HUB_OFFLINE, for code that reads it) and in
    huggingface_hub (which read it at import: setting the environment variable alone does not switch it)."""

    home: Path
    cache: Path
    _set_offline: Callable[[bool], None] | None = None

    def offline(self, on: bool = True) -> None:
        if self._set_offline is None:
            raise RuntimeError("offline() needs huggingface_hub pointed at this hub (the local_hub fixture)")
        self._set_offline(on)


@pytest.fixture
def local_hub(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ActiveHub]:
    with ActiveHub() as hub, pointed_at(hub, tmp_path_factory.mktemp("huggingface"), monkeypatch):
        yield hub
        assert not hub.errors, "LocalHub failed while serving:\n" + "\n".join(hub.errors)


@contextlib.contextmanager
def pointed_at(hub: ActiveHub, home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Point huggingface_hub at `hub`, with `home` as HF_HOME, until the end of the block (and the monkeypatch's
    undo, which puts back what was patched through it)."""
    from huggingface_hub import constants
    from huggingface_hub.utils import _http

    hub.home, hub.cache = home, home / "hub"
    env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(home), "HF_HUB_CACHE": str(hub.cache),
           "HF_ASSETS_CACHE": str(home / "assets"), "HF_XET_CACHE": str(home / "xet"),
           "HF_TOKEN_PATH": str(home / "token"), "HF_MODULES_CACHE": str(home / "modules"),
           "TORCH_HOME": str(home / "torch"),  # torch.hub, for the releases served outside the Hub
           # plain HTTP downloads only, and no side requests (telemetry, agent detection, update checks)
           "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1",
           "HF_HUB_DISABLE_SHARED_BLOBS": "1"}
    unset = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_CACHE",
             "HUGGINGFACE_ASSETS_CACHE", "HF_HUB_ENABLE_HF_TRANSFER", "HF_XET_HIGH_PERFORMANCE",
             "HUGGINGFACE_CO_STAGING")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in unset:
        monkeypatch.delenv(name, raising=False)

    # the values huggingface_hub.constants would have read at import with this environment
    new = {"ENDPOINT": hub.url, "HUGGINGFACE_CO_URL_TEMPLATE": hub.url + "/{repo_id}/resolve/{revision}/{filename}",
           "HF_URL_HOSTS": constants.HF_URL_HOSTS | {urlsplit(hub.url).hostname},
           "HF_HOME": str(home), "HF_HUB_CACHE": str(hub.cache), "HUGGINGFACE_HUB_CACHE": str(hub.cache),
           "HF_ASSETS_CACHE": str(home / "assets"), "HUGGINGFACE_ASSETS_CACHE": str(home / "assets"),
           "HF_XET_CACHE": str(home / "xet"), "HF_TOKEN_PATH": str(home / "token"),
           "HF_STORED_TOKENS_PATH": str(home / "stored_tokens"),
           "CHECK_FOR_UPDATE_DONE_PATH": str(home / ".check_for_update_done"),
           "CHECK_FOR_SKILL_UPDATE_DONE_PATH": str(home / ".check_for_skill_update_done"),
           "AGENT_HARNESSES_PATH": str(home / ".agent_harnesses.json"), "HF_MODULES_CACHE": str(home / "modules"),
           "HF_HUB_OFFLINE": False, "HF_HUB_DISABLE_TELEMETRY": True, "HF_HUB_DISABLE_XET": True,
           "HF_HUB_DISABLE_SHARED_BLOBS": True, "HF_HUB_DISABLE_UPDATE_CHECK": True, "HF_XET_HIGH_PERFORMANCE": False,
           "_staging_mode": False}
    old = {name: getattr(constants, name) for name in new if hasattr(constants, name)}
    old["HF_MODULES_CACHE"] = os.path.join(old["HF_HOME"], "modules")  # transformers' and diffusers' default
    for alias, name in ALIASES.items():
        old[alias], new[alias] = old[name], new[name]
    for name in new.keys() & vars(constants).keys():
        monkeypatch.setattr(constants, name, new[name])

    # the copies other modules made at import: same name, still the value constants had
    before = set(sys.modules)
    for module, name in _copies(before, old):
        monkeypatch.setattr(module, name, new[name])

    # HfApi / HfFileSystem instances made at import keep the endpoint of that moment
    from huggingface_hub import hf_api

    monkeypatch.setattr(hf_api.api, "endpoint", hub.url)
    # and those a library made on first use, in an earlier test, with that test's hub (transformers' hf_api())
    for module in [m for name, m in list(sys.modules.items()) if name.startswith(LIBRARIES) and m is not None]:
        for value in list(vars(module).values()):
            if isinstance(value, hf_api.HfApi) and value is not hf_api.api:
                monkeypatch.setattr(value, "endpoint", hub.url)
    if "huggingface_hub.hf_file_system" in sys.modules:
        hffs = sys.modules["huggingface_hub.hf_file_system"].hffs
        monkeypatch.setattr(hffs, "endpoint", hub.url)
        monkeypatch.setattr(hffs._api, "endpoint", hub.url)

    # the shared HTTP client, rebuilt with a hook that refuses any other host: a request that would leave the machine
    # fails the test instead
    local_host = urlsplit(hub.url).hostname

    def refuse_other_hosts(request: Any) -> None:
        if request.url.host != local_host:
            raise RuntimeError(f"local_hub: refusing a request to {request.url} (only {hub.url} is served)")

    default_factory = _http._GLOBAL_CLIENT_FACTORY

    def guarded_client() -> Any:
        client = default_factory()
        client.event_hooks = {**client.event_hooks,
                              "request": [*client.event_hooks.get("request", []), refuse_other_hosts]}
        return client

    monkeypatch.setattr(_http, "_GLOBAL_CLIENT_FACTORY", guarded_client)
    _http.close_session()

    def set_offline(on: bool) -> None:
        if on:
            monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        else:
            monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", on)
        for module, _ in _copies(set(sys.modules), {"HF_HUB_OFFLINE": not on}):
            monkeypatch.setattr(module, "HF_HUB_OFFLINE", on)

    hub._set_offline = set_offline
    # a last look, through the client's own functions: is it the local hub they will ask?
    from huggingface_hub import HfApi, hf_hub_url

    assert hf_hub_url("org/name", "file").startswith(hub.url + "/"), hf_hub_url("org/name", "file")
    assert HfApi().endpoint == hf_api.api.endpoint == hub.url
    try:
        yield
    finally:
        _http.close_session()  # its connections are to this hub; the next client is made by the restored factory
        # modules imported during the test copied the patched values, which the monkeypatch does not know of
        imported = set(sys.modules) - before
        for module, name in [*_copies(imported, new), *_copies(imported, {"HF_HUB_OFFLINE": True})]:
            setattr(module, name, old[name])


def _copies(names: set[str], values: dict[str, Any]) -> Iterator[tuple[types.ModuleType, str]]:
    """(module, name) for each module among `names` holding one of `values` under its name (constants excepted)."""
    for module_name in sorted(names):
        module = sys.modules.get(module_name)
        if not isinstance(module, types.ModuleType) or module_name == "huggingface_hub.constants":
            continue
        namespace = vars(module)  # not getattr: a lazy module (transformers) would import on a missing name
        for name, value in values.items():
            if name in namespace and type(namespace[name]) is type(value) and namespace[name] == value:
                yield module, name


@pytest.fixture
def no_retry_wait(monkeypatch):
    """huggingface_hub waits a second before each of its 5 retries of a broken download; the tests need not."""
    import time

    from huggingface_hub import file_download

    fast = types.ModuleType("time")
    fast.__dict__.update(vars(time))
    fast.sleep = lambda seconds: None
    monkeypatch.setattr(file_download, "time", fast)
