#!/usr/bin/env bash
# Run `mqstore reconcile` on a Spark cluster with spark-submit (see deploy/spark.md).
#
#   SPARK_MASTER=spark://head:7077 bash deploy/spark-submit.sh --store /shared/store --output /shared/out [--repair]
#
# Settings (environment):
#   SPARK_MASTER      the cluster (default local[*])
#   SPARK_SUBMIT      the spark-submit to use (default: the one next to MQSTORE_PYTHON, else on the PATH)
#   MQSTORE_PYTHON    the interpreter with mqstore's dependencies, at this path on every node
#                     (default: the python3 on the PATH); driver and executors run it
#   MQSTORE_PY_FILES  1: ship the mqstore package, compiled core included, as an archive unpacked
#                     next to each executor (--archives, on the workers' PYTHONPATH) instead of
#                     relying on an installed mqstore there (their python still needs numpy, pyarrow,
#                     structlog, and the same Python version and platform as this machine: the
#                     core is this machine's build); the zip is made in a temporary folder removed
#                     when the script ends
#   SPARK_SUBMIT_ARGS more spark-submit arguments (e.g. "--executor-memory 2g --total-executor-cores 8")
# Arguments go to jobs/reconcile.py (every option of `mqstore reconcile`). Exit status: spark-submit's.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${MQSTORE_PYTHON:-$(command -v python3)}"
if [ -z "${SPARK_HOME:-}" ]; then  # pip's pyspark is a whole Spark: find it through the interpreter
  SPARK_HOME="$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null || true)"
  [ -n "$SPARK_HOME" ] && export SPARK_HOME
fi
SUBMIT="${SPARK_SUBMIT:-}"
if [ -z "$SUBMIT" ]; then
  if [ -x "$(dirname "$PY")/spark-submit" ]; then SUBMIT="$(dirname "$PY")/spark-submit"; else SUBMIT=spark-submit; fi
fi
EXTRA=()
TMP_DIR=""
cleanup() { if [ -n "$TMP_DIR" ]; then rm -rf "$TMP_DIR"; fi; }
# Every way out removes the zip's folder: spark-submit's end, a failed step, Ctrl-C or
# a SIGTERM/SIGHUP (bash runs a trap once the foreground spark-submit has ended;
# Ctrl-C reaches both). Only SIGKILL leaves it behind.
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
if [ "${MQSTORE_PY_FILES:-0}" = "1" ]; then
  TMP_DIR="$(mktemp -d -t mqstore-py-files.XXXXXX)"
  ZIP="$TMP_DIR/mqstore.zip"
  # The package as this interpreter imports it (an editable install: the clone), with its
  # compiled kernels: Python imports an extension from a directory, never from a zip, so
  # the archive is unpacked (--archives) rather than put on the path as a zip (--py-files).
  "$PY" -c 'import sys, zipfile, pathlib, mqstore.kernels
pkg = pathlib.Path(mqstore.__file__).parent
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
    for p in sorted(pkg.rglob("*")):
        if p.suffix in (".py", ".so"):
            z.write(p, pathlib.Path("mqstore") / p.relative_to(pkg))' "$ZIP"
  EXTRA+=(--archives "$ZIP#mqstore_pkg" --conf spark.executorEnv.PYTHONPATH=mqstore_pkg)
fi
LOG4J="$(cd "$HERE" && "$PY" -c 'from mqstore.jobs.spark import log4j2_file; print(log4j2_file())' 2>/dev/null || true)"
if [ -n "$LOG4J" ]; then  # the driver only: the file is on this machine, executors run elsewhere
  EXTRA+=(--conf "spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:$LOG4J")
fi
# Not exec: the script stays to remove the zip's folder when spark-submit ends.
STATUS=0
# shellcheck disable=SC2086
"$SUBMIT" --master "${SPARK_MASTER:-local[*]}" \
  --conf "spark.pyspark.python=$PY" --conf "spark.pyspark.driver.python=$PY" \
  --conf spark.ui.showConsoleProgress=false \
  "${EXTRA[@]}" ${SPARK_SUBMIT_ARGS:-} \
  "$HERE/jobs/reconcile.py" "$@" || STATUS=$?
exit "$STATUS"
