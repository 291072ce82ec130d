"""Named fault points of the store, for tests that inject failures.

Store code calls ``hit("name")`` at each point where a failure matters (before an
fdatasync, while a file is allocated, between two steps of a multi-step write...).
Normally nothing is installed and ``hit`` is one global lookup. A test installs a
plan, in-process with ``install`` or in a child process through the environment
variable ``MQSTORE_FAULTS`` (read once, at import), and the chosen point then either
raises an OSError with the given errno or kills the process with SIGKILL.

Plan syntax, comma-separated rules::

    <point>=<action>[@<nth>][x<times>]

    action  kill | EIO | ENOSPC | EROFS | any errno name
    nth     the first hit that fires (default 1)
    times   how many hits fire from there (default 1; 0 = every one after)

    MQSTORE_FAULTS="commitlog.sync=EIO@3"         the third commitlog sync fails
    MQSTORE_FAULTS="cq.write=kill@10"             SIGKILL at the tenth consume-queue write
    MQSTORE_FAULTS="segment.create=ENOSPCx0"      every segment allocation fails

``hits()`` tells a test how often each point was reached (only while a plan is
installed), so a harness can enumerate the points a workload passes through.
"""

from __future__ import annotations

import errno as errno_mod
import os
import signal
import threading
from dataclasses import dataclass

ENV = "MQSTORE_FAULTS"


@dataclass
class Rule:
    point: str
    action: str  # "kill" or an errno name
    nth: int = 1
    times: int = 1  # 0: every hit from nth on

    def fires(self, count: int) -> bool:
        return count >= self.nth and (self.times == 0 or count < self.nth + self.times)


_plan: dict[str, Rule] | None = None
_counts: dict[str, int] = {}
_lock = threading.Lock()


def parse(spec: str) -> dict[str, Rule]:
    """Rules from the plan syntax in the module docstring; ValueError names a bad rule."""
    rules: dict[str, Rule] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        point, sep, rest = part.partition("=")
        if not sep or not point or not rest:
            raise ValueError(f"fault rule {part!r}: expected <point>=<action>[@<nth>][x<times>]")
        action, times = rest, "1"
        if "x" in rest.split("@")[-1]:
            rest, _, times = rest.rpartition("x")
            action = rest
        action, _, nth = action.partition("@")
        if action != "kill" and not isinstance(getattr(errno_mod, action, None), int):
            raise ValueError(f"fault rule {part!r}: {action!r} is neither kill nor an errno name")
        try:
            rules[point] = Rule(point, action, int(nth or 1), int(times))
        except ValueError:
            raise ValueError(f"fault rule {part!r}: nth and times are integers") from None
    return rules


def install(spec: str | dict[str, Rule] | None) -> None:
    """Install a plan (None or "" removes it) and reset the hit counts."""
    global _plan
    with _lock:
        _plan = (parse(spec) if isinstance(spec, str) else spec) or None
        _counts.clear()


def hits() -> dict[str, int]:
    """How often each point was reached since the plan was installed."""
    with _lock:
        return dict(_counts)


def hit(point: str, path: object = None) -> None:
    """A fault point: does nothing unless an installed rule says this hit fails."""
    if _plan is None:
        return
    with _lock:
        count = _counts[point] = _counts.get(point, 0) + 1
        rule = _plan.get(point)
    if rule is None or not rule.fires(count):
        return
    if rule.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    code = getattr(errno_mod, rule.action)
    raise OSError(code, f"injected {rule.action} at {point}", *(() if path is None else (str(path),)))


if os.environ.get(ENV):
    install(os.environ[ENV])


__all__ = ["ENV", "Rule", "hit", "hits", "install", "parse"]
