"""Reconcile's planning, on the driver, before any Spark work: the store and output
directories checked, then (:func:`plan`) the checkpoint-independent facts the jobs
need, from directory listings and a few headers: the layout, the store type (queue
files, or one RocksDB: see store_type.py), the segment names, the chunks (a segment, or the part of one whose records start in [lo, hi), chunk_bytes
each; the last segment with data is chunked up to where its data seems to end), the
queues and the index files; and whether chunk tasks read their units from the queue
files or get them shuffled (``Plan.chunks_read_queues``, QUEUES_READ_BY_CHUNKS)."""

from __future__ import annotations

import dataclasses
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mqstore.errors import ConfigError
from mqstore.jobs.chunks import DEFAULT_CHUNK_BYTES, segment_chunks
from mqstore.jobs.reconcile.result import LISTED_PER_KIND
from mqstore.jobs.units import READ_THREADS, ChunkSpec, TaskFindings
from mqstore.store.commitlog import COMMITLOG_DIR
from mqstore.store.config import STORE_TYPE_DEFAULT, STORE_TYPE_ROCKSDB, StoreConfig
from mqstore.store.consume_queues import CONSUME_QUEUE_DIR
from mqstore.store.layout import LAYOUT_FILE, layout_for_reading
from mqstore.store.lockfile import ABORT_FILE, lock_holder
from mqstore.store.reader import CommitLogReader
from mqstore.store.store_type import store_type_for_reading
from mqstore.store.verify.index import index_files
from mqstore.store.verify.records import RecordWalk
from mqstore.store.verify.report import Damage

# Queues up to which chunk tasks read the units that point into their chunk from the
# queue files themselves: a search and a read of each file that holds some, so a
# chunk task's reads grow with the queues, where the units shuffle (the other way)
# costs the same per unit whatever the queues. Measured CPU on local[2], 128 B
# messages, 64 MiB chunks: 16 queues (3.6 M units), reading 20-30% less than the
# shuffle (50-70% in a session's first run); 4,000 queues (1 M units), the same; at
# 40,000 queues every chunk task opening every queue file was most of the job.
QUEUES_READ_BY_CHUNKS = 1_000


class NotAStoreError(FileNotFoundError):
    """The directory holds no store."""


@dataclass
class Plan:
    """What the jobs work on: the store's layout, its segments and their chunks, the
    queues and index files, and the findings made while listing them (``pre``,
    ``pre_damage``)."""

    store: Path
    cfg: StoreConfig
    running: bool
    clean: bool
    segments: list[tuple[int, Path]]
    chunks: list[ChunkSpec]
    queues: list[tuple[str, int]]
    index_paths: list[Path]
    min_offset: int
    commitlog_bytes: int
    pre: TaskFindings = field(default_factory=TaskFindings)
    pre_damage: Damage = field(default_factory=Damage)
    store_type: str = STORE_TYPE_DEFAULT  # defaultRocksDB: every queue in one RocksDB, none listed here

    @property
    def rocks(self) -> bool:
        return self.store_type == STORE_TYPE_ROCKSDB

    @property
    def chunks_read_queues(self) -> bool:
        """Whether each chunk task reads the units that point into its chunk from the
        queue files itself (few queues: QUEUES_READ_BY_CHUNKS), or the queue tasks
        shuffle them to it (many queues, or one RocksDB)."""
        return not self.rocks and len(self.queues) <= QUEUES_READ_BY_CHUNKS


def check_store_dir(store: str | Path) -> Path:
    """The store directory, or NotAStoreError (before any Spark work)."""
    path = Path(store)
    if not (path / COMMITLOG_DIR).is_dir():
        raise NotAStoreError(f"no store at {path} (it has no {COMMITLOG_DIR}/ directory)")
    return path


