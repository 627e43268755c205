"""Fixtures shared by several test folders (small runs of every image task, trained once per test run), and the
rules of a run on two pytest-xdist workers (`pytest -n 2`, as scripts/test.sh runs it):

- each worker is pinned to its share of the cores (one core each on a 2-core machine) and runs torch on that many
  threads, so that the workers never oversubscribe the machine, whatever a test starts (onnxruntime, OpenVINO,
  inductor's compile workers, a subprocess);
- the tests marked `whole_machine` (torchrun's two processes, the server's load test, the browser) run one after
  the other on one worker (one xdist group: never two of them at once), each on every core; none of them runs
  several threads of one torch process, so sharing a core with the other worker's one thread costs time, not
  spinning threads;
- the trained runs are made by whichever worker needs them first, under a file lock, and read by both;
- with `CI` set, a test that would skip (missing data, a missing browser, a missing reference library) fails
  instead, naming what is missing: a green CI run means every test ran.
"""

import contextlib
import fcntl
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from PIL import Image

from vitlab.cli.main import main

from .budget import pytest_runtest_logreport, pytest_terminal_summary  # noqa: F401 -- the time budget's hooks
from .engine.conftest import MINI
from .hub_fixture import local_hub, no_retry_wait  # noqa: F401 -- the fixture, for every test folder: a local Hugging Face Hub

DATA = ["--data-dir", str(MINI), "--allow-partial-data"]
# the tests' runs last seconds, and a picture costs half a second: none is drawn, except by the tests that look at
# it (each task's shared run below draws its own, once, at its end)
os.environ.setdefault("VITLAB_CURVES", "never")
WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", ... under xdist; None in a plain run
ALL_CORES = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()
# skips that say something about the machine, not about a missing install: allowed in CI too
HARDWARE_SKIPS = ("this CPU", "this machine has a GPU", "Linux only")


def worker_cores() -> frozenset[int]:
    """The cores this worker owns: of N workers, gw<i> takes every N-th usable core from the i-th (all of them
    outside xdist; a core shared round-robin where there are more workers than cores)."""
    if WORKER is None or len(ALL_CORES) < 2:
        return ALL_CORES
    cores, index = sorted(ALL_CORES), int(WORKER.removeprefix("gw"))
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return frozenset(cores[index::count] or [cores[index % len(cores)]])


def use_cores(cores: frozenset[int]) -> None:
    """Run this thread, and the threads and processes it starts from now on, on these cores."""
    if cores:
        os.sched_setaffinity(0, cores)


def pytest_configure(config: pytest.Config) -> None:
    if WORKER is not None:
        use_cores(worker_cores())
        torch.set_num_threads(max(1, len(worker_cores())))


