"""The draft chain: asks drafters in precedence order, keeps the winner per slot, counts everything.

After llama.cpp ``common_speculative_draft`` / ``common_speculative_accept``: the first drafter that
returns a non-empty draft for a slot wins that step; after verification the winner hears
``accept(n, is_other=False)`` and every other drafter ``accept(n, is_other=True)``. Drafters only
draft; all counting and timing happens here, into ``DrafterStats``, keyed by the drafter's type name.

The chain learns from what was verified, not from what was proposed: the batch may cut a draft
to fit, so ``accept`` is told the verified length, and counters, back-off and the length cap use it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ngram.protocol import Drafter
from slotserver.drafter_types import BY_NAME, DRAFT_MODEL, RANK
from slotserver.stats import DrafterStats

if TYPE_CHECKING:  # annotations only: the chain stays importable without llama.cpp
    from slotserver.config import SpecConfig

# A verified draft fails when fewer than this share of its tokens (and at least one) was accepted:
# verifying costs batch time, so a drafter that keeps failing makes generation slower.
FAIL_RATIO = 0.25
# After this many failures in a row of one drafter on one slot, the chain stops asking it...
FAIL_STREAK = 3
# ...for BACKOFF_MIN draft calls, doubling with every further failed streak up to BACKOFF_MAX.
BACKOFF_MIN = 8
BACKOFF_MAX = 512
# Draft length cap per (slot, drafter), like a congestion window: a request starts at CAP_START,
# a fully accepted draft doubles the cap, a failed one halves it (not below CAP_MIN). A verified
# draft token costs about a third of a one-token decode here, so long drafts must earn their length.
CAP_START = 16
CAP_MIN = 4
CAP_MAX = 1024


@dataclass(slots=True)
class Backoff:
    """Per (slot, drafter): how the drafter's recent drafts fared, how long to draft and when to ask."""

    n_fail: int = 0  # failed drafts in a row
    n_skip: int = 0  # draft calls still to skip
    next_skip: int = BACKOFF_MIN
    cap: int = CAP_START  # longest draft to ask for next

    def update(self, n_draft: int, n_accepted: int) -> None:
        if n_accepted >= max(1, FAIL_RATIO * n_draft):
            self.n_fail, self.next_skip = 0, BACKOFF_MIN
            if n_accepted == n_draft:
                self.cap = min(2 * n_draft, CAP_MAX)
            return
        self.cap = max(n_draft // 2, CAP_MIN)
        self.n_fail += 1
        if self.n_fail >= FAIL_STREAK:
            self.n_skip, self.n_fail = self.next_skip, 0
            self.next_skip = min(2 * self.next_skip, BACKOFF_MAX)


@dataclass(slots=True)
class DraftLimits:
    """Per-request bounds on a draft (``speculative.*`` request fields)."""

    n_max: int = 64  # longest draft handed to verification
    n_min: int = 0  # a shorter draft is dropped
    p_min: float = 0.0  # draft-model confidence cut-off (unused by n-gram drafters)
    types: frozenset[str] | None = None  # allowed drafter types; None = all configured


class DraftChain:
    """Owned by the engine thread, like the drafters it holds.

    ``model``: the draft model (``draft-simple``) comes last in precedence. It drafts for many slots
    at once, so the runner runs it (``model_budget`` says whether and how far a slot may ask it,
    ``adopt`` hands its draft back); its wins, failures and back-off are counted here like any drafter's.
    """

    def __init__(self, drafters: Sequence[tuple[str, Drafter]], *,
                 stats: dict[str, DrafterStats] | None = None, model: bool = False) -> None:
        self.drafters = sorted(drafters, key=lambda td: RANK[td[0]])  # (type name, drafter), precedence order
        self.model = model
        # Several chains (one per API key, or per request) may count into one shared stats dict.
        self.stats = stats if stats is not None else {}
        for name in self.types:
            self.stats.setdefault(name, DrafterStats())
        self._last: dict[int, str | None] = {}  # slot -> type name of the last draft's winner
        self._backoff: dict[tuple[int, str], Backoff] = {}

    @classmethod
    def from_spec(cls, spec: SpecConfig, *, stats: dict[str, DrafterStats] | None = None) -> DraftChain:
        drafters = [(name, BY_NAME[name].make(spec)) for name in spec.types if name != DRAFT_MODEL]
        return cls(drafters, stats=stats, model=DRAFT_MODEL in spec.types)

    @property
    def types(self) -> list[str]:
        return [t for t, _ in self.drafters] + ([DRAFT_MODEL] if self.model else [])

    def begin(self, slot: int, prompt: Sequence[int]) -> None:
        self._last[slot] = None
        for name, d in self.drafters:
            self._backoff[(slot, name)] = Backoff()
            st = self.stats[name]
            t0 = time.perf_counter()
            d.begin(slot, prompt)
            st.t_begin_s.observe(time.perf_counter() - t0)
            st.n_call_begin += 1
        if self.model:
            self._backoff[(slot, DRAFT_MODEL)] = Backoff()
            self.stats[DRAFT_MODEL].n_call_begin += 1

    def draft(self, slot: int, history: Sequence[int], last_token: int, limits: DraftLimits) -> list[int]:
        self._last[slot] = None
        if limits.n_max <= 0:
            return []
        for name, d in self.drafters:
            if limits.types is not None and name not in limits.types:
                continue
            n_max = self._allowance(slot, name, limits)
            if n_max == 0:
                continue
            st = self.stats[name]
            t0 = time.perf_counter()
            tokens = d.draft(slot, history, last_token, n_max)
            st.t_draft_s.observe(time.perf_counter() - t0)
            st.n_call_draft += 1
            if len(tokens) > n_max:
                tokens = tokens[:n_max]
            if not tokens or len(tokens) < limits.n_min:
                continue
            self._last[slot] = name
            return tokens
        return []

    def uses_model(self, limits: DraftLimits) -> bool:
        """Whether a request with ``limits`` may draft with the draft model at all."""
        return self.model and limits.n_max > 0 and (limits.types is None or DRAFT_MODEL in limits.types)

    def model_budget(self, slot: int, limits: DraftLimits) -> int:
        """How long a draft the draft model may make for ``slot`` now (0: not at all), after the
        drafters above had none. Call after ``draft``."""
        return self._allowance(slot, DRAFT_MODEL, limits) if self.uses_model(limits) else 0

    def _allowance(self, slot: int, name: str, limits: DraftLimits) -> int:
        """How long a draft ``name`` may make for ``slot`` under its back-off (0: skipped this call)."""
        backoff = self._backoff.setdefault((slot, name), Backoff())
        if backoff.n_skip > 0:
            backoff.n_skip -= 1
            self.stats[name].n_skipped += 1
            return 0
        return min(limits.n_max, max(backoff.cap, limits.n_min))

    def model_called(self, seconds: float) -> None:
        """The draft model drafted for every asking slot in one call (llama.cpp counts one call for all)."""
        st = self.stats[DRAFT_MODEL]
        st.n_call_draft += 1
        st.t_draft_s.observe(seconds)

    def adopt(self, slot: int, tokens: list[int], limits: DraftLimits) -> list[int]:
        """The draft model's draft for ``slot``: kept (and ``slot``'s winner noted) unless shorter than n_min."""
        if not tokens or len(tokens) < limits.n_min:
            return []
        self._last[slot] = DRAFT_MODEL
        return tokens[: limits.n_max]

    def accept(self, slot: int, n_verified: int, n_accepted: int) -> None:
        """The slot's last draft was verified: ``n_verified`` of its tokens went into the batch
        (the batch may have cut it) and the first ``n_accepted`` of those were accepted.

        Counters, back-off and the length cap learn from the verified tokens only.
        """
        assert 0 <= n_accepted <= n_verified
        winner = self._last.pop(slot, None)
        if winner is None or n_verified == 0:
            assert n_accepted == 0
            return
        st = self.stats[winner]
        st.n_gen_drafts += 1
        st.n_gen_tokens += n_verified
        self._backoff[(slot, winner)].update(n_verified, n_accepted)
        t0 = time.perf_counter()
        for name, d in self.drafters:
            d.accept(slot, n_accepted, name != winner)
        st.t_accept_s.observe(time.perf_counter() - t0)
        st.add_accepted(n_accepted)

    def stats_lines(self) -> list[str]:
        return [st.line(name) for name, st in self.stats.items()]
