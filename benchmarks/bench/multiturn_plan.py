"""What the multi-turn benchmark sends, to which server, in which order. Pure (no HTTP).

A conversation (``benchmarks/bench/workloads_multiturn.json``) is a list of user texts. Turn k's prompt is
turn k-1's prompt, then turn k-1's output as the server generated it in this replay, then user text
k: each configuration replays the conversation on its own outputs, as a client of that server would.

Learned state is shared by every request a server serves: a request with speculation off still
teaches its server's drafters (``DraftChain.begin`` hands the prompt to every drafter, ngram-mod adds
it to its pool, and ``finish`` gives the whole request to the suffix drafter's global structure). A
configuration that ran after another on the same server would draft from the other's outputs, so
every configuration of ours, ``none`` included, names its own server (``--ours NAME=URL``), started
with that configuration's drafters only; compare servers fix their type at start anyway.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from benchmarks.bench.plan import NONE, OURS, Config, request_body, split_named, with_compares

DEFAULT_CONVERSATIONS = Path(__file__).resolve().with_name("workloads_multiturn.json")
PHASES = ("cold", "restart")  # the servers never saw the conversations / restarted from saved files


class Visit(NamedTuple):
    """One configuration replaying one conversation, every turn of it."""

    round: int  # 1-based, within the phase
    conversation: str
    config: str


def load_conversations(path: str | Path = DEFAULT_CONVERSATIONS) -> list[dict]:
    conversations = json.loads(Path(path).read_text(encoding="utf-8"))["conversations"]
    for conv in conversations:
        if not conv.get("turns"):
            raise ValueError(f"{path}: conversation {conv.get('name')!r} has no turns")
    return conversations


def parse_servers(ours: list[str], compares: list[str]) -> list[Config]:
    """Our configurations (``none`` first: the baseline), each on its own server, then the compare
    servers in the order given. An ours NAME is a ``speculative.type`` as in ``bench``
    (``ngram-mod+suffix@expected``)."""
    named = sorted((split_named(s, "--ours") for s in ours), key=lambda nu: nu[0] != NONE)
    configs = with_compares([Config(name, OURS, url) for name, url in named], compares)
    urls = [c.url for c in configs]
    if len(set(urls)) != len(urls):
        raise ValueError("every configuration needs its own server (learned state is shared per server): "
                         + ", ".join(f"{c.name}={c.url}" for c in configs))
    return configs


def visit_order(rounds: int, conversations: list[str], configs: list[str]) -> list[Visit]:
    """Per round and conversation, every configuration replays it in turn; the configuration that
    goes first moves on by one per conversation, so none is always first (or last) on the machine."""
    order = []
    for r in range(1, rounds + 1):
        for i, conv in enumerate(conversations):
            start = ((r - 1) * len(conversations) + i) % len(configs)
            order += [Visit(r, conv, c) for c in configs[start:] + configs[:start]]
    return order


def turn_prompt(user_texts: list[str], outputs: list[str]) -> str:
    """The prompt of turn ``len(outputs)`` (0-based): user text 0, output 0, user text 1, ..., user
    text k. The outputs are the earlier turns' outputs exactly as the server returned them."""
    if len(outputs) >= len(user_texts):
        raise ValueError(f"turn {len(outputs)}: the conversation has {len(user_texts)} turns")
    parts = []
    for user, output in zip(user_texts, outputs):
        parts += [user, output]
    return "".join(parts) + user_texts[len(outputs)]


def turn_body(config: Config, conv: dict, outputs: list[str]) -> dict:
    """The request of the next turn: greedy, no prompt cache, the conversation's ``n_predict`` and
    ``stop`` strings, and our configurations' ``speculative.*`` fields (``bench_plan.request_body``)."""
    turn = {"name": conv["name"], "prompt": turn_prompt(conv["turns"], outputs), "n_predict": conv["n_predict"]}
    body = request_body(config, turn)
    if conv.get("stop"):
        body["stop"] = conv["stop"]
    return body
