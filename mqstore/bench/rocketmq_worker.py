"""One client process of ``mqstore bench rocketmq`` (rocketmq_bench.py): a Producer or
a SimpleConsumer of the official RocketMQ 5 Python client (``rocketmq-python-client``),
run as ``python -m mqstore.bench.rocketmq_worker '<json job>'``.

The parent sets HOME to a folder of this process's own before it starts (the client
fixes its log folder, ``~/logs/rocketmq_python``, when ``rocketmq`` is first
imported) and passes credentials in MQSTORE_ACCESS_KEY / MQSTORE_SECRET_KEY.

Talk with the parent, one JSON object per line:

    stdout  {"ready": pid, "startup_s": s}        once the client has started
    stdin   go                                     start the timed part
    stdout  producer: {"sent": n}                  about every PROGRESS_S
            consumer: {"ids": [...], "t": T, "cpu": C}   ids acked of each received batch;
                                                   T (time.monotonic, system wide) and C
                                                   (this process's CPU seconds since go)
                                                   as of the last ack
    stdin   stop (consumers; or end of input)      stop receiving
    stdout  {"done": ...}                          the totals (below); then it exits 0
            {"error": "..."}                       a failure; then it exits 1

Everything else the process prints goes to stderr (stdout is the protocol's).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

PROGRESS_S = 0.2
MAX_ERRORS = 100  # failed calls before a client gives up


class _Out:
    def __init__(self) -> None:
        sys.stdout.flush()
        self._f = os.fdopen(os.dup(sys.stdout.fileno()), "w")
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # stray prints of libraries go to stderr
        self._lock = threading.Lock()

    def put(self, obj: dict) -> None:
        line = json.dumps(obj, separators=(",", ":"))
        with self._lock:
            self._f.write(line + "\n")
            self._f.flush()


def _config(rmq, job: dict):
    creds = rmq.Credentials(os.environ.get("MQSTORE_ACCESS_KEY", ""), os.environ.get("MQSTORE_SECRET_KEY", ""))
    return rmq.ClientConfiguration(job["server"], creds, request_timeout=job["request_timeout"])


def _wait_for(word: str, stdin) -> bool:
    """Read stdin lines until ``word``: True; end of input: False."""
    for line in stdin:
        if line.strip() == word:
            return True
    return False


def run_producer(rmq, job: dict, out: _Out) -> None:
    t0 = time.perf_counter()
    producer = rmq.Producer(_config(rmq, job), (job["topic"],))
    producer.startup()
    try:
        out.put({"ready": os.getpid(), "startup_s": round(time.perf_counter() - t0, 3)})
        if not _wait_for("go", sys.stdin):
            return
        body = (os.urandom(16).hex().encode() * (job["body_size"] // 32 + 1))[: job["body_size"]] or b"x"
        count = job["messages"]
        ids: list[str] = []
        errors, first_error = 0, None
        cpu0, start = time.process_time(), time.monotonic()
        last = start
        for _ in range(count):
            m = rmq.Message()
            m.topic = job["topic"]
            m.body = body
            m.tag = "Bench"
            try:
                ids.append(producer.send(m).message_id)
            except Exception as e:  # noqa: BLE001 - counted; the parent reports it
                errors += 1
                first_error = first_error or f"{type(e).__name__}: {e}"
                if errors >= MAX_ERRORS:
                    break
            now = time.monotonic()
            if now - last >= PROGRESS_S:
                out.put({"sent": len(ids)})
                last = now
        end, cpu = time.monotonic(), time.process_time() - cpu0
        out.put(
            {
                "done": "producer",
                "sent": len(ids),
                "errors": errors,
                "first_error": first_error,
                "start": start,
                "end": end,
                "cpu_s": cpu,
                "ids": ids,
            }
        )
    finally:
        producer.shutdown()


def run_consumer(rmq, job: dict, out: _Out) -> None:
    t0 = time.perf_counter()
    subs = {job["topic"]: rmq.FilterExpression("*")}
    consumer = rmq.SimpleConsumer(_config(rmq, job), job["group"], subs, job["await_s"])
    consumer.startup()
    try:
        out.put({"ready": os.getpid(), "startup_s": round(time.perf_counter() - t0, 3)})
        if not _wait_for("go", sys.stdin):
            return
        stop = threading.Event()

        def watch_stdin() -> None:
            _wait_for("stop", sys.stdin)
            stop.set()

        threading.Thread(target=watch_stdin, name="stdin", daemon=True).start()
        cpu0, start = time.process_time(), time.monotonic()
        t_last, cpu_last = start, 0.0
        pending: list[str] = []
        received = acked = receive_errors = ack_errors = 0
        first_error = None
        while not stop.is_set():
            try:
                got = consumer.receive(job["batch"], job["invisible_s"])
            except Exception as e:  # noqa: BLE001 - counted; the parent reports it
                receive_errors += 1
                first_error = first_error or f"receive: {type(e).__name__}: {e}"
                if receive_errors + ack_errors >= MAX_ERRORS:
                    break
                got = []
            received += len(got)
            for m in got:
                try:
                    consumer.ack(m)
                except Exception as e:  # noqa: BLE001
                    ack_errors += 1
                    first_error = first_error or f"ack: {type(e).__name__}: {e}"
                    continue
                acked += 1
                pending.append(m.message_id)
            if got:
                t_last, cpu_last = time.monotonic(), time.process_time() - cpu0
            if pending:  # every batch: the parent sees the last one before this client long-polls again
                out.put({"ids": pending, "t": t_last, "cpu": cpu_last})
                pending = []
        if pending:
            out.put({"ids": pending, "t": t_last, "cpu": cpu_last})
        out.put(
            {
                "done": "consumer",
                "received": received,
                "acked": acked,
                "receive_errors": receive_errors,
                "ack_errors": ack_errors,
                "first_error": first_error,
                "start": start,
                "last_ack": t_last,
                "cpu_s": cpu_last,
                "cpu_total_s": time.process_time() - cpu0,
            }
        )
    finally:
        consumer.shutdown()


def main() -> int:
    out = _Out()
    try:
        job = json.loads(sys.argv[1])
        import rocketmq as rmq  # HOME is ours already (see the module docstring)

        (run_producer if job["role"] == "producer" else run_consumer)(rmq, job, out)
    except BaseException as e:  # noqa: BLE001 - told to the parent, which reports it
        out.put({"error": f"{type(e).__name__}: {e}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
