"""``bench append --passes`` and ``--shape`` in process (small counts): each pass's
figures, the warm pass on the queues the cold one made, memory per queue."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqstore.bench.append import AppendBench, pass_fields, run_append_bench
from mqstore.store.config import StoreConfig
from mqstore.store.message_store import MessageStore


def _bench(store: Path, **kw) -> dict:
    return run_append_bench(
        AppendBench(
            store=store,
            messages=600,
            topics=5,
            queues=2,
            batch=100,
            segment_bytes=1 << 20,
            index_hash_slots=1000,
            index_max_entries=4000,
            **kw,
        )
    )


@pytest.mark.parametrize("shape", ["round-robin", "per-topic"])
def test_two_passes_send_the_same_messages_twice_and_report_each(tmp_path: Path, shape: str) -> None:
    out = _bench(tmp_path / "s", passes=2, shape=shape)
    assert out["shape"] == shape and out["messages"] == 600 and out["queues_touched"] == 10
    assert [p["pass"] for p in out["passes"]] == [1, 2]
    for p in out["passes"]:
        assert set(p) == set(pass_fields)
        assert p["acked"] == 600 and p["dispatch_lag_bytes_at_end"] >= 0
        assert p["rss_mb_after"] > 0 and p["rss_anon_mb_before"] > 0
    first = out["passes"][0]
    assert all(out[k] == first[k] for k in pass_fields if k != "pass")  # the top level is pass 1
    with MessageStore(tmp_path / "s", StoreConfig(default_queue_nums=2)) as s:
        ends = s.consume_queues.ends()
    assert set(ends) == {(f"BenchTopic{t}", q) for t in range(5) for q in range(2)}
    assert sum(ends.values()) == 1200


def test_one_pass_keeps_the_old_fields_and_has_no_passes_list(tmp_path: Path) -> None:
    out = _bench(tmp_path / "s")
    assert "passes" not in out and out["acked"] == 600 and out["shape"] == "round-robin"
    for field in ("seconds", "msgs_per_s", "dispatch_catch_up_seconds", "max_rss_mb", "rss_anon_kb_per_queue"):
        assert field in out


def test_rejects_an_unknown_shape_and_zero_passes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="shape"):
        AppendBench(store=tmp_path, messages=1, shape="zigzag")
    with pytest.raises(ValueError, match="passes"):
        AppendBench(store=tmp_path, messages=1, passes=0)
