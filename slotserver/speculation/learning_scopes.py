"""Which draft chain a request drafts with: who its drafters learn from and whom they can leak to.

The ngram-mod pool and the ngram-cache dynamic cache learn from every generation they see, so a
client can probe, through ``draft_n`` timings, whether another client sent a passage. The scope
(``--spec-learning``) trades that exposure against acceptance:

- ``shared`` (default, llama-server's behaviour): one chain for every request; it is the one that is
  saved to and loaded from the pool and cache files.
- ``per-key``: one chain per API key (``--api-key``), created on a key's first request; requests
  of one key never draft from another's text. Memory: one set of structures per key (the ngram-mod
  pool alone is 16 MiB). Not saved: learned state lasts for the process.
- ``per-request``: a fresh chain for each request; only the request's own prompt and output are
  drafted from. Nothing is learned across requests.

The KV prompt cache follows the same scope (``kv_owner``): a request reuses only cache its own
tenant left (per-request: only its own choices' shared prompt), so ``cache_n``/``cached_tokens`` and
the prompt time never tell one tenant what another sent. ``SlotLifecycle`` records each slot's owner.

Statistics of all chains count into the shared chain's ``DrafterStats`` (metrics stay one series
per drafter type). Engine thread only.
"""

from __future__ import annotations

from slotserver.speculation.chain import DraftChain
from slotserver.speculation.config import SCOPES, SpecConfig


class LearningScopes:
    def __init__(self, shared: DraftChain, *, scope: str = "shared", spec: SpecConfig | None = None) -> None:
        if scope not in SCOPES:
            raise ValueError(f"unknown learning scope: {scope} (known: {', '.join(SCOPES)})")
        assert scope == "shared" or spec is not None, "a chain per key or request is built from the spec"
        self.spec = spec
        self.shared = shared
        self.scope = scope
        self._by_key: dict[str, DraftChain] = {}

    @property
    def profile(self):
        """The verify-cost profile every chain selects drafts under (the shared chain's)."""
        return self.shared.profile

    def for_tenant(self, tenant: str) -> DraftChain:
        """The chain a new request of ``tenant`` (an API key's id, "" without keys) drafts with."""
        if self.scope == "shared":
            return self.shared
        if self.scope == "per-key":
            chain = self._by_key.get(tenant)
            if chain is None:
                chain = self._by_key[tenant] = DraftChain.from_spec(self.spec, stats=self.shared.stats,
                                                                    profile=self.profile)
            return chain
        return DraftChain.from_spec(self.spec, stats=self.shared.stats, profile=self.profile)

    def kv_owner(self, tenant: str, request_id: str) -> str:
        """Who may reuse the KV prompt cache a request of ``tenant`` (an API key's id) with the id
        ``request_id`` (shared by all its choices) leaves, and whose cache it may reuse: "" (everyone)
        when shared. A GET /slots, which is no generation request, passes ``request_id`` "" and owns
        nothing under per-request."""
        if self.scope == "shared":
            return ""
        if self.scope == "per-key":
            return f"key {tenant}"
        return f"request {request_id}" if request_id else "request (none)"

    @property
    def n_chains(self) -> int:
        return 1 if self.scope == "shared" else len(self._by_key)