def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every worker of this test run sees (the run's own temporary root)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if WORKER is not None else base


@contextlib.contextmanager
def file_lock(path: Path, mode: int) -> Iterator[None]:
    """Hold `path`'s lock; with mode | fcntl.LOCK_NB, BlockingIOError at once where another process holds it."""
    with open(path, "a") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """A whole_machine test's processes run on every core; the worker goes back to its own core after it. Torch's
    thread count stays 1: a server made earlier in the session would otherwise answer with two thread counts, whose
    float sums differ in the last bits (seen: the load test's VQGAN pictures)."""
    if WORKER is None or item.get_closest_marker("whole_machine") is None:
        return (yield)
    use_cores(ALL_CORES)
    try:
        return (yield)
    finally:
        use_cores(worker_cores())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.skipped and os.environ.get("CI") and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if not any(ok in reason for ok in HARDWARE_SKIPS):
            report.outcome = "failed"
            report.longrepr = f"skipped in CI, where every test must run: {reason}"
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    if report.skipped and os.environ.get("CI"):  # a whole module skipped: pytest.importorskip at its top
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every test must run: {report.longrepr}"
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist: the whole_machine tests are one group (one worker runs them in turn), a module whose tests
    share a module-scoped fixture runs on one worker (the fixture is made once), and the work is handed out longest
    first (groups and tests with a slow test, then the rest), so that no long test starts last."""
    if WORKER is None:
        return

    def own_rank(item: pytest.Item) -> int:
        return 0 if item.get_closest_marker("slow") or item.get_closest_marker("whole_machine") else 1

    unit: dict[int, str] = {}  # item -> its unit of work: its module where the tests share a fixture, else itself
    for item in items:
        module = item.nodeid.split("::")[0]
        shares = any(d.scope in ("module", "class") for defs in item._fixtureinfo.name2fixturedefs.values()
                     for d in defs)
        if item.get_closest_marker("whole_machine") is not None:
            item.add_marker(pytest.mark.xdist_group("whole_machine"))
            unit[id(item)] = "whole_machine"
        elif shares and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(module))
            unit[id(item)] = module
        else:
            unit[id(item)] = item.nodeid
    rank: dict[str, int] = {}
    for item in items:  # a unit with a slow test goes first
        name = unit[id(item)]
        rank[name] = min(rank.get(name, 1), own_rank(item))
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (rank[unit[id(item)]], order[id(item)]))


@contextlib.contextmanager
def made_once(tmp_path_factory: pytest.TempPathFactory, name: str, wait: bool = True
              ) -> Iterator[tuple[Path, bool]]:
    """(folder, made) for a thing every worker shares: the first worker to get here makes it (made is False: make
    it now, in the folder), the others wait for it and read it (made is True). With wait=False, BlockingIOError
    where another worker is making it now."""
    root = shared_dir(tmp_path_factory) / name
    with file_lock(root.with_suffix(".lock"), fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB)):
        done = root / ".made"
        yield root, done.exists()
        done.parent.mkdir(parents=True, exist_ok=True)
        done.touch()


class TrainedRuns(Mapping):
    """Run folders by name: cls, detr, setr, ipt, vqgan, prior (each task's tiny preset, a few steps), and the
    data they came from: scenes (a detection and segmentation set), photos (train/ and test/ photographs). Each is
    made when a test first asks for it, by whichever worker asks first, under a lock of its own: a worker waits only
    for the run it needs while the other makes another."""

    NEEDS: ClassVar[dict[str, str]] = {"detr": "scenes", "setr": "scenes", "ipt": "photos", "prior": "vqgan"}

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.factory = tmp_path_factory

    def __getitem__(self, name: str) -> Path:
        return self._made(name, wait=True)

    def all_of(self, names: Sequence[str]) -> list[Path]:
        """The runs `names`: first those no other worker is making (made here), then the others (waited for)."""
        for name in names:
            with contextlib.suppress(BlockingIOError):
                self._made(name, wait=False)
        return [self[name] for name in names]

    def _made(self, name: str, wait: bool) -> Path:
        if name not in MAKERS:
            raise KeyError(name)
        inputs = {need: self[need] for need in [self.NEEDS.get(name)] if need}
        with made_once(self.factory, f"trained-{name}", wait) as (root, made):
            if not made:
                MAKERS[name](root / name, **inputs)
        return root / name

    def __iter__(self) -> Iterator[str]:
        return iter(MAKERS)

    def __len__(self) -> int:
        return len(MAKERS)


@pytest.fixture(scope="session")
def trained(tmp_path_factory) -> TrainedRuns:
    return TrainedRuns(tmp_path_factory)


def make_cls(out: Path) -> None:
    assert main(["train", "--model", "vit_tiny_patch4_28", *DATA, "--epochs", "1", "--batch-size", "32",
                 "--curves", "end", "--out", str(out)]) == 0


def make_scenes(out: Path) -> None:
    assert main(["make-scenes", "--out", str(out), "--train", "16", "--val", "4", "--test", "4",
                 "--size", "64", "--scale", "16-32", "--objects", "1-3", *DATA]) == 0


def make_detr(out: Path, scenes: Path) -> None:
    assert main(["train", "--task", "detection", "--data", str(scenes), "--curves", "end", "--out", str(out),
                 "--epochs", "1", "--batch-size", "8", "--eval-batch-size", "4", "--num-queries", "8"]) == 0


def make_setr(out: Path, scenes: Path) -> None:
    assert main(["train", "--task", "segmentation", "--model", "setr_mla_small", "--data", str(scenes),
                 "--curves", "end", "--out", str(out), "--epochs", "1", "--batch-size", "4", "--crop-size", "64",
                 "--eval-batch-size", "2"]) == 0


def make_photos(out: Path) -> None:
    from vitlab.data.photos import skimage_photos

    for i, (name, array) in enumerate(skimage_photos().items()):  # small crops: a request takes a second
        split = out / ("test" if i >= 3 else "train")
        split.mkdir(parents=True, exist_ok=True)
        side = 96 if i >= 3 else 200  # training halves them first, and takes 96-pixel patches for ×2
        Image.fromarray(array).crop((100, 100, 100 + side, 100 + side)).save(split / f"{name}.png")


def make_ipt(out: Path, photos: Path) -> None:
    assert main(["train", "--task", "restoration", "--model", "ipt_small", "--data", str(photos),
                 "--degradations", "sr2,denoise30", "--curves", "end", "--out", str(out), "--steps", "2",
                 "--batch-size", "2", "--patches-per-task", "2", "--eval-crop", "48"]) == 0


def make_vqgan(out: Path) -> None:
    assert main(["train", "--task", "vqgan", *DATA, "--epochs", "1", "--batch-size", "16", "--disc-start", "6",
                 "--eval-images", "0", "--curves", "end", "--out", str(out)]) == 0


def make_prior(out: Path, vqgan: Path) -> None:
    assert main(["train", "--task", "prior", "--vqgan", str(vqgan), "--epochs", "1", "--batch-size", "16",
                 "--eval-samples", "0", "--curves", "end", "--out", str(out)]) == 0


MAKERS = {"cls": make_cls, "scenes": make_scenes, "detr": make_detr, "setr": make_setr, "photos": make_photos,
          "ipt": make_ipt, "vqgan": make_vqgan, "prior": make_prior}


# ---- a server over the trained runs, and the built documentation site: read by tests/serve, tests/docs and the
# browser and load tests of tests/benchmarks --------------------------------------------------------------------------
EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


@pytest.fixture(scope="session")
def served(trained):
    from vitlab.serve.runs import load_runs

    return load_runs(trained.all_of(("cls", "detr", "setr", "ipt", "vqgan", "prior")))  # the other worker may make some


@pytest.fixture(scope="session")
def server(served):
    """The base URL of the API and the page over every run, served from a thread of this process, on a free port
    of 127.0.0.1."""
    from vitlab.serve.app import create_app
    from vitlab.serve.pool import WorkerPool
    from vitlab.serve.server import background_server

    with background_server(create_app(served, WorkerPool(workers=2, queue=64))) as url:
        yield url


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The documentation site, built once per test run (`mkdocs build --strict`), whichever worker gets there
    first building it."""
    import subprocess
    import sys

    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    root = Path(__file__).resolve().parents[1]
    with made_once(tmp_path_factory, "site") as (out, made):
        if not made:
            env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
            done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                                  cwd=root, capture_output=True, text=True, env=env, timeout=300, check=False)
            assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return out
