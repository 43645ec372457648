"""The draft chain: asks the drafters, keeps the winner per slot, and counts everything.

After llama.cpp ``common_speculative_draft`` / ``common_speculative_accept``: one drafter's draft
wins a slot's step; after verification the winner hears ``accept(n, is_other=False)`` and every
other drafter ``accept(n, is_other=True)``. Drafters only draft; all counting and timing happens
here, into ``DrafterStats``, keyed by the drafter's type name.

Which drafter wins (``--spec-select``): ``precedence`` is llama.cpp's rule, the first drafter in
registry order with a draft; ``expected`` asks every drafter and takes the draft with the highest
expected tokens per second under the verify-cost profile (``selection.best_rate``), ties going
by precedence. Without a profile (none measured) the chain falls back to precedence.

How likely a draft is to be accepted, and how much of it a slot may risk, is the estimator's
(``estimator.py``); it learns from what was verified, so ``accept`` is told the verified length.
Everything one request's speculation knows of its slot is one ``SlotSpeculation`` record
(``slot_record.py``) in ``slots``, dropped with one ``pop`` when the request ends.

The drafters' optional methods (``ngram.protocol.OptionalDrafterHooks``: ``draft_tag``,
``draft_probs``, ``cut``, ``finish``) are looked up with ``hasattr``; a drafter without one gets the
default the protocol names.
"""

from __future__ import annotations

import time
from typing import Sequence

from ngram.protocol import Drafter
from slotserver.engine.verify_costs import VerifyProfile
from slotserver.speculation import selection as sel
from slotserver.speculation.config import SELECT_MODES, DraftLimits, SpecConfig
from slotserver.speculation.estimator import Estimator
from slotserver.speculation.registry import DRAFT_MODEL, RANK
from slotserver.speculation.slot_record import Drafted, Key, SlotSpeculation, Unverified
from slotserver.stats import DrafterStats


