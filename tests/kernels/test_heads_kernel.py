"""The compiled head check of encoded records (``_scan.check_heads``) held to its Python model."""

from __future__ import annotations

import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mqstore.formats.msgid import Host
from mqstore.kernels import _scan
from mqstore.store.config import StoreConfig
from mqstore.store.messages import MessageBatch
from mqstore.store.record_batch import BatchEncoder, encode_for_send
from tests.kernels.model_heads import model_check_heads
from tests.tiers import examples


class _Clock:
    def now_ms(self) -> int:
        return 1

    def monotonic(self) -> float:
        return 0.0


STORES = (Host("10.0.0.1", 10911), Host("::1", 10911))
BORN = (-(2**63), -1, 0, 1, 1 << 40, 2**63 - 1)  # bounds and times at and around them
ENCODERS = {h: BatchEncoder(StoreConfig(store_host=h), _Clock()) for h in STORES}  # made outside the strategy


@st.composite
def cases(draw: st.DrawFn):
    n = draw(st.integers(1, 8))
    store = draw(st.sampled_from(STORES))
    bodies = draw(st.lists(st.binary(max_size=200), min_size=n, max_size=n))
    born = draw(st.lists(st.sampled_from([Host("10.0.0.2", 1), Host("::2", 65535)]), min_size=n, max_size=n))
    enc = encode_for_send(
        ENCODERS[store],
        MessageBatch("T", bodies, born_hosts=born, unique_keys=["U" * 32] * n),
    )
    data = bytearray(enc.data)
    positions = np.concatenate([[0], np.cumsum(enc.sizes)[:-1]]).astype(np.int64)
    sysflags = np.array([(0x10 if ":" in h.address else 0) | (0x20 if ":" in store.address else 0) for h in born])
    for i in draw(st.lists(st.integers(0, n - 1), max_size=2)):  # some born ports patched out of range
        b = 20 if sysflags[i] & 0x10 else 8
        struct.pack_into(">i", data, int(positions[i]) + 48 + b - 4, draw(st.sampled_from([-1, 65536, 2**31 - 1])))
    for i in draw(st.lists(st.integers(0, n - 1), max_size=2)):  # some born times patched anywhere
        struct.pack_into(
            ">q", data, int(positions[i]) + 40, draw(st.integers(-(2**63), 2**63 - 1) | st.sampled_from(BORN))
        )
    limits = (
        draw(st.booleans()),
        draw(st.integers(0, 250)),
        draw(st.integers(90, 600)),
        *sorted(draw(st.lists(st.sampled_from(BORN), min_size=2, max_size=2))),
    )
    return bytes(data), positions, np.asarray(enc.sizes, np.int64), sysflags.astype(np.int64), limits


@settings(max_examples=examples(200), deadline=None)
@given(cases())
def test_kernel_equals_model(case) -> None:
    data, positions, sizes, sysflags, (v6, max_body, max_size, min_born, max_born) = case
    got = _scan.check_heads(data, positions, sizes, sysflags, v6, max_body, max_size, min_born, max_born)
    assert got == model_check_heads(data, positions, sizes, sysflags, v6, max_body, max_size, min_born, max_born)