def check_output_dir(output: str | Path) -> Path:
    """Create ``output`` if needed and make sure files can be written there
    (OSError / NotADirectoryError otherwise, before any Spark work)."""
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"output {path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".mqstore-probe-{time.time_ns()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise OSError(f"cannot write to output {path}: {e.strerror or e}") from e
    return path


def plan(store: Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Plan:
    """Everything the jobs need to know, from directory listings and a few headers."""
    pre, damage = TaskFindings(cap=LISTED_PER_KIND), Damage()
    holder = lock_holder(store)
    running = holder is not None
    if running:
        pre.info(
            "store_running",
            "lock",
            f"the store is open in process {holder or '(another namespace)'}; "
            "reconcile reads the files as they are now",
        )
    elif (store / ABORT_FILE).exists():
        pre.info("unclean_shutdown", ABORT_FILE, "the store did not shut down cleanly; it recovers when it next opens")
    try:
        cfg = layout_for_reading(store)
    except ConfigError as e:
        pre.error("layout_unreadable", str(LAYOUT_FILE), f"{e}; the store refuses to open")
        cfg = StoreConfig()
    segs = CommitLogReader(store).segments
    walker = RecordWalk(store, cfg.segment_bytes, pre, damage, index_sample=(0, 0), running=running)
    walker.check_segment_names(segs)
    segs = [(b, p) for b, p in segs if p.exists() and p.stat().st_size > 0]
    pieces, total = segment_chunks(segs, chunk_bytes)
    chunks = [
        ChunkSpec(k, str(c.path), c.base, c.lo, c.hi, cfg.segment_bytes, last=c.last, after_data=c.after_data)
        for k, c in enumerate(pieces)
    ]
    if chunks:
        chunks[-1] = dataclasses.replace(chunks[-1], open_end=True)
    store_type = store_type_for_reading(store)
    queues = [] if store_type == STORE_TYPE_ROCKSDB else _list_queues(store, pre, damage)
    idx = index_files(store) or []
    _stray_index_files(store, idx, pre, damage)
    return Plan(
        store,
        cfg,
        running,
        not (store / ABORT_FILE).exists() or running,
        segs,
        chunks,
        queues,
        idx,
        segs[0][0] if segs else 0,
        total,
        pre,
        damage,
        store_type,
    )


def _list_queues(store: Path, findings: TaskFindings, damage: Damage) -> list[tuple[str, int]]:
    """(topic, queue id) of every queue directory, sorted, stray names reported as
    verify's queue_dirs does. A directory entry's type from the listing itself (no
    stat per queue: 400,000 of them took most of a minute on a cold cache)."""
    from mqstore.errors import InvalidTopicError
    from mqstore.formats.names import check_topic
    from mqstore.store.verify.queues import MAX_QUEUE_ID

    root = store / CONSUME_QUEUE_DIR
    out: list[tuple[str, int]] = []
    if not root.is_dir():
        return out

    def stray(rel: str, what: str) -> None:
        findings.warning("cq_stray_file", rel, what)
        damage.stray_files.append(rel)

    def topic_dir(t: os.DirEntry) -> list[os.DirEntry] | None:
        try:
            check_topic(t.name)
            if not t.is_dir():
                raise InvalidTopicError("not a directory")
        except InvalidTopicError:
            return None
        with os.scandir(t.path) as it:
            return sorted(it, key=lambda e: e.name)

    with os.scandir(root) as it:
        topics = sorted(it, key=lambda e: e.name)
    # Listings in flight: at 100,000 topics they wait on the disk, not on the CPU.
    with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="queue-list") as pool:
        listed = list(pool.map(topic_dir, topics))
    for t, entries in zip(topics, listed):
        if entries is None:
            stray(f"{CONSUME_QUEUE_DIR}/{t.name}", "not a topic directory; the store ignores it")
            continue
        for q in entries:
            name = q.name
            if not (q.is_dir() and name.isdigit() and name.isascii() and int(name) <= MAX_QUEUE_ID):
                stray(f"{CONSUME_QUEUE_DIR}/{t.name}/{name}", "not a queue directory; the store ignores it")
                continue
            out.append((t.name, int(name)))
    return out


def _stray_index_files(store: Path, files: list[Path], findings: TaskFindings, damage: Damage) -> None:
    from mqstore.store.index_service import INDEX_DIR

    d = store / INDEX_DIR
    if not d.is_dir():
        return
    for p in sorted(d.iterdir()):
        if p not in files:
            tmp = p.name.endswith(".tmp")
            what = (
                "an unfinished file; the store removes it on open" if tmp else "not an index file; the store ignores it"
            )
            findings.warning("index_stray_file", f"{INDEX_DIR}/{p.name}", what)
            if not tmp:
                damage.stray_files.append(f"{INDEX_DIR}/{p.name}")


QUEUES_PER_GROUP = 20_000  # at most, about: a task's share of a many-queue store
WEIGHED_QUEUES = 10_000  # up to this many queues, groups are balanced by their files


def queue_groups(store: Path, queues: list[tuple[str, int]], groups: int) -> list[list[tuple[str, int]]]:
    """Queues in about ``groups`` groups (more for many queues, QUEUES_PER_GROUP
    each at most) of similar size on disk: the consume-queue tasks of the first job.
    Sizes are file counts, listed for up to WEIGHED_QUEUES queues; past that, queues
    are dealt round-robin (listing 400,000 directories on the driver took minutes,
    and among so many the sizes even out)."""
    if not queues:
        return []
    groups = max(1, min(max(groups, -(-len(queues) // QUEUES_PER_GROUP)), len(queues)))
    if len(queues) > WEIGHED_QUEUES:
        return [queues[g::groups] for g in range(groups)]
    weights = []
    for topic, qid in queues:
        try:
            weights.append(max(1, sum(1 for _ in (store / CONSUME_QUEUE_DIR / topic / str(qid)).iterdir())))
        except OSError:
            weights.append(1)
    out: list[list[tuple[str, int]]] = [[] for _ in range(groups)]
    load = [0] * groups
    for i in sorted(range(len(queues)), key=lambda i: -weights[i]):
        g = load.index(min(load))
        out[g].append(queues[i])
        load[g] += weights[i]
    return [g for g in out if g]


__all__ = [
    "QUEUES_READ_BY_CHUNKS",
    "DEFAULT_CHUNK_BYTES",
    "NotAStoreError",
    "Plan",
    "check_output_dir",
    "check_store_dir",
    "plan",
    "queue_groups",
]
