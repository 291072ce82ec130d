"""The consume-queue servicer checks each topic name of a PutUnits once: names it
passed are kept (a dispatch chunk names thousands again and again); a bad one is
refused every time, wherever it stands among known ones."""

from __future__ import annotations

import pytest

from mqstore.errors import InvalidTopicError
from mqstore.services.index import queue_servicer


def test_known_names_pass_and_bad_names_are_refused_every_time(monkeypatch) -> None:
    monkeypatch.setattr(queue_servicer, "_CHECKED_TOPICS", set())
    calls: list[str] = []
    real = queue_servicer.check_topic
    monkeypatch.setattr(queue_servicer, "check_topic", lambda t: (calls.append(t), real(t)))
    names = [f"BenchTopic{i}" for i in range(3_000)]
    queue_servicer._check_topics(names)
    queue_servicer._check_topics(names[::-1])
    assert sorted(calls) == sorted(names)  # each checked once
    for _ in range(2):
        with pytest.raises(InvalidTopicError):
            queue_servicer._check_topics([*names[:10], "bad topic", *names[10:20]])
    assert "bad topic" not in queue_servicer._CHECKED_TOPICS


def test_the_kept_names_are_bounded(monkeypatch) -> None:
    monkeypatch.setattr(queue_servicer, "_CHECKED_TOPICS", set())
    monkeypatch.setattr(queue_servicer, "_MAX_CHECKED_TOPICS", 100)
    for start in range(0, 1_000, 50):
        queue_servicer._check_topics([f"T{i}" for i in range(start, start + 50)])
        assert len(queue_servicer._CHECKED_TOPICS) <= 150
