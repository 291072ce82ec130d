"""What a reconcile run found: :class:`ReconcileResult` and the :class:`Collector`
the driver gathers findings in (the tasks' TaskFindings merged, capped per kind,
counted exactly)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mqstore.jobs.units import TaskFindings
from mqstore.store.verify.report import Damage

LISTED_PER_KIND = 100_000  # rows of one kind written to the findings dataset; all are counted
SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


@dataclass
class ReconcileResult:
    """What a reconcile found. ``findings`` are rows (kind, severity, location,
    detail, offset: the commitlog offset concerned or -1), at most LISTED_PER_KIND per
    kind; ``by_kind`` and ``by_severity`` count every finding."""

    store: Path
    findings: list[tuple[str, str, str, str, int]]
    by_kind: dict[str, int]
    by_severity: dict[str, int]
    kind_severity: dict[str, str]
    messages: int
    bytes: int
    seconds: float
    counts: dict[str, int]
    in_flight: dict[str, int]
    flushed_offset: int | None
    damage: Damage
    repair: dict | None = None
    output: Path | None = None

    @property
    def errors(self) -> int:
        return self.by_severity.get("error", 0)

    @property
    def ok(self) -> bool:
        return self.errors == 0

    def of_kind(self, kind: str) -> list[tuple[str, str, str, str, int]]:
        return [f for f in self.findings if f[0] == kind]

    def summary(self) -> dict:
        """The content of ``summary.json``."""
        return {
            "store": str(self.store),
            "ok": self.ok,
            "findings": sum(self.by_kind.values()),
            "errors": self.errors,
            "warnings": self.by_severity.get("warning", 0),
            "by_kind": dict(sorted(self.by_kind.items())),
            "by_severity": dict(sorted(self.by_severity.items())),
            "messages": self.messages,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "mb_per_s": round(self.bytes / 1e6 / self.seconds, 1) if self.seconds > 0 else 0.0,
            "flushed_offset": self.flushed_offset,
            "in_flight": self.in_flight,
            "counts": self.counts,
            "repair": self.repair,
        }


class Collector:
    """All findings of a run: rows (capped per kind) and exact counts. Has verify's
    Findings interface (error / warning / info), so verify's driver-side checks
    write into it."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str, int]] = []
        self.by_kind: dict[str, int] = {}
        self.by_severity: dict[str, int] = {}
        self.kind_severity: dict[str, str] = {}
        self._listed: dict[str, int] = {}

    def _count(self, kind: str, sev: str, n: int) -> None:
        self.by_kind[kind] = self.by_kind.get(kind, 0) + n
        self.by_severity[sev] = self.by_severity.get(sev, 0) + n
        if SEVERITY_RANK[sev] >= SEVERITY_RANK[self.kind_severity.get(kind, "info")]:
            self.kind_severity[kind] = sev

    def row(self, kind: str, sev: str, location: str, detail: str, offset: int = -1) -> None:
        self._count(kind, sev, 1)
        n = self._listed.get(kind, 0)
        if n < LISTED_PER_KIND:
            self._listed[kind] = n + 1
            self.rows.append((kind, sev, location, detail, int(offset)))

    def merge(self, tf: TaskFindings, keep=None) -> None:
        """Add a task's findings (``keep(row)`` may drop or rewrite rows: it returns a
        row or None)."""
        if keep is None:
            for (kind, sev), n in tf.counts.items():
                self._count(kind, sev, n)
            for r in tf.rows:
                n = self._listed.get(r[0], 0)
                if n < LISTED_PER_KIND:
                    self._listed[r[0]] = n + 1
                    self.rows.append(r)
            return
        listed: dict[tuple[str, str], int] = {}
        for r in tf.rows:
            listed[(r[0], r[1])] = listed.get((r[0], r[1]), 0) + 1
            out = keep(r)
            if out is not None:
                self.row(*out)
        for key, n in tf.counts.items():  # findings the task counted but did not list
            extra = n - listed.get(key, 0)
            if extra > 0:
                self._count(key[0], key[1], extra)

    # verify's Findings interface, for verify's driver-side checks
    def error(self, kind: str, location: str, detail: str) -> None:
        self.row(kind, "error", location, detail)

    def warning(self, kind: str, location: str, detail: str) -> None:
        self.row(kind, "warning", location, detail)

    def info(self, kind: str, location: str, detail: str) -> None:
        self.row(kind, "info", location, detail)


__all__ = ["LISTED_PER_KIND", "SEVERITY_RANK", "Collector", "ReconcileResult"]
