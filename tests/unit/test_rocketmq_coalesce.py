"""Coalescer: concurrent submits under one key share calls; answers split back in
order; a refused merged call is retried part by part, an unknown outcome is not."""

from __future__ import annotations

import asyncio

import pytest

from mqstore.services.common.errors import BadRequest, Unavailable
from mqstore.services.rocketmq.coalesce import Coalescer


def run(coro):
    return asyncio.run(coro)


def test_a_lone_submit_goes_out_at_once_and_concurrent_ones_share_the_next_call():
    calls: list[tuple[str, list[int]]] = []

    async def main():
        release = asyncio.Event()

        async def send(key, items):
            calls.append((key, list(items)))
            if len(calls) == 1:
                await release.wait()  # the first call is in flight while the others arrive
            return [x * 10 for x in items]

        c = Coalescer(send)
        first = asyncio.ensure_future(c.submit("k", [1]))
        await asyncio.sleep(0)
        others = [asyncio.ensure_future(c.submit("k", [i, i + 100])) for i in (2, 3, 4)]
        other_key = asyncio.ensure_future(c.submit("j", [7]))
        await asyncio.sleep(0)
        release.set()
        return await first, await asyncio.gather(*others), await other_key

    first, others, other_key = run(main())
    assert first == [10] and others == [[20, 1020], [30, 1030], [40, 1040]] and other_key == [70]
    assert calls == [("k", [1]), ("j", [7]), ("k", [2, 102, 3, 103, 4, 104])]  # three submits, one call


def _merged_failure(error, refuse_only=None):
    async def main():
        release = asyncio.Event()
        sent: list[list[int]] = []

        async def send(key, items):
            sent.append(list(items))
            if len(sent) == 1:
                await release.wait()
                return [0]
            if len(items) > 1:
                raise error
            if refuse_only is not None and items == [refuse_only]:
                raise BadRequest("this one is bad")
            return [x for x in items]

        c = Coalescer(send)
        first = asyncio.ensure_future(c.submit("k", [0]))
        await asyncio.sleep(0)
        rest = [asyncio.ensure_future(c.submit("k", [i])) for i in (1, 2, 3)]
        await asyncio.sleep(0)
        release.set()
        await first
        return await asyncio.gather(*rest, return_exceptions=True), sent

    return run(main())


def test_a_refused_merged_call_is_tried_part_by_part():
    answers, sent = _merged_failure(BadRequest("one of them is bad"), refuse_only=2)
    assert answers[0] == [1] and answers[2] == [3]
    assert isinstance(answers[1], BadRequest)  # only the bad part fails
    assert sent == [[0], [1, 2, 3], [1], [2], [3]]


def test_a_merged_call_with_an_unknown_outcome_fails_every_part():
    answers, sent = _merged_failure(Unavailable("the shard went away mid-call"))
    assert all(isinstance(a, Unavailable) for a in answers)
    assert sent == [[0], [1, 2, 3]]  # never sent again: it may have been written


@pytest.mark.parametrize("n", [1, 50])
def test_answers_keep_their_order_under_load(n):
    async def main():
        async def send(key, items):
            await asyncio.sleep(0.001)
            return [("done", x) for x in items]

        c = Coalescer(send)
        return await asyncio.gather(*(c.submit("k", [i] * n) for i in range(200)))

    out = run(main())
    assert out == [[("done", i)] * n for i in range(200)]
