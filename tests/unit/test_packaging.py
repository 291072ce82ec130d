"""The package is `mqstore`, with the services (the top-level services/ folder)
installed as `mqstore.services`: the package list in pyproject.toml names every
folder, a wheel installs and imports in a fresh venv, and the `mqstore` command
works from any working directory, also next to a checkout named mqstore."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMPORT = (
    "import mqstore.services.query.front as f, mqstore.store.message_store as m; print(f.__file__); print(m.__file__)"
)


def packages_on_disk() -> set[str]:
    out = set()
    for base, name in ((ROOT / "mqstore", "mqstore"), (ROOT / "services", "mqstore.services")):
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base).parts
            out.add(".".join((name, *rel)))
    return out


def test_the_package_list_names_every_folder():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(cfg["packages"]) == packages_on_disk()
    assert cfg["package-dir"] == {"mqstore.services": "services"}
    assert not (ROOT / "mqstore" / "services").exists()  # one home for the services


def run(cmd: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{cmd} in {cwd}:\n{p.stdout}\n{p.stderr}"
    return p


@pytest.mark.slow
@pytest.mark.timeout(900)  # builds the wheel, compiling every kernel: minutes on 2 busy cores
def test_a_wheel_installs_and_the_command_works_anywhere(tmp_path: Path):
    """A normal install (a wheel in a fresh venv; dependencies from this venv) and this
    editable one, each run from a neutral folder and from the folder that holds a
    checkout named mqstore."""
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        tmp_path,
    )
    (wheel,) = (tmp_path / "dist").glob("mqstore-*.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp_path)
    deps = {
        "PYTHONPATH": sysconfig.get_paths()["purelib"]
    }  # this venv's packages, not its editable mqstore (.pth files are not read from PYTHONPATH)
    neutral = tmp_path / "neutral"
    neutral.mkdir()
    beside = tmp_path / "beside"  # holds a checkout named mqstore, as a clone next to a venv would
    (beside / "mqstore").mkdir(parents=True)
    for part in ("mqstore", "services", "pyproject.toml"):
        src = ROOT / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, beside / "mqstore" / part)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    for where in (neutral, beside):
        front, store = run([str(venv / "bin" / "python"), "-c", IMPORT], where, deps).stdout.split()
        assert front.startswith(str(site)) and store.startswith(str(site)), (where, front, store)
        assert "Usage: mqstore" in run([str(venv / "bin" / "mqstore"), "--help"], where, deps).stdout
        assert "Usage: mqstore" in run([str(Path(sys.executable).parent / "mqstore"), "--help"], where).stdout
    front, _ = run([sys.executable, "-c", IMPORT], neutral).stdout.split()
    assert front == str(ROOT / "services" / "query" / "front.py")  # the editable install maps the package to services/
