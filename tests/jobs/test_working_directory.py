"""``mqstore reconcile`` works from any working directory (issue 14, item 10.1).

Run from the folder that holds a checkout named ``mqstore``, Spark's Python workers
(``python -m pyspark.daemon`` in the driver's working directory, which Python puts
first on ``sys.path``) took the checkout's root for the package: its
``jobs/reconcile.py`` became ``mqstore.jobs.reconcile`` and every task failed to
unpickle. Run from inside a checkout, they imported the checkout's package instead
of the installed one. Both are run here for real (the ``mqstore`` command, local
Spark), with the project as it is installed in this environment (editable here) and
as a normal install (a plain copy of the package on PYTHONPATH, ahead of the
editable finder). The checkout in the working directory is a copy of this one whose
package refuses to be imported, so importing it anywhere fails the run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mqstore
from mqstore.store import Message, MessageBatch, StoreConfig
from mqstore.store.message_store import MessageStore

pytestmark = pytest.mark.timeout(600)

PROJECT = Path(mqstore.__file__).resolve().parent.parent
MQSTORE = Path(sys.executable).parent / "mqstore"  # the console script of this environment
MESSAGES = 40
POISON = 'raise ImportError("the mqstore checkout in the working directory was imported")\n'


def _copy_package(dst: Path) -> None:
    shutil.copytree(PROJECT / "mqstore", dst, ignore=shutil.ignore_patterns("__pycache__"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a checkout named ``mqstore`` (its root: jobs/, mqstore/, ...)."""
    root = tmp_path_factory.mktemp("cwd")
    checkout = root / "mqstore"
    checkout.mkdir()
    shutil.copytree(PROJECT / "jobs", checkout / "jobs")
    shutil.copy(PROJECT / "pyproject.toml", checkout / "pyproject.toml")
    _copy_package(checkout / "mqstore")
    (checkout / "mqstore" / "__init__.py").write_text(POISON)
    return root


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wd-store") / "store"
    with MessageStore(path, StoreConfig(segment_bytes=1 << 20, index_hash_slots=64, index_max_entries=256)) as s:
        s.append(
            MessageBatch.of([Message("T", f"m{i}".encode(), tags="TagA", keys=[f"k{i}"]) for i in range(MESSAGES)])
        )
    return path


@pytest.fixture(scope="module")
def normal_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    _copy_package(site / "mqstore")
    return site


def reconcile_from(cwd: Path, store: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(MQSTORE), "reconcile", "--store", str(store), "--master", "local[1]", "--no-progress", "--format", "json"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize("install", ["as installed", "normal install"])
def test_reconcile_runs_from_a_folder_holding_a_checkout(
    folder: Path, store: Path, normal_install: Path, install: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH", "PYSPARK_PYTHON")}
    if install == "normal install":
        env["PYTHONPATH"] = str(normal_install)
    for cwd in (folder, folder / "mqstore"):  # next to the checkout, and inside it
        p = reconcile_from(cwd, store, env)
        assert p.returncode == 0, f"from {cwd}: {p.stderr[-3000:]}"
        summary = json.loads(p.stdout)
        assert summary["ok"] and summary["messages"] == MESSAGES, summary
        assert "Traceback" not in p.stderr, p.stderr


def test_a_failed_spark_job_is_one_line() -> None:
    """What ``mqstore reconcile`` prints when a Spark job fails (the message of the
    failure this module's test guards against, as pyspark raises it)."""
    from mqstore.cli.reconcile import one_line

    worker = RuntimeError(
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
        '  File "/venv/pyspark.zip/pyspark/serializers.py", line 483, in loads\n'
        "    return cloudpickle.loads(obj, encoding=encoding)\n           ^^^^^^^^^^^^^^^^^^^^^^^^\n"
        "AttributeError: Can't get attribute '_derived_task' on <module 'mqstore.jobs.reconcile'>\n SQLSTATE: 38000"
    )
    assert (
        one_line(worker) == "AttributeError: Can't get attribute '_derived_task' on <module 'mqstore.jobs.reconcile'>"
    )
    java = RuntimeError(
        "An error occurred while calling o42.collect.\n: org.apache.spark.SparkException: Job aborted\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:1)"
    )
    assert one_line(java) == "org.apache.spark.SparkException: Job aborted"
    assert one_line(RuntimeError("")) == "RuntimeError"
