"""vitlab as a user gets it from an index: `python -m build` makes a wheel and an sdist, and the wheel, installed
into a fresh virtual environment, runs `vitlab --help`, every command's `--help`, `vitlab models` and a forward pass,
with its package data (the photographs' list) inside.

The fresh environment takes vitlab from the wheel only; its dependencies (torch alone is gigabytes) come from the
environment running the tests, added to its path by a .pth file, so nothing is downloaded."""

import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(*args, **kwargs):
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, check=False, timeout=600, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, args))} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_wheel_installs_into_a_fresh_environment_and_runs(tmp_path):
    pytest.importorskip("build", reason="the test extra: pip install -e '.[test]'")
    dist = tmp_path / "dist"
    # --no-isolation: the build backend (setuptools) from this environment, as there is no index to fetch it from
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, ROOT, cwd=tmp_path)
    wheel, = dist.glob("vitlab-*.whl")
    sdist, = dist.glob("vitlab-*.tar.gz")
    with zipfile.ZipFile(wheel) as archive:
        assert "vitlab/data/photos.json" in archive.namelist()
    with tarfile.open(sdist) as archive:
        assert any(name.endswith("vitlab/data/photos.json") for name in archive.getnames())

    env = tmp_path / "env"
    # without pip of its own (making one costs seconds): this environment's pip installs into it (`pip --python`)
    _run(sys.executable, "-m", "venv", "--without-pip", env)
    python = env / "bin" / "python"
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
         "--disable-pip-version-check", wheel)

    top = _run(env / "bin" / "vitlab", "--help")
    assert "train" in top
    assert "vit_base_patch16_224" in _run(env / "bin" / "vitlab", "models")
    # in one process (each costs seconds of imports): where vitlab comes from, its package data, a forward pass, and
    # every command `vitlab --help` lists answering its own --help from the wheel (none needs the clone's files)
    out = _run(python, "-c", """
import contextlib, importlib.resources, io, torch, vitlab
from vitlab.cli.main import build_parser, main
print(vitlab.__file__)
print(importlib.resources.files("vitlab.data").joinpath("photos.json").is_file())
print(tuple(vitlab.create_model("vit_tiny_patch16_224", num_classes=3)(torch.randn(1, 3, 224, 224)).shape))
commands = sorted(build_parser()._subparsers._group_actions[0].choices)
for command in commands:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
        main([command, "--help"])
    assert f"usage: vitlab {command}" in out.getvalue(), command
print(" ".join(commands))
""", cwd=tmp_path).splitlines()
    assert out[0].startswith(str(site)), f"vitlab came from {out[0]}, not from the installed wheel"
    assert out[1:3] == ["True", "(1, 3)"]
    listed = out[3].split()
    assert len(listed) >= 15 and all(f"    {command}" in top for command in listed)