class DraftChain:
    """Owned by the engine thread, like the drafters it holds.

    ``model``: the draft model (``draft-simple``) comes last in precedence. It drafts for many slots
    at once, so the runner runs it (``uses_model`` says whether a request may ask it, ``adopt``
    hands its draft back); its wins and acceptance are counted here like any drafter's.
    ``profile``: the verify-cost profile (None: drafts are verified whole, as llama.cpp does); the
    estimator's, settable once measured.
    """

    def __init__(self, drafters: Sequence[tuple[str, Drafter]], *, stats: dict[str, DrafterStats] | None = None,
                 model: bool = False, select: str = "precedence", profile: VerifyProfile | None = None) -> None:
        if select not in SELECT_MODES:
            raise ValueError(f"unknown --spec-select mode: {select} (known: {', '.join(SELECT_MODES)})")
        self.drafters = sorted(drafters, key=lambda td: RANK[td[0]])  # (type name, drafter), precedence order
        self.model = model
        self.select = select
        self.estimator = Estimator(profile)
        # Several chains (one per API key, or per request) may count into one shared stats dict.
        self.stats = stats if stats is not None else {}
        for name in self.types:
            self.stats.setdefault(name, DrafterStats())
        self.slots: dict[int, SlotSpeculation] = {}  # slot -> its request's speculation

    @classmethod
    def from_spec(cls, spec: SpecConfig, *, stats: dict[str, DrafterStats] | None = None,
                  profile: VerifyProfile | None = None) -> DraftChain:
        drafters = [(name, spec.make_drafter(name)) for name in spec.types if name != DRAFT_MODEL]
        return cls(drafters, stats=stats, model=DRAFT_MODEL in spec.types, select=spec.select, profile=profile)

    @property
    def profile(self) -> VerifyProfile | None:
        return self.estimator.profile

    @profile.setter
    def profile(self, profile: VerifyProfile | None) -> None:
        self.estimator.profile = profile

    @property
    def types(self) -> list[str]:
        return [t for t, _ in self.drafters] + ([DRAFT_MODEL] if self.model else [])

    def _record(self, slot: int) -> SlotSpeculation:
        rec = self.slots.get(slot)
        if rec is None:
            rec = self.slots[slot] = SlotSpeculation()
        return rec

    def begin(self, slot: int, prompt: Sequence[int]) -> None:
        """The slot's history starts over with ``prompt`` (a new request, or a context shift): so does
        its record, and every drafter's view of the slot."""
        self.slots.pop(slot, None)
        for name, d in self.drafters:
            st = self.stats[name]
            t0 = time.perf_counter()
            d.begin(slot, prompt)
            st.t_begin_s.observe(time.perf_counter() - t0)
            st.n_call_begin += 1
        if self.model:
            self.stats[DRAFT_MODEL].n_call_begin += 1

    def finish(self, slot: int, history: Sequence[int]) -> None:
        """The slot's request ended with ``history`` (prompt, output, last sampled token): its record
        goes, and drafters that learn whole requests (``finish``, optional in the protocol) learn it now."""
        self.slots.pop(slot, None)
        for _, d in self.drafters:
            if hasattr(d, "finish"):
                d.finish(slot, history)

    def draft(self, slot: int, history: Sequence[int], last_token: int, limits: DraftLimits) -> list[int]:
        """The slot's draft this step from its drafters (the draft model aside), ``[]`` for none."""
        rec = self._record(slot)
        est = self.estimator
        rec.end_draft()
        est.score_rivals(rec, history, last_token)
        if limits.n_max <= 0:
            return []
        est.accrue(rec)
        expected = (limits.select or self.select) == "expected" and self.profile is not None
        best: tuple[float, Key, list[int], list[float] | None] | None = None
        # Drafts compete as far as the slot may risk verifying them: risk_cap(n) = min(n, risk_cap(n_max)).
        cap = est.risk_cap(rec, limits.n_max) if expected else 0
        offered: list[tuple[Key, list[int]]] = []
        for name, d in self.drafters:
            if limits.types is not None and name not in limits.types:
                continue
            st = self.stats[name]
            t0 = time.perf_counter()
            tokens = d.draft(slot, history, last_token, limits.n_max)[: limits.n_max]
            st.t_draft_s.observe(time.perf_counter() - t0)
            st.n_call_draft += 1
            if not tokens or len(tokens) < limits.n_min:
                continue
            tag = d.draft_tag(slot) if hasattr(d, "draft_tag") else ""
            cum = d.draft_probs(slot)[: len(tokens)] if hasattr(d, "draft_probs") else None
            key, hint = est.kind(name, tag, cum, len(tokens))
            if not expected:
                best = (0.0, key, tokens, hint)
                break
            rate = est.rate(rec, key, min(cap, len(tokens)), hint)
            offered.append((key, tokens))
            if best is None or rate > best[0]:
                best = (rate, key, tokens, hint)
        if best is None:
            est.no_draft(rec)
            return []
        est.first_draft(rec)
        rec.draft = Drafted(best[1], len(best[2]), best[3])
        if expected:
            rec.rivals = Unverified(len(history), last_token, [o for o in offered if o[1] is not best[2]],
                                    list(best[2]))  # a copy: the step cuts the draft it got
        return best[2]

    def confidence(self, slot: int) -> list[float]:
        """Cumulative acceptance probabilities of the slot's current draft (``selection``), as
        many as the slot may risk verifying (``selection.risk_cap``)."""
        rec = self.slots.get(slot)
        if rec is None or rec.draft is None:
            return []
        return self.estimator.confidence(rec, rec.draft)

    def winner(self, slot: int) -> str | None:
        """The type name of the slot's current draft's drafter (None: no draft of the chain's)."""
        key = self.winner_kind(slot)
        return key[0] if key is not None else None

    def winner_kind(self, slot: int) -> Key | None:
        """(drafter, tag) of the slot's current draft (None: no draft of the chain's)."""
        rec = self.slots.get(slot)
        return rec.draft.key if rec is not None and rec.draft is not None else None

    def selected(self, slot: int, n: int) -> None:
        """The step verifies ``n`` tokens of the slot's draft: a draft cut to nothing is a denial
        (counted as skipped), a verified one while a probe is due is that probe."""
        rec = self.slots.get(slot)
        if rec is None or rec.draft is None:
            return
        key = rec.draft.key
        if n == 0:
            self.stats[key[0]].n_skipped += 1
            self.estimator.denied(rec, key)
        else:
            self.estimator.verifying(rec, key)

    def uses_model(self, limits: DraftLimits) -> bool:
        """Whether a request with ``limits`` may draft with the draft model at all."""
        return self.model and limits.n_max > 0 and (limits.types is None or DRAFT_MODEL in limits.types)

    def model_called(self, seconds: float) -> None:
        """The draft model drafted for every asking slot in one call (llama.cpp counts one call for all)."""
        st = self.stats[DRAFT_MODEL]
        st.n_call_draft += 1
        st.t_draft_s.observe(seconds)

    def adopt(self, slot: int, tokens: list[int], limits: DraftLimits) -> list[int]:
        """The draft model's draft for ``slot``: kept (and ``slot``'s winner noted) unless shorter than n_min."""
        if not tokens or len(tokens) < limits.n_min:
            return []
        tokens = tokens[: limits.n_max]
        rec = self._record(slot)
        self.estimator.first_draft(rec, counted_quiet=True)  # draft() counted this step as quiet: it was not
        rec.draft = Drafted((DRAFT_MODEL, ""), len(tokens), None)
        return tokens

    def accept(self, slot: int, n_verified: int, n_accepted: int) -> None:
        """The slot's last draft was verified: ``n_verified`` of its tokens went into the batch
        (the step may have cut it) and the first ``n_accepted`` of those were accepted.

        Counters and estimates learn from the verified tokens only.
        """
        assert 0 <= n_accepted <= n_verified
        rec = self.slots.get(slot)
        drafted = rec.end_draft() if rec is not None else None
        if drafted is None or n_verified == 0:  # no draft of the chain's (none, cut to nothing, or the oracle's)
            return
        key = drafted.key
        winner = key[0]
        st = self.stats[winner]
        st.n_gen_drafts += 1
        st.n_gen_tokens += n_verified
        self.estimator.learn_verified(rec, key, n_verified, n_accepted)
        t0 = time.perf_counter()
        for name, d in self.drafters:
            if name == winner and hasattr(d, "cut"):
                d.cut(slot, n_verified)
            d.accept(slot, n_accepted, name != winner)
        st.t_accept_s.observe(time.perf_counter() - t0)
        st.add_accepted(n_accepted)

    def estimates(self) -> dict[str, list[float]]:
        """Drafter-wide acceptance per position bin, per drafter (and tag): for /props."""
        return self.estimator.estimates()

    def snapshot_estimates(self) -> dict[Key, sel.Counts]:
        """A copy of the drafter-wide estimates (engine thread), for ``--spec-estimates-file``."""
        return self.estimator.snapshot()

    def adopt_estimates(self, estimates: dict[Key, sel.Counts]) -> None:
        """Start from saved drafter-wide estimates (before serving); see ``Estimator.adopt``."""
        self.estimator.adopt(estimates)

    def stats_lines(self) -> list[str]:
        return [st.line(name) for name, st in self.stats.items()]
