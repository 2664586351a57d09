"""The model's collection paging (``query.CollectionPaginate``) as a walk sees it, forward and back.

The list queries page through an order sorted once (``BillingModel._orders``),
so each page costs its rows, not the whole collection: what a client walks
must still be every row once, in order, however it pages.
"""

from __future__ import annotations

import random

import pytest

from chain.errors import QueryRefused
from chain.model import PageRequest, _collection_page

_RANDOM = random.Random(5)
KEYS = sorted({_RANDOM.randbytes(4) for _ in range(57)})
assert len(KEYS) == 57


def walk(limit: int, reverse: bool) -> list[bytes]:
    seen: list[bytes] = []
    key = b""
    while True:
        rows, key, _ = _collection_page(KEYS, PageRequest(key=key, limit=limit, reverse=reverse))
        seen += [KEYS[i] for i in rows]
        if not key:
            return seen


@pytest.mark.parametrize("limit", [1, 2, 7, 56, 57, 58, 100])
def test_a_walk_by_next_key_answers_every_row_once_in_order_either_way(limit: int) -> None:
    assert walk(limit, reverse=False) == KEYS
    assert walk(limit, reverse=True) == KEYS[::-1]


def test_offsets_keys_between_rows_and_totals() -> None:
    n = len(KEYS)
    for offset in (0, 1, 20, n - 1, n, n + 5):
        rows, next_key, total = _collection_page(KEYS, PageRequest(offset=offset, limit=10, count_total=True))
        assert [KEYS[i] for i in rows] == KEYS[offset : offset + 10] and total == n
        assert next_key == (KEYS[offset + 10] if offset + 10 < n else b"")
        rows, next_key, _ = _collection_page(KEYS, PageRequest(offset=offset, limit=10, reverse=True))
        assert [KEYS[i] for i in rows] == KEYS[::-1][offset : offset + 10]
        assert next_key == (KEYS[::-1][offset + 10] if offset + 10 < n else b"")
    between = KEYS[30] + b"\x00"  # no row has it: forward starts after it, back at or before it
    assert [KEYS[i] for i in _collection_page(KEYS, PageRequest(key=between, limit=3))[0]] == KEYS[31:34]
    assert [KEYS[i] for i in _collection_page(KEYS, PageRequest(key=between, limit=3, reverse=True))[0]] == KEYS[30:27:-1]
    assert _collection_page(KEYS, PageRequest(key=KEYS[5], limit=3, count_total=True))[2] == 0  # a key's page counts nothing
    with pytest.raises(QueryRefused):
        _collection_page(KEYS, PageRequest(key=KEYS[5], offset=2))


def test_a_page_of_the_rows_kept_is_the_page_of_a_collection_of_those_rows_alone() -> None:
    """``DenomOwners`` pages the holders of a denom among every account: as if they were listed alone."""
    kept = {i for i in range(len(KEYS)) if _RANDOM.random() < 0.4}
    alone = [KEYS[i] for i in sorted(kept)]
    probes = [b"", KEYS[0], KEYS[13], KEYS[13] + b"\x00", KEYS[-1], b"\xff" * 5]
    for limit in (1, 3, 10, 100):
        for reverse in (False, True):
            pages = [PageRequest(key=k, limit=limit, reverse=reverse, count_total=True) for k in probes]
            pages += [PageRequest(offset=o, limit=limit, reverse=reverse, count_total=True) for o in (1, 5, 40)]
            for page in pages:
                rows, next_key, total = _collection_page(KEYS, page, lambda i: i in kept)
                want_rows, want_next, want_total = _collection_page(alone, page)
                assert [KEYS[i] for i in rows] == [alone[i] for i in want_rows], page
                assert (next_key, total) == (want_next, want_total), page
