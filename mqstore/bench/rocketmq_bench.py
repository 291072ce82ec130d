"""``mqstore bench rocketmq``: the official RocketMQ 5 Python client
(``rocketmq-python-client``) against mqstore's RocketMQ port, each client in a process
of its own (rocketmq_worker.py).

    start    every producer and consumer process starts its client (not timed)
    send     the producers ``Producer.send`` (synchronous; the Python client sends one
             message per SendMessage call) ``messages`` in all, split between them;
             the consumers idle meanwhile
    receive  the consumers, SimpleConsumers of one group, ``receive(batch, invisible)``
             and ``ack`` each message, until every message the producers sent was acked
             (counted by message id: a second delivery of an id is a duplicate; an id
             this run did not send, left on a reused topic, is foreign)

The phases are timed apart, so each has its own rate and CPU per message: every client
process measures its own CPU (``time.process_time``) over its timed part, and with
``serve_pids`` the CPU of every process of the deployment is read from /proc at the
phase boundaries (mqstore/bench/cpu.py labels them: front, commitlog-0,
consumequeue-0, dispatcher-0, ...). The issue's goal, "the server is never the
bottleneck", is checked as: in both phases the front's CPU per message is below the
clients' (all client processes' CPU of the phase over its messages).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mqstore.bench.cpu import cpu_by_process
from mqstore.errors import MqStoreError

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


class RocketMQBenchError(MqStoreError):
    """The bench could not run (server unreachable, a client failed to start)."""


@dataclass
class RocketMQBench:
    server: str  # HOST:PORT of the RocketMQ port
    producers: int = 1
    consumers: int = 1
    messages: int = 10_000
    body_size: int = 128
    topic: str | None = None  # default: a new topic per run
    group: str | None = None  # default: a new group per run
    batch: int = 32  # receive(batch, ...)
    invisible_s: int = 30
    await_s: int = 2  # the consumers' long poll
    request_timeout_s: int = 5  # seconds (the client wants an int)
    idle_timeout_s: float = 30.0  # the receive phase gives up after this long without a new message
    serve_pids: tuple[int, ...] = ()
    shard_dirs: tuple[Path, ...] = ()
    access_key: str | None = None
    secret_key: str | None = None
    run_id: str = field(default_factory=lambda: f"{os.getpid()}_{int(time.time() * 1000) % 10**10}")


def parse_server(server: str) -> tuple[str, int]:
    host, sep, port = server.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RocketMQBenchError(f"--server must be HOST:PORT (the RocketMQ port), got {server!r}")
    return host.strip("[]"), int(port)


def check_reachable(server: str, timeout: float = 5.0) -> None:
    host, port = parse_server(server)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        raise RocketMQBenchError(f"can not reach the RocketMQ port {server}: {e}") from None


class _Client:
    """One client process and the thread reading its lines into the shared queue."""

    def __init__(self, role: str, index: int, job: dict, home: Path, env: dict, lines: queue.Queue) -> None:
        self.role, self.index = role, index
        self.home = home / f"{role}-{index}"
        self.home.mkdir(parents=True)
        self.stderr_path = self.home / "stderr.log"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mqstore.bench.rocketmq_worker", json.dumps(job)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env | {"HOME": str(self.home)},
            text=True,
        )
        self.pid = self.proc.pid
        self.done: dict | None = None
        self.ready: dict | None = None
        threading.Thread(target=self._read, args=(lines,), name=f"{role}-{index}-reader", daemon=True).start()

    def _read(self, lines: queue.Queue) -> None:
        for line in self.proc.stdout:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            lines.put((self, obj))
        lines.put((self, None))  # end of output

    def tell(self, word: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write(word + "\n")
            self.proc.stdin.flush()

    def stderr_tail(self, n: int = 5) -> str:
        with contextlib.suppress(OSError):
            lines = self.stderr_path.read_text(errors="replace").strip().splitlines()
            return " | ".join(lines[-n:])
        return ""

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()

    @property
    def name(self) -> str:
        return f"{self.role} {self.index} (pid {self.pid})"


class _ServerCpu:
    """CPU seconds so far of every process under the given roots, by label (several
    roots: labels prefixed with the root's pid)."""

    def __init__(self, roots: tuple[int, ...], shard_dirs: tuple[Path, ...]) -> None:
        self.roots, self.dirs = roots, list(shard_dirs)

    def snapshot(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for root in self.roots:
            try:
                got = cpu_by_process(root, self.dirs)
            except ProcessLookupError:
                raise RocketMQBenchError(f"--serve-pid {root}: no such process") from None
            prefix = f"{root}:" if len(self.roots) > 1 else ""
            out |= {prefix + k: v for k, v in got.items()}
        return out


def _per_message(before: dict[str, float], after: dict[str, float], messages: int) -> dict[str, float]:
    """µs of CPU per message of each process that used at least 1 ms, and ``total``."""
    used = {k: v - before.get(k, 0.0) for k, v in after.items()}
    n = max(messages, 1)
    out = {k: round(v * 1e6 / n, 2) for k, v in sorted(used.items(), key=lambda kv: -kv[1]) if v >= 0.001}
    out["total"] = round(sum(used.values()) * 1e6 / n, 2)
    return out


def _front_of(cpu: dict[str, float]) -> float | None:
    """The fronts' µs per message (every front of ``serve --fronts N``, summed over
    roots), or None if no process is a front."""
    fronts = [v for k, v in cpu.items() if re.fullmatch(r"front(-\d+)?", k.rsplit(":", 1)[-1])]
    return round(sum(fronts), 2) if fronts else None


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def run_rocketmq_bench(b: RocketMQBench, progress: Callable[[str], None] | None = None) -> dict:
    """Run the bench (module docstring); the result as one dict (see the CLI's help)."""
    say = progress or (lambda _msg: None)
    if importlib.util.find_spec("rocketmq") is None:
        raise RocketMQBenchError(
            "bench rocketmq drives the official client: pip install rocketmq-python-client==5.1.2 "
            "(in mqstore's test extra)"
        )
    check_reachable(b.server)
    server_cpu = _ServerCpu(b.serve_pids, b.shard_dirs) if b.serve_pids else None
    if server_cpu is not None:
        server_cpu.snapshot()  # a bad pid fails now, before any client starts
    topic = b.topic or f"BenchRocketMQ_{b.run_id}"
    group = b.group or f"BenchRocketMQGroup_{b.run_id}"
    home = Path(tempfile.mkdtemp(prefix="mqstore-bench-rocketmq-"))
    env = dict(os.environ)
    for name, value in (("MQSTORE_ACCESS_KEY", b.access_key), ("MQSTORE_SECRET_KEY", b.secret_key)):
        if value:
            env[name] = value
    common = {
        "server": b.server,
        "topic": topic,
        "request_timeout": b.request_timeout_s,
    }
    lines: queue.Queue = queue.Queue()
    clients: list[_Client] = []
    ok = False
    try:
        shares = _split(b.messages, b.producers)
        producers = [
            _Client(
                "producer",
                i,
                common | {"role": "producer", "messages": n, "body_size": b.body_size},
                home,
                env,
                lines,
            )
            for i, n in enumerate(shares)
        ]
        consumers = [
            _Client(
                "consumer",
                i,
                common
                | {
                    "role": "consumer",
                    "group": group,
                    "batch": b.batch,
                    "invisible_s": b.invisible_s,
                    "await_s": b.await_s,
                },
                home,
                env,
                lines,
            )
            for i in range(b.consumers)
        ]
        clients = producers + consumers
        say(f"starting {b.producers} producer and {b.consumers} consumer processes (topic {topic}, group {group})")
        _wait_ready(clients, lines)
        startup = max(c.ready["startup_s"] for c in clients)

        # ---- send
        cpu0 = server_cpu.snapshot() if server_cpu else None
        t_send = time.monotonic()
        for p in producers:
            p.tell("go")
        sent_ids: set[str] = set()
        sent_count = {p.index: 0 for p in producers}
        last_say = time.monotonic()
        while any(p.done is None for p in producers):
            c, obj = _next(lines, clients)
            if c.role != "producer":
                continue
            if "sent" in obj and "done" not in obj:
                sent_count[c.index] = obj["sent"]
            elif obj.get("done"):
                c.done = obj
                sent_count[c.index] = obj["sent"]
                sent_ids.update(obj["ids"])
            now = time.monotonic()
            if now - last_say >= 2.0:
                n = sum(sent_count.values())
                say(f"send: {n:,}/{b.messages:,} ({n / (now - t_send):,.0f} msgs/s)")
                last_say = now
        cpu1 = server_cpu.snapshot() if server_cpu else None
        pdone = [p.done for p in producers]
        send_s = max(d["end"] for d in pdone) - t_send
        sent = sum(d["sent"] for d in pdone)
        send_errors = sum(d["errors"] for d in pdone)
        producer_cpu = sum(d["cpu_s"] for d in pdone)
        say(f"send: {sent:,} sent in {send_s:.2f} s ({sent / send_s:,.0f} msgs/s), {send_errors} failed")

        # ---- receive
        t_recv = time.monotonic()
        for c in consumers:
            c.tell("go")
        consumed: set[str] = set()
        acks = foreign = 0
        last_new = last_say = time.monotonic()
        finished = False
        while not finished:
            try:
                c, obj = _next(lines, clients, timeout=0.5, empty_ok=True)
            except queue.Empty:
                c, obj = None, {}
            if c is not None and c.role == "consumer" and "ids" in obj:
                acks += len(obj["ids"])
                for mid in obj["ids"]:
                    if mid in sent_ids:
                        if mid not in consumed:
                            consumed.add(mid)
                            last_new = time.monotonic()
                    else:
                        foreign += 1
            now = time.monotonic()
            if len(consumed) >= len(sent_ids):
                finished = True
            elif now - last_new > b.idle_timeout_s:
                say(f"receive: nothing new for {b.idle_timeout_s:g} s; stopping with {len(consumed):,} consumed")
                finished = True
            if now - last_say >= 2.0:
                say(f"receive: {len(consumed):,}/{len(sent_ids):,} ({len(consumed) / (now - t_recv):,.0f} msgs/s)")
                last_say = now
        cpu2 = server_cpu.snapshot() if server_cpu else None
        for c in consumers:
            c.tell("stop")
        while any(c.done is None for c in consumers):
            c, obj = _next(lines, clients, timeout=STOP_TIMEOUT_S)
            if c.role != "consumer":
                continue
            if "ids" in obj:  # acked after the last count: late duplicates or foreign ones
                acks += len(obj["ids"])
                foreign += sum(1 for mid in obj["ids"] if mid not in sent_ids)
                consumed.update(mid for mid in obj["ids"] if mid in sent_ids)
            elif obj.get("done"):
                c.done = obj
        cdone = [c.done for c in consumers]
        active = [d for d in cdone if d["acked"]]
        recv_s = (max(d["last_ack"] for d in active) - t_recv) if active else 0.0
        consumer_cpu = sum(d["cpu_s"] for d in cdone)
        missing = len(sent_ids - consumed)
        duplicates = acks - foreign - len(consumed)
        say(f"receive: {len(consumed):,} consumed in {recv_s:.2f} s, {duplicates} duplicates, {missing} missing")
        ok = sent == b.messages and missing == 0
    finally:
        for c in clients:
            c.tell("stop")
        for c in clients:
            c.close()
        if ok:
            shutil.rmtree(home, ignore_errors=True)
        else:
            say(f"the clients' logs are kept in {home}")

    def rate(n: int, s: float) -> float:
        return round(n / s, 1) if s > 0 else 0.0

    def us(cpu_s: float, n: int) -> float:
        return round(cpu_s * 1e6 / max(n, 1), 2)

    result: dict = {
        "server": b.server,
        "topic": topic,
        "group": group,
        "producers": b.producers,
        "consumers": b.consumers,
        "messages": b.messages,
        "body_size": b.body_size,
        "receive_batch": b.batch,
        "startup_s": startup,
        "sent": sent,
        "send_errors": send_errors,
        "send_seconds": round(send_s, 4),
        "send_msgs_per_s": rate(sent, send_s),
        "consumed": len(consumed),
        "acks": acks,
        "duplicates": duplicates,
        "foreign": foreign,
        "missing": missing,
        "receive_errors": sum(d["receive_errors"] for d in cdone),
        "ack_errors": sum(d["ack_errors"] for d in cdone),
        "receive_seconds": round(recv_s, 4),
        "receive_msgs_per_s": rate(len(consumed), recv_s),
        "producer_cpu_us_per_msg": us(producer_cpu, sent),
        "consumer_cpu_us_per_msg": us(consumer_cpu, len(consumed)),
        "client_cpu_us_per_msg": {
            "producers": [
                {
                    "pid": p.pid,
                    "messages": d["sent"],
                    "cpu_s": round(d["cpu_s"], 3),
                    "us_per_msg": us(d["cpu_s"], d["sent"]),
                }
                for p, d in zip(producers, pdone)
            ],
            "consumers": [
                {
                    "pid": c.pid,
                    "messages": d["acked"],
                    "cpu_s": round(d["cpu_s"], 3),
                    "us_per_msg": us(d["cpu_s"], d["acked"]),
                }
                for c, d in zip(consumers, cdone)
            ],
        },
        "first_error": next((d["first_error"] for d in pdone + cdone if d.get("first_error")), None),
        "ok": ok,
    }
    if server_cpu is not None:
        send_cpu = _per_message(cpu0, cpu1, sent)
        recv_cpu = _per_message(cpu1, cpu2, len(consumed))
        front_send, front_recv = _front_of(send_cpu), _front_of(recv_cpu)
        client_send, client_recv = result["producer_cpu_us_per_msg"], result["consumer_cpu_us_per_msg"]
        below_send = None if front_send is None else front_send < client_send
        below_recv = None if front_recv is None else front_recv < client_recv
        result["server_cpu_us_per_msg"] = {"send": send_cpu, "receive": recv_cpu}
        result["goal"] = {
            "send": {
                "front_us_per_msg": front_send,
                "client_us_per_msg": client_send,
                "front_below_client": below_send,
            },
            "receive": {
                "front_us_per_msg": front_recv,
                "client_us_per_msg": client_recv,
                "front_below_client": below_recv,
            },
        }
        result["front_below_client"] = None if None in (below_send, below_recv) else below_send and below_recv
    return result


def _next(
    lines: queue.Queue, clients: list[_Client], timeout: float = READY_TIMEOUT_S, *, empty_ok: bool = False
) -> tuple[_Client, dict]:
    """The next line of any client; a client's error or early exit ends the bench, and
    so does ``timeout`` seconds without a line (``empty_ok``: queue.Empty instead)."""
    try:
        c, obj = lines.get(timeout=timeout)
    except queue.Empty:
        if empty_ok:
            raise
        quiet = ", ".join(x.name for x in clients if x.done is None)
        raise RocketMQBenchError(f"no word from the clients for {timeout:g} s (still running: {quiet})") from None
    if obj is None:
        if c.done is None:
            raise RocketMQBenchError(f"{c.name} exited (status {c.proc.wait()}): {c.stderr_tail()}")
        return c, {}
    if "error" in obj:
        raise RocketMQBenchError(f"{c.name} failed: {obj['error']}")
    return c, obj


def _wait_ready(clients: list[_Client], lines: queue.Queue) -> None:
    end = time.monotonic() + READY_TIMEOUT_S
    while any(c.ready is None for c in clients):
        left = end - time.monotonic()
        if left <= 0:
            slow = ", ".join(c.name for c in clients if c.ready is None)
            raise RocketMQBenchError(f"clients not started within {READY_TIMEOUT_S:g} s: {slow}")
        try:
            c, obj = _next(lines, clients, timeout=left, empty_ok=True)
        except queue.Empty:
            continue
        if "ready" in obj:
            c.ready = obj


__all__ = ["RocketMQBench", "RocketMQBenchError", "check_reachable", "parse_server", "run_rocketmq_bench"]
