"""Affinity routing on plain values: the key, the owner, the spill (no Ray, no model)."""

from __future__ import annotations

import collections
import random

from hypothesis import given
from hypothesis import strategies as st

from slotserver.cluster.affinity import PREFIX_CHARS, ReplicaLoad, choose, rendezvous, routing_key

REPLICAS = [f"replica-{i}" for i in range(4)]


def test_the_session_header_wins_then_the_user_then_the_prompt_start():
    body = {"user": "alice", "messages": [{"role": "user", "content": "hi"}]}
    assert routing_key({"x-session-id": "s1"}, body) == ("session", "s1")
    assert routing_key({}, body) == ("user", "alice")
    kind, key = routing_key({}, {"prompt": "Once upon a time"})
    assert kind == "prefix" and key == routing_key({}, {"prompt": "Once upon a time"})[1]
    assert key != routing_key({}, {"prompt": "Twice upon a time"})[1]


def test_turns_of_one_chat_share_a_key_once_their_start_is_long_enough():
    system = {"role": "system", "content": "You are a careful assistant. " * 12}  # > PREFIX_CHARS
    turn1 = {"messages": [system, {"role": "user", "content": "first question"}]}
    turn2 = {"messages": [system, {"role": "user", "content": "first question"},
                          {"role": "assistant", "content": "an answer"}, {"role": "user", "content": "more"}]}
    assert len(system["content"]) > PREFIX_CHARS
    assert routing_key({}, turn1) == routing_key({}, turn2)
    # a completion prompt that grows turn by turn too
    start = "x" * PREFIX_CHARS
    assert routing_key({}, {"prompt": start + "a"}) == routing_key({}, {"prompt": start + "a b c"})


def test_odd_bodies_still_get_a_key():
    for body in (None, [], "text", {"prompt": [1, 2, 3]}, {"messages": [{"content": [{"type": "text"}]}]},
                 {"prompt": "\ud800"}, {}):
        kind, key = routing_key({}, body)
        assert kind == "prefix" and len(key) == 16


@given(st.text(max_size=40), st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=8, unique=True))
def test_rendezvous_ranks_every_replica_and_removing_one_moves_only_its_keys(key, replicas):
    ranked = rendezvous(key, replicas)
    assert sorted(ranked) == sorted(replicas)
    assert rendezvous(key, list(reversed(replicas))) == ranked  # order of the list does not matter
    if len(replicas) > 1:
        gone = ranked[-1]  # a replica that does not own the key leaves: the owner stays
        assert rendezvous(key, [r for r in replicas if r != gone])[0] == ranked[0]


def test_random_keys_spread_within_twice_the_mean():
    rng = random.Random(7)
    owners = collections.Counter(rendezvous(f"session-{rng.getrandbits(64)}", REPLICAS)[0] for _ in range(4000))
    assert set(owners) == set(REPLICAS)
    assert max(owners.values()) <= 2 * 4000 / len(REPLICAS)


def test_the_owner_serves_while_it_has_an_idle_slot():
    owner = rendezvous("k", REPLICAS)[0]
    loads = [ReplicaLoad(r, 4, 1 if r == owner else 4) for r in REPLICAS]
    assert choose("k", loads) == choose("k", list(reversed(loads)))
    c = choose("k", loads)
    assert c.replica == owner and c.owner == owner and not c.spilled


def test_a_full_owner_spills_to_the_replica_with_the_most_idle_slots():
    ranked = rendezvous("k", REPLICAS)
    idle = {ranked[0]: 0, ranked[1]: 1, ranked[2]: 3, ranked[3]: 3}
    c = choose("k", [ReplicaLoad(r, 4, idle[r]) for r in REPLICAS])
    assert c.spilled and c.owner == ranked[0] and c.replica == ranked[2]  # of equals, the first in key order


def test_when_every_replica_is_full_the_request_waits_at_its_owner():
    c = choose("k", [ReplicaLoad(r, 4, 0) for r in REPLICAS])
    assert c.replica == rendezvous("k", REPLICAS)[0] and not c.spilled
