"""A SparkSession with the settings mqstore's jobs need.

Local mode needs nothing but the project's install (pyspark brings its own Spark;
Java 17+ must be on the PATH or in JAVA_HOME). Before the JVM starts, the Python
workers are pointed at this interpreter (otherwise they run whatever ``python3`` is
on the PATH, which cannot import mqstore or pyarrow) and, in local mode, Spark is
bound to the loopback address. Spark's own logging goes through a log4j2 file at
level error, so the job's structlog progress is what shows on stderr; a failed
task is not logged there with its stack trace (the executor and task-set loggers
are at fatal): the job's failure reaches the driver, and ``mqstore reconcile``
prints it as one line. The file is written on the driver's machine and only the
driver's JVM is pointed at it: executors on other hosts keep their own log4j2
configuration (their logs go to the worker's log directory, not to this terminal).

Python workers run with ``PYTHONSAFEPATH=1`` (``spark.executorEnv``): Spark starts
them with ``python -m pyspark.daemon`` in the JVM's working directory, which
Python would otherwise put first on ``sys.path``. Run from a folder holding a
checkout named ``mqstore`` (its root has ``jobs/reconcile.py``), that checkout was
taken for the package and the tasks failed to unpickle (issue 14); with the flag a
worker imports mqstore from where its interpreter has it installed (or from
``--py-files``), whatever the working directory.

Under ``spark-submit`` the session already exists (or is created from the submit's
settings): :func:`session` then only adds what is missing.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = error
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = error
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = fatal
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = fatal
"""

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # workers never import from their working directory (see the module docstring)
    "spark.executorEnv.PYTHONSAFEPATH": "1",
}


def log4j2_file() -> Path:
    """A log4j2 properties file at level error (written once per user and content:
    the name holds a hash of it, so a process of another mqstore version never
    rewrites the file a running JVM reads)."""
    digest = hashlib.sha256(LOG4J2.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"mqstore-log4j2-{os.getuid()}-{digest}.properties"
    if not path.exists() or path.read_text() != LOG4J2:
        tmp = path.with_name(path.name + f".{os.getpid()}")
        tmp.write_text(LOG4J2)
        os.replace(tmp, path)
    return path


def prepare_environment(master: str | None) -> None:
    """What must be set before the JVM starts (see the module docstring)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master is None or master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def session(
    master: str | None = "local[*]",
    *,
    app_name: str = "mqstore",
    conf: dict[str, str] | None = None,
    shuffle_partitions: int | None = None,
):
    """The active SparkSession, or a new one on ``master`` (None: whatever
    spark-submit or spark-defaults say) with DEFAULT_CONF and ``conf``."""
    prepare_environment(master)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j2_file()}"
    settings = {
        **DEFAULT_CONF,
        # the driver only: the file is on the driver's machine, an executor on another
        # host has no such path (in local mode the executor is the driver's JVM)
        "spark.driver.extraJavaOptions": java_opts,
        **(conf or {}),
    }
    if master is not None and master.startswith("local"):
        cores = _local_cores(master)
        settings.setdefault("spark.default.parallelism", str(cores))
        settings.setdefault("spark.sql.shuffle.partitions", str(shuffle_partitions or cores))
    elif shuffle_partitions:
        settings.setdefault("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _local_cores(master: str) -> int:
    """local -> 1, local[4] -> 4, local[*] -> this machine's cores."""
    inner = master[len("local") :].strip("[]").split(",")[0]
    if inner == "":
        return 1
    if inner == "*":
        return os.cpu_count() or 1
    try:
        return max(1, int(inner))
    except ValueError:
        return os.cpu_count() or 1


def register_datasource(spark) -> None:
    """Make ``spark.read.format("mqstore")`` available in this session."""
    from mqstore.jobs.datasource import MqstoreDataSource

    spark.dataSource.register(MqstoreDataSource)


__all__ = ["DEFAULT_CONF", "log4j2_file", "prepare_environment", "register_datasource", "session"]
