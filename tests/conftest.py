"""Shared fixtures: golden vectors made by Apache RocketMQ 5.3.3's own classes."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import hypothesis
import pytest
import structlog

from tests import tiers

GOLDEN_DIR = Path(__file__).parent / "golden"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The fast tier runs in two worker processes unless ``-n`` says otherwise
    (tests/tiers.py); ``-p no:xdist`` runs it in one."""
    worker = hasattr(config, "workerinput")  # xdist's workers run this hook too
    if tiers.is_fast_tier(config.option.markexpr) and config.pluginmanager.hasplugin("xdist") and not worker:
        if getattr(config.option, "numprocesses", None) is None and not config.option.collectonly:
            # what ``-n 2`` sets (xdist's own pytest_cmdline_main may have run already)
            config.option.numprocesses = 2
            # by file: a module's fixtures (a store, a served stack) are made once
            config.option.dist = "loadfile" if config.option.dist == "no" else config.option.dist
            config.option.tx = ["popen"] * 2


def pytest_configure(config: pytest.Config) -> None:
    tiers.FAST = tiers.is_fast_tier(config.option.markexpr)
    # Hypothesis's timing checks (an example over 200 ms, inputs made slowly) fail a
    # property test on a loaded machine (two cores shared by pytest's workers and by
    # whatever else runs) without saying anything about the code: off in both tiers, as
    # most property tests already had them. A setting a test gives itself still wins.
    timing = {"deadline": None, "suppress_health_check": [hypothesis.HealthCheck.too_slow]}
    if tiers.FAST:  # property tests that set no max_examples of their own
        hypothesis.settings.register_profile("fast-tier", max_examples=tiers.examples(100), **timing)
        hypothesis.settings.load_profile("fast-tier")
    else:
        hypothesis.settings.register_profile("full-suite", **timing)
        hypothesis.settings.load_profile("full-suite")


# Ray keeps its token authentication in tests too (ray.init makes ~/.ray/auth_token
# on first use), whatever a developer's environment says.
os.environ["RAY_AUTH_MODE"] = "token"


# <base>/ray/session_<date>_<time>_<usec>_<pid>/sockets/plasma_store.<n>: Ray refuses a
# Unix socket path over 107 bytes.
_RAY_SOCKET_TAIL = len("/ray/session_2026-01-01_00-00-00_000000_1234567/sockets/plasma_store.10")


@pytest.fixture(scope="session", autouse=True)
def _ray_sessions_in_the_run_dir(tmp_path_factory: pytest.TempPathFactory):
    """Ray (``ray.init`` here, or a ``mqstore serve`` a test starts) keeps its session
    directories (logs, sockets, spilled objects) under this run's base temporary
    directory instead of /tmp/ray, so they go with it when the run passes (pyproject:
    ``tmp_path_retention_policy``). A RAY_TMPDIR of the developer's own is kept, and so
    is Ray's default when the base directory is too deep for Ray's socket paths."""
    base = str(tmp_path_factory.getbasetemp())
    if "RAY_TMPDIR" in os.environ or len(base) + _RAY_SOCKET_TAIL > 107:
        yield
        return
    os.environ["RAY_TMPDIR"] = base
    try:
        yield
    finally:
        os.environ.pop("RAY_TMPDIR", None)


@pytest.fixture(scope="session")
def golden() -> dict:
    return json.loads((GOLDEN_DIR / "rocketmq_vectors.json").read_text())


@pytest.fixture(autouse=True)
def _structlog_unconfigured():
    """A test that configures logging in this process (the CLI run in-process, the
    logging test) leaves structlog as it found it: with ``cache_logger_on_first_use``
    every logger used later would keep that configuration, and ``capture_logs`` in
    later tests would see nothing. Reset before each test too: ``import mqstore``
    configures a library default (warnings only, mqstore/logging.py) that would hide
    the info events a test captures."""
    if structlog.is_configured():
        structlog.reset_defaults()
    yield
    if structlog.is_configured():
        structlog.reset_defaults()


_PURE_TIER_HINT = (
    "tests under tests/unit/ and tests/integration/ test the store in-process and must not start "
    "a cluster: a test that needs Ray belongs in tests/services/, one that needs Spark in tests/jobs/ "
    "(tests/README.md)"
)
# Commands that start Ray or Spark: `ray start`, `mqstore serve` (a local Ray instance),
# `mqstore reconcile` (a SparkSession), spark-submit / pyspark; `--help` starts nothing.
_CLUSTER_SUBCOMMANDS = {"ray": {"start"}, "mqstore": {"serve", "reconcile"}, "mqstore.cli.main": {"serve", "reconcile"}}
_CLUSTER_PROGRAMS = {"spark-submit", "pyspark", "spark-shell"}


def _cluster_command(args) -> str | None:
    """The command line if ``args`` (as given to Popen) starts Ray or Spark, else None."""
    words = shlex.split(args) if isinstance(args, str) else [os.fspath(a) for a in args]
    if "--help" in words or "-h" in words:
        return None
    for i, word in enumerate(words):
        name = os.path.basename(word) if isinstance(word, str) else ""
        if name in _CLUSTER_PROGRAMS or set(words[i + 1 :]) & _CLUSTER_SUBCOMMANDS.get(name, set()):
            return " ".join(map(str, words))
    return None


class _NoClusterPopen(subprocess.Popen):
    def __init__(self, args, *a, **kw) -> None:
        if (cmd := _cluster_command(args)) is not None:
            pytest.fail(f"{cmd!r} starts a cluster; {_PURE_TIER_HINT}", pytrace=True)
        super().__init__(args, *a, **kw)


@pytest.fixture
def no_clusters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Starting Ray or Spark fails the test at once, with a message saying where such a
    test belongs: ``ray.init`` and any Ray node (``ray.cluster_utils`` too), a
    SparkSession or SparkContext, and a subprocess running ``ray start``, ``mqstore
    serve``/``reconcile`` or spark-submit. Autouse in tests/unit/ and
    tests/integration/ (their conftest.py). Fails with ``pytest.fail`` (a BaseException):
    an ``except Exception`` in the code under test does not hide it."""

    def refuse(what: str):
        def refused(*args, **kwargs):
            pytest.fail(f"{what}: {_PURE_TIER_HINT}", pytrace=True)

        return refused

    try:
        import ray
        import ray._private.node
    except ImportError:
        pass
    else:
        monkeypatch.setattr(ray, "init", refuse("ray.init"))
        monkeypatch.setattr(ray._private.node.Node, "__init__", refuse("starting a Ray node"))
    try:
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
    except ImportError:
        pass
    else:
        monkeypatch.setattr(SparkSession.Builder, "getOrCreate", refuse("starting a SparkSession"))
        monkeypatch.setattr(SparkContext, "__init__", refuse("starting a SparkContext"))
    monkeypatch.setattr(subprocess, "Popen", _NoClusterPopen)
