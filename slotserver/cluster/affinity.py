"""Which replica serves a request: the owner of its routing key, unless the owner is full.

A conversation's turns share a long prompt prefix, and the replica that served the last turn still
holds it in a slot's KV cache (and its drafters have learned the conversation), so every turn of one
conversation should reach the same replica. The key is, in order: the ``x-session-id`` header (Ray
Serve's own session header), the body's ``user`` (OpenAI's field for the end user), else a hash of
the prompt's first ``PREFIX_CHARS`` characters, so turns of a conversation without either still
meet. The owner is the replica with the highest rendezvous score for the key (hash of key and
replica): every router agrees without shared state, and a replica that leaves moves only its own
keys.

The owner is passed over only when it has no idle slot while another replica has one: the request
would wait at the owner but run at once elsewhere (the spill). With no idle slot anywhere it waits
at the owner, where its prefix is.

Pure functions over plain values (no Ray here): the router (``router.py``) adapts them to Ray
Serve's ``RequestRouter``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Mapping, Sequence

SESSION_HEADER = "x-session-id"
PREFIX_CHARS = 256  # the prompt start hashed when there is no session: a chat's system + first user turn


def _prompt_start(body: Mapping) -> str:
    """The first characters of what the request asks the model to continue, whatever its API."""
    for field in ("prompt", "input_prefix", "input", "messages", "system"):
        value = body.get(field)
        if value is None or value == "" or value == []:
            continue
        if field == "messages" and isinstance(value, list):  # turn by turn: later turns append
            parts = []
            for message in value:
                content = message.get("content") if isinstance(message, dict) else message
                parts.append(content if isinstance(content, str) else json.dumps(content, sort_keys=True))
                if sum(len(p) for p in parts) >= PREFIX_CHARS:
                    break
            value = "\n".join(parts)
        elif not isinstance(value, str):
            value = json.dumps(value, sort_keys=True)
        return value[:PREFIX_CHARS]
    return ""


def routing_key(headers: Mapping[str, str], body: object) -> tuple[str, str]:
    """``(kind, key)``: kind is ``session``, ``user`` or ``prefix``."""
    session = headers.get(SESSION_HEADER) or headers.get(SESSION_HEADER.title())
    if session:
        return "session", session
    if isinstance(body, Mapping):
        user = body.get("user")
        if isinstance(user, str) and user:
            return "user", user
        start = _prompt_start(body)
    else:
        start = ""
    return "prefix", hashlib.blake2b(start.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


def rendezvous(key: str, replicas: Sequence[str]) -> list[str]:
    """``replicas`` ranked for ``key``, owner first (highest random weight; ties by name)."""
    def score(replica: str) -> bytes:
        return hashlib.blake2b(f"{key}\0{replica}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return sorted(replicas, key=lambda r: (score(r), r), reverse=True)


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """What a replica last reported (``/slots`` of its server): slots in all, and idle ones."""

    replica: str
    n_slots: int = 0
    n_idle: int = 0


@dataclass(frozen=True, slots=True)
class Choice:
    replica: str
    owner: str  # the key's owner: equal to ``replica`` unless the request spilled
    spilled: bool


def choose(key: str, loads: Sequence[ReplicaLoad]) -> Choice:
    """The replica for ``key`` among ``loads`` (not empty): the owner, unless it has no idle slot
    while another has some; then the one with the most idle slots (ties: the next in key order)."""
    if not loads:
        raise ValueError("no replica to choose from")
    by_name = {load.replica: load for load in loads}
    ranked = rendezvous(key, list(by_name))
    owner = ranked[0]
    if by_name[owner].n_idle > 0:
        return Choice(owner, owner, False)
    best = max(ranked, key=lambda r: by_name[r].n_idle)  # max keeps the first of equals: key order
    if by_name[best].n_idle > 0:
        return Choice(best, owner, True)
    return Choice(owner, owner, False)
