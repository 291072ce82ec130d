"""Which tier runs, and how many hypothesis examples a property test takes in it.

The fast tier (``-m "not slow and not crash"``, tests/README.md) runs in two worker
processes (pytest-xdist, one per core) and gives each property test a tenth of its
examples (at least 10): a quick check of what a change most often breaks. The full suite (CI) runs
one process and every example. ``tests/conftest.py`` sets ``FAST``.
"""

from __future__ import annotations

FAST_TIER_EXPRESSION = "not slow and not crash"
FAST = False


def is_fast_tier(markexpr: str) -> bool:
    return " ".join(markexpr.split()) == FAST_TIER_EXPRESSION


def examples(n: int) -> int:
    """``max_examples`` for a property test: ``n`` in the full suite, ``n // 10`` (at
    least 10) in the fast tier (a fifth, at least 20, had the tier at its 2-minute
    bound, the slowest property tests 5-18 s each under load)."""
    return max(10, n // 10) if FAST else n
