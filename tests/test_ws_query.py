"""Websocket queries: the provider's subscriptions (UUID-checked) and the devnet's parser."""

from __future__ import annotations

import pytest

from chain.ws_query import (
    Condition,
    InvalidProviderUUID,
    QueryError,
    parse_query,
    provider_queries,
    validate_provider_uuid,
)

PROVIDER = "019bbef3-b000-7001-b950-1b66216ca536"


def test_provider_queries_are_every_tx_and_every_blocks_end_of_block_events():
    """Two of a node's five: every tx (filtered by the listener), and every block's end-of-block events:
    lease_expired is one (3), and each says how many txs its block held (what finds a dropped tx feed)."""
    assert provider_queries(PROVIDER) == ("tm.event='Tx'", "tm.event='NewBlockEvents'")


def test_built_queries_parse_back_to_their_conditions():
    every_tx, blocks = (parse_query(text) for text in provider_queries(PROVIDER))
    assert every_tx.conditions == (Condition("tm.event", "Tx"),)
    assert blocks.text == provider_queries(PROVIDER)[1]
    assert blocks.conditions == (Condition("tm.event", "NewBlockEvents"),)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "not-a-uuid",
        PROVIDER.upper(),  # the chain emits lowercase: an uppercase query would match nothing
        "{" + PROVIDER + "}",
        "urn:uuid:" + PROVIDER,
        PROVIDER.replace("-", ""),
        PROVIDER + "' OR tm.event='Tx",  # a query injection
        PROVIDER[:-1] + "'",
        PROVIDER + "\n",
    ],
)
def test_a_provider_uuid_that_is_not_a_canonical_uuid_never_reaches_a_query(bad):
    with pytest.raises(InvalidProviderUUID) as err:
        provider_queries(bad)
    assert "provider uuid" in str(err.value)


def test_a_non_string_provider_uuid_is_refused_by_type():
    with pytest.raises(InvalidProviderUUID, match="must be a string"):
        validate_provider_uuid(12345)  # type: ignore[arg-type]


def test_several_conditions_and_spacing():
    q = parse_query("  tm.event = 'Tx'   AND  a.b='x y'AND c-d.e_f=''  ")
    assert q.conditions == (Condition("tm.event", "Tx"), Condition("a.b", "x y"), Condition("c-d.e_f", ""))


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "empty query"),
        ("   ", "empty query"),
        ("tm.event", "expected '='"),
        ("tm.event='Tx' OR a.b='c'", "'OR'"),
        ("tm.event='Tx' AND", "condition after AND"),
        ("tm.event='Tx' a.b='c'", "expected AND"),
        ("tx.height>5", "operator '>'"),
        ("tx.height>=5", "operator '>='"),
        ("tx.height<'5'", "operator '<'"),
        ("a.b!='c'", "operator '!='"),
        ("lease_closed.tenant EXISTS", "'EXISTS'"),
        ("lease_closed.tenant CONTAINS 'man'", "'CONTAINS'"),
        ("tx.height=5", "single-quoted string"),
        ('a.b="c"', "single-quoted string"),
        ("a.b='c", "unterminated"),
        ("a.b='c\x01'", "control character"),
        ("'a'='b'", "event key"),
        ("EXISTS='b'", "not supported"),
        ("a='b' AND " * 17 + "a='b'", "more than 16 conditions"),
        ("a='" + "x" * 2000 + "'", "at most 1024"),
    ],
)
def test_anything_outside_the_subset_is_a_query_error_saying_why(text, words):
    with pytest.raises(QueryError) as err:
        parse_query(text)
    assert words in str(err.value)


def test_a_non_string_query_is_refused():
    with pytest.raises(QueryError, match="must be a string"):
        parse_query(["tm.event='Tx'"])  # type: ignore[arg-type]


def test_matching_needs_every_condition_but_not_in_the_same_event():
    q = parse_query("tm.event='Tx' AND lease_closed.provider_uuid='p1' AND lease_closed.tenant='t2'")
    # p1 on the first lease_closed, t2 on the second: CometBFT conditions are independent.
    index = {
        "tm.event": ["Tx"],
        "lease_closed.provider_uuid": ["p1", "p2"],
        "lease_closed.tenant": ["t1", "t2"],
    }
    assert q.matches(index)
    assert not q.matches({**index, "lease_closed.tenant": ["t1"]})
    assert not q.matches({"tm.event": ["Tx"], "lease_closed.provider_uuid": ["p1"]})
    assert not q.matches({})
