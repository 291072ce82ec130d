"""A power cut of a whole served shard, through the real Ray actors. The commitlog,
the two builders and the dispatcher run in the power-loss test mode (every sync
copies what it covered into an image: store/power_loss.py). Under sync flush and
two producers, once acknowledgements came back every actor of the shard is killed
at once (SIGKILL, no restart), the store is replaced by what the syncs made durable
(``faults.power_cut``: the disk keeps no more than it was told to), and
``MessageStore`` opens it: every acknowledged message is there exactly once,
served at its queue offset, and verify finds no error."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from mqstore.store import faults
from mqstore.store.message_store import MessageStore
from mqstore.store.power_loss import PowerImage
from mqstore.store.reads import PullStatus
from tests.integration.crash_workload import verify_errors
from tests.services.helpers import Load, free_port, local_ray, small_config

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.slow, pytest.mark.crash, pytest.mark.timeout(300)]
NS = "mqstore-power"
TOPIC = "PowerCut"


def pulled(store: MessageStore) -> Counter:
    """Every message of TOPIC the reopened store serves, pulled queue by queue, with
    queue offsets from 0 without a hole."""
    out: Counter = Counter()
    for q in range(4):
        offset = 0
        while True:
            p = store.pull(TOPIC, q, offset, max_count=1000)
            if p.status is not PullStatus.FOUND:
                assert p.status in (PullStatus.NO_NEW_MESSAGE, PullStatus.NO_MESSAGE_IN_QUEUE), p.status
                break
            assert [r.queue_offset for r in p.records] == list(range(offset, offset + len(p.records)))
            out.update(r.body for r in p.records)
            offset = p.next_offset
    return out


def test_a_power_cut_of_the_served_shard_loses_nothing_acknowledged(tmp_path: Path):
    from mqstore.services.startup.deployment import start_deployment

    root, image = tmp_path / "store", tmp_path / "image"
    root.mkdir()
    PowerImage(root, image)  # the image starts as the (empty) store, before any actor writes
    env = {faults.POWER_STORE_ENV: str(root), faults.POWER_IMAGE_ENV: str(image)}
    with local_ray(NS, runtime_env={"env_vars": env}):
        dep = start_deployment(root, small_config(), port=free_port(), namespace=NS, internal_host="127.0.0.1")
        assert dep.wait_ready(120)
        load = Load(dep.front_endpoint, TOPIC, threads=2, batch=40)
        deadline = time.monotonic() + 30
        while len(load.acked) < 4000 and time.monotonic() < deadline:
            time.sleep(0.05)
        shard = [dep.shards[0], dep.queue_builders[0], dep.index_builders[0], dep.dispatchers[0]]
        pids = ray.get([a.pid.remote() for a in shard])
        for pid in pids:  # the power goes: every process of the shard at once
            os.kill(pid, signal.SIGKILL)
        for a in shard:
            ray.kill(a, no_restart=True)
        load.stop()
        acked = list(load.acked)
    assert len(acked) >= 1000, "too few acknowledgements: the cut proves little"
    faults.power_cut(root, image)
    with MessageStore(root, small_config()) as s:
        assert not s.commitlog.recovery.clean_shutdown
        served = pulled(s)
    missing = [b for b in acked if served[b] != 1]
    assert not missing, f"{len(missing)} acknowledged messages missing or doubled, e.g. {missing[:3]}"
    assert max(served.values()) == 1
    assert verify_errors(root) == []
    print(f"power cut of the served shard: acknowledged {len(acked)}, served after the cut {len(served)}")
