"""What ``verify`` found: findings for people, and the facts ``repair`` acts on.

A finding is one fact about one place, with a stable ``kind`` (snake_case, e.g.
``cq_tags_mismatch``) that scripts can match on. Severity says what it means:

    error    the store serves wrong or incomplete data, or will lose some when it
             next opens (recovery cuts a valid record, a consumer misses a message)
    warning  the store is not tidy but fixes it on its own when it opens (a torn
             append to cut, records still to dispatch, a config read from .bak)
    info     context (the store is running, it did not shut down cleanly)

One damaged file can produce thousands of identical findings (a wrong tagsCode in
every unit), so the list keeps the first few of each kind and counts the rest.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from mqstore.formats.checkpoint import Checkpoint

QueueKey = tuple[str, int]

LISTED_PER_KIND = 20  # findings of one kind listed in full; the rest are counted


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    """One fact: ``location`` is a path relative to the store, with ``@offset``
    (a byte position in that file) or ``#n`` (a queue offset / entry number) when
    the fact is about one spot in it."""

    kind: str
    severity: Severity
    location: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "severity": self.severity.value, "location": self.location, "detail": self.detail}


@dataclass
class Damage:
    """The facts behind the findings that ``repair`` needs, as values, not text.

    ``commitlog_cut`` is where recovery cuts the commitlog (the first invalid byte
    before the end of written data), None if it ends cleanly; ``records_after_cut``
    are valid records found past that point (cutting loses them).
    """

    commitlog_cut: int | None = None
    records_after_cut: int = 0
    commitlog_unrepairable: list[str] = field(default_factory=list)  # why the store cannot open as it is
    newest_store_timestamp: int = 0
    newest_store_timestamp_below_cut: int = 0
    bad_queues: set[QueueKey] = field(default_factory=set)  # consume queues to rebuild
    queues_not_dispatched: bool = False  # records the next open will dispatch
    index_bad: bool = False  # index files to rebuild
    checkpoint: Checkpoint | None = None  # the checkpoint as read (None: absent or unreadable)
    checkpoint_fix: bool = False  # absent, unreadable or ahead of the data
    # (group, topic, queue id, offset, the queue's max offset)
    consumer_offsets_past_end: list[tuple[str, str, int, int, int]] = field(default_factory=list)
    config_from_bak: list[str] = field(default_factory=list)  # file names the store reads from .bak
    config_unusable: list[str] = field(default_factory=list)  # file names neither readable nor with a usable .bak
    stray_files: list[str] = field(default_factory=list)  # paths (relative to the store) the store ignores forever
    queue_ends_bad: bool = False  # config/queueEnds.bin lists ends the store would trust and that are wrong


class Findings:
    """Collects findings, keeping the first LISTED_PER_KIND of each kind."""

    def __init__(self) -> None:
        self._listed: list[Finding] = []
        self._per_kind: Counter[str] = Counter()
        self._severity: dict[str, Severity] = {}
        self._by_severity: Counter[Severity] = Counter()

    def add(self, kind: str, severity: Severity, location: str, detail: str) -> None:
        self._per_kind[kind] += 1
        self._by_severity[severity] += 1
        self._severity[kind] = max(self._severity.get(kind, Severity.INFO), severity, key=_rank)
        if self._per_kind[kind] <= LISTED_PER_KIND:
            self._listed.append(Finding(kind, severity, location, detail))

    def error(self, kind: str, location: str, detail: str) -> None:
        self.add(kind, Severity.ERROR, location, detail)

    def warning(self, kind: str, location: str, detail: str) -> None:
        self.add(kind, Severity.WARNING, location, detail)

    def info(self, kind: str, location: str, detail: str) -> None:
        self.add(kind, Severity.INFO, location, detail)

    def merge(self, other: Findings) -> None:
        """Take ``other``'s findings as if they had been found here, after these
        (verify's checks that run on a thread of their own collect apart)."""
        seen = Counter(self._per_kind)
        for f in other._listed:
            seen[f.kind] += 1
            if seen[f.kind] <= LISTED_PER_KIND:
                self._listed.append(f)
        self._per_kind.update(other._per_kind)
        self._by_severity.update(other._by_severity)
        for kind, severity in other._severity.items():
            self._severity[kind] = max(self._severity.get(kind, Severity.INFO), severity, key=_rank)

    def count(self, severity: Severity) -> int:
        return self._by_severity[severity]

    def kinds(self) -> dict[str, int]:
        return dict(self._per_kind)

    def listed(self) -> list[Finding]:
        """The findings kept, errors first, then in the order found; a kind with
        more findings than were kept ends with one that says how many more."""
        out = list(self._listed)
        for kind, n in self._per_kind.items():
            if n > LISTED_PER_KIND:
                out.append(
                    Finding(kind, self._severity[kind], "", f"... and {n - LISTED_PER_KIND} more {kind} findings")
                )
        return sorted(out, key=lambda f: _rank(f.severity), reverse=True)


def _rank(s: Severity) -> int:
    return {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}[s]


@dataclass
class VerifyReport:
    """The result of :func:`mqstore.store.verify.verify_store`.

    ``ok`` is True when no finding is an error. ``counts`` holds what was checked
    (segments, records, queues, units, index files and entries, ...) and how many
    findings of each severity there were; ``messages`` and ``bytes`` are the valid
    commitlog records walked and their bytes."""

    store: Path
    findings: list[Finding]
    counts: dict[str, int]
    messages: int
    bytes: int
    seconds: float
    damage: Damage

    @property
    def ok(self) -> bool:
        return not any(f.severity is Severity.ERROR for f in self.findings)

    def of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "findings": [f.to_json() for f in self.findings],
            "counts": self.counts,
            "messages": self.messages,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
        }


__all__ = ["LISTED_PER_KIND", "Damage", "Finding", "Findings", "QueueKey", "Severity", "VerifyReport"]
