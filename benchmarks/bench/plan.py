"""What the benchmark measures and in which order: configurations, request bodies, the visit order.

Pure (no HTTP), so the order every configuration sees the machine in is tested without a server.

A configuration is one column of the report:

- ours: our server with a per-request ``speculative.type`` (``+`` joins types that draft together;
  ``@precedence`` or ``@expected`` after them sets ``speculative.select``);
- ``oracle``: our server drafting from the expected greedy continuation (``speculative.oracle``,
  a server started with ``--spec-oracle``), the ceiling a perfect drafter reaches; it takes its
  tokens from the same workload's ``none`` run, so ``none`` runs before it;
- own (``--ours NAME=URL``): ours on a server of its own, its speculative types fixed at its start
  and no ``speculative.*`` field sent. What its drafters learn (pools, suffix structure,
  estimates) comes from its own requests only, so round 1 is really cold for it: on a shared
  server every drafter also learns from the other configurations' runs of the same workload
  (``none`` runs first), and "cold" is then warm;
- compare: another server speaking llama-server's ``/completion`` whose speculative type was fixed
  at its start; it gets no ``speculative.*`` field.

Every configuration of a workload runs back to back, ours and the compare servers alike, so a ratio
is measured under the same machine load.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

NONE = "none"
ORACLE = "oracle"
OURS, OWN, COMPARE = "ours", "own", "compare"  # Config.kind; the oracle is ours with kind ORACLE


@dataclass(frozen=True)
class Config:
    name: str  # the report's column label
    kind: str  # OURS, ORACLE or COMPARE
    url: str

    @property
    def is_ours(self) -> bool:
        return self.kind in (OURS, OWN, ORACLE)

    @property
    def is_spec(self) -> bool:
        """One of our speculative types: a candidate for "ours, best speculative type". A server of
        our own named ``none-...`` serves without speculation too: a noise control, whose ratio to
        ``none`` is what two runs of the same thing differ by on this machine."""
        return self.kind in (OURS, OWN) and self.name != NONE and not self.name.startswith(NONE + "-")


class Visit(NamedTuple):
    round: int  # 1-based; round 1 is cold
    streams: int  # 1: one request of ``workload``; N > 1: the mixed batch with N in flight
    workload: str | None  # None for a mixed batch
    config: str


def split_named(spec: str, flag: str) -> tuple[str, str]:
    """``NAME=URL`` of ``--compare`` (and the multi-turn bench's ``--ours``)."""
    name, sep, url = spec.partition("=")
    if not sep or not name or not url:
        raise ValueError(f"{flag} takes NAME=URL, not {spec!r}")
    return name, url


def parse_configs(url: str, types: str, compares: Sequence[str], own: Sequence[str] = ()) -> list[Config]:
    """Configurations from ``--types`` (comma list, ``oracle`` among them), ``--ours NAME=URL`` and
    ``--compare NAME=URL``: ``none`` first (the baseline, and the oracle's source), then the other
    types, then our servers of their own, then the compare servers, in the order given."""
    names = [t for t in types.split(",") if t]
    if ORACLE in names and NONE not in names:
        raise ValueError("'oracle' drafts from the 'none' run's tokens: add 'none' to --types")
    ours = sorted(names, key=lambda t: t != NONE)  # stable: the rest keep their order
    ours_own = [Config(name, OWN, u) for name, u in (split_named(s, "--ours") for s in own)]
    return with_compares([Config(t, ORACLE if t == ORACLE else OURS, url) for t in ours] + ours_own, compares)


def with_compares(ours: list[Config], compares: list[str]) -> list[Config]:
    """``ours``, then a configuration per ``--compare NAME=URL`` in the order given; names must differ."""
    configs = ours + [Config(name, COMPARE, url) for name, url in (split_named(s, "--compare") for s in compares)]
    seen = [c.name for c in configs]
    if len(set(seen)) != len(seen):
        raise ValueError(f"configuration names must differ: {', '.join(seen)}")
    return configs


def visit_order(rounds: int, workloads: list[str], configs: list[str], streams: list[int]) -> list[Visit]:
    """Per round: every workload alone, each configuration once in turn; then per stream count
    N > 1 each configuration's mixed batch in turn."""
    order = []
    for r in range(1, rounds + 1):
        order += [Visit(r, 1, w, c) for w in workloads for c in configs]
        order += [Visit(r, n, None, c) for n in streams if n > 1 for c in configs]
    return order


def stream_mix(workloads: list[dict], streams: int) -> list[dict]:
    """The batch of a concurrent run: 2N requests (so every stream takes a second request while
    others still run), workloads in turn."""
    return [workloads[i % len(workloads)] for i in range(2 * streams)]


def request_body(config: Config, wl: dict, oracle_tokens: list[int] | None = None) -> dict:
    """Greedy, no prompt cache (every run decodes its prompt), generated token ids returned (the
    oracle's source; harmless elsewhere)."""
    body = {"prompt": wl["prompt"], "n_predict": wl["n_predict"], "temperature": 0.0,
            "cache_prompt": False, "return_tokens": True}
    if "json_schema" in wl:
        body["json_schema"] = wl["json_schema"]
    if config.kind == ORACLE:
        if oracle_tokens is None:
            raise ValueError(f"{wl['name']}: the oracle needs the tokens of its 'none' run (return_tokens)")
        body["speculative.oracle"] = oracle_tokens
    elif config.kind == OURS:
        types, _, select = config.name.partition("@")  # ngram-mod+ngram-simple@precedence
        body["speculative.type"] = types.replace("+", ",")
        if select:
            body["speculative.select"] = select
    return body
