"""bench consume --server waits for the dispatcher before listing the queues' ends."""

from __future__ import annotations

from types import SimpleNamespace

from mqstore.bench.remote import wait_dispatched


class _Front:
    def __init__(self, statuses: list[list[tuple[str, int, int]]]) -> None:
        self.statuses = statuses
        self.calls = 0

    def store_status(self) -> list[SimpleNamespace]:
        s = self.statuses[min(self.calls, len(self.statuses) - 1)]
        self.calls += 1
        return [SimpleNamespace(state=st, wrote_offset=w, dispatched_offset=d) for st, w, d in s]


def test_waits_until_every_shard_dispatched_what_it_wrote() -> None:
    front = _Front(
        [
            [("SERVING", 100, 50), ("SERVING", 10, 10)],
            [("RECOVERING", 100, 100), ("SERVING", 10, 10)],
            [("SERVING", 100, 100), ("SERVING", 10, 10)],
        ]
    )
    caught_up, _ = wait_dispatched(front, timeout=10)  # type: ignore[arg-type]
    assert caught_up and front.calls == 3


def test_gives_up_after_the_timeout() -> None:
    front = _Front([[("SERVING", 100, 50)]])
    caught_up, waited = wait_dispatched(front, timeout=0.1)  # type: ignore[arg-type]
    assert not caught_up and waited >= 0.1
