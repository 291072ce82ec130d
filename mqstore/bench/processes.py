"""The processes of a running deployment, as ``bench soak`` watches them: every
process under ``mqstore serve`` (Ray's daemons, its idle workers and the actors),
what each one is, its resident memory (and how much of it is anonymous), and which one holds a given actor.

Ray titles an actor's worker process after its class (``ray::CommitLogActor``, or
``ray::CommitLogActor.<method>`` while a method runs, ``ray::<name>:<class>`` for a
while after a restart); front k of ``serve --fronts N`` is told by its event-loop
thread's kernel name ``mqfront-<k>`` (query/host.py), labelled "front" (k = 0) or
"front-<k>"; the shard an actor serves is
told by the files it holds: a commitlog holds ``<shard>/lock``, the builders
``<shard>/lock.consumequeue`` and ``<shard>/lock.index``, a dispatcher maps the
shard's commitlog segments (``<shard>/commitlog/...``) read-only. Processes are read
with psutil when it is installed, else from ``/proc`` (Linux).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

try:
    import psutil
except ImportError:  # pragma: no cover - psutil comes with the test extra and Ray's dashboard
    psutil = None

ROLES = ("commitlog", "dispatcher", "consumequeue", "index", "front")
_ACTOR_CLASSES = {
    "CommitLogActor": "commitlog",
    "DispatcherActor": "dispatcher",
    "BuilderActor": "builder",  # consumequeue or index: told by its lock file
    "FrontActor": "front",
}
_PAGE = os.sysconf("SC_PAGE_SIZE")
_FRONT_THREAD = "mqfront-"  # query/host.py FRONT_THREAD (not imported: that pulls in gRPC)


@dataclass(frozen=True)
class Proc:
    pid: int
    label: str  # "commitlog-0", "front", "serve", "raylet", "ray::IDLE", ... (unique within a listing)
    rss: int  # resident bytes
    anon: int  # of which anonymous (heap, stacks): what a leak grows; the rest is mapped files


def _tree_psutil(root: int) -> list[int]:
    p = psutil.Process(root)
    return [root] + [c.pid for c in p.children(recursive=True)]


def _tree_proc(root: int) -> list[int]:
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            parent[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])  # the title may hold spaces and parens
    if root not in parent:
        raise ProcessLookupError(root)
    out, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, pp in parent.items() if pp in frontier]
        out += frontier
    return out


def _cmdline(pid: int) -> list[str]:
    if psutil is not None:
        return psutil.Process(pid).cmdline()
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]


def _memory(pid: int) -> tuple[int, int]:
    """(resident bytes, of which anonymous): the rest is file-backed or shared, such
    as the pages of the commitlog segments a process maps, which the kernel may drop."""
    if psutil is not None:
        m = psutil.Process(pid).memory_info()
        return m.rss, m.rss - m.shared
    with open(f"/proc/{pid}/statm") as f:
        resident, shared = (int(x) * _PAGE for x in f.read().split()[1:3])
    return resident, resident - shared


def _open_paths(pid: int) -> list[str]:
    if psutil is not None:
        return [f.path for f in psutil.Process(pid).open_files()]
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return out


def _mapped_paths(pid: int) -> list[str]:
    if psutil is not None:
        return [m.path for m in psutil.Process(pid).memory_maps(grouped=True)]
    with open(f"/proc/{pid}/maps") as f:
        return [line.split(maxsplit=5)[5].strip() for line in f if len(line.split(maxsplit=5)) == 6]


def _gone() -> tuple[type[BaseException], ...]:
    return (OSError,) if psutil is None else (OSError, psutil.Error)


def _shard_of(paths: list[str], shard_dirs: list[Path], name: str) -> int | None:
    """The shard whose ``<dir>/<name>`` (a file, or a directory's contents) is in ``paths``."""
    for i, d in enumerate(shard_dirs):
        want = str(d / name)
        if any(p == want or p.startswith(want + "/") for p in paths):
            return i
    return None


def _label(pid: int, root: int, shard_dirs: list[Path]) -> str:
    if pid == root:
        return "serve"
    argv = _cmdline(pid)
    title = " ".join(argv)
    if "ray::" in title:
        rest = title.split("ray::", 1)[1].split()
        cls = rest[0].split(".")[0].rsplit(":", 1)[-1] if rest else "?"  # ray::[<name>:]<class>[.<method>]
        role = _ACTOR_CLASSES.get(cls)
        if role is None:
            return f"ray::{cls}"
        if role == "front":
            return front_label(_front_index(pid))
        shard = None
        if role == "commitlog":
            shard = _shard_of(_open_paths(pid), shard_dirs, "lock")
        elif role == "builder":
            paths = _open_paths(pid)
            for kind in ("consumequeue", "index"):
                shard = _shard_of(paths, shard_dirs, f"lock.{kind}")
                if shard is not None:
                    role = kind
                    break
        elif role == "dispatcher":
            shard = _shard_of(_mapped_paths(pid), shard_dirs, "commitlog")
            if shard is None and len(shard_dirs) == 1:
                shard = 0
        return f"{role}-{'?' if shard is None else shard}"
    if not argv:
        return "?"
    exe = Path(argv[0]).name
    if exe.startswith("python") and len(argv) > 1:  # Ray's Python daemons: monitor.py, dashboard.py, log_monitor.py
        script = next((a for a in argv[1:] if a.endswith(".py")), argv[1])
        return Path(script).stem
    return exe


def front_label(k: int | None) -> str:
    """Front ``k``'s label: its actor's name ("front", "front-1", ...); "front" when unknown."""
    return "front" if not k else f"front-{k}"


def _front_index(pid: int) -> int | None:
    """Which front the process is (its ``mqfront-<k>`` thread), None if none says."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if name.startswith(_FRONT_THREAD) and name[len(_FRONT_THREAD) :].isdigit():
            return int(name[len(_FRONT_THREAD) :])
    return None


def deployment_processes(root_pid: int, shard_dirs: list[Path]) -> list[Proc]:
    """Every live process from ``root_pid`` (``mqstore serve``) down, labelled; a
    label shared by several processes (Ray's idle workers) gets ``#2``, ``#3``, ...
    in pid order. Raises ProcessLookupError if ``root_pid`` is gone."""
    shard_dirs = [Path(d).resolve() for d in shard_dirs]
    try:
        pids = _tree_psutil(root_pid) if psutil is not None else _tree_proc(root_pid)
    except _gone() as e:
        raise ProcessLookupError(root_pid) from e
    found = []
    for pid in sorted(pids):
        try:
            found.append((pid, _label(pid, root_pid, shard_dirs), *_memory(pid)))
        except _gone():  # exited meanwhile
            continue
    seen: Counter[str] = Counter()
    out = []
    for pid, label, rss, anon in found:
        seen[label] += 1
        out.append(Proc(pid, label if seen[label] == 1 else f"{label}#{seen[label]}", rss, anon))
    return out


def actor_pid(root_pid: int, shard_dirs: list[Path], role: str, shard: int = 0, *, front: int = 0) -> int | None:
    """The pid of ``role``'s actor (one of ROLES) of ``shard`` (the front: front
    ``front`` of ``serve --fronts N``, whatever ``shard``), or None while there is none
    (it is restarting, or not open yet)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    want = front_label(front) if role == "front" else f"{role}-{shard}"
    for p in deployment_processes(root_pid, shard_dirs):
        if p.label == want:
            return p.pid
    return None


__all__ = ["ROLES", "Proc", "actor_pid", "deployment_processes", "front_label"]
