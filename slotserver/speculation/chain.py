"""The draft chain: asks the drafters, keeps the winner per slot, estimates and counts everything.

After llama.cpp ``common_speculative_draft`` / ``common_speculative_accept``: one drafter's draft
wins a slot's step; after verification the winner hears ``accept(n, is_other=False)`` and every
other drafter ``accept(n, is_other=True)``. Drafters only draft; all counting and timing happens
here, into ``DrafterStats``, keyed by the drafter's type name.

Which drafter wins (``--spec-select``): ``precedence`` is llama.cpp's rule, the first drafter in
registry order with a draft; ``expected`` asks every drafter and takes the draft with the highest
expected tokens per second under the verify-cost profile (``selection.best_rate``), ties going
by precedence. Without a profile (none measured) the chain falls back to precedence.

The chain keeps the acceptance estimates of ``selection`` per (drafter, tag) drafter-wide and
per slot, and each slot's probes. It learns from what was verified, not from what was proposed:
the step may cut a draft (cost, batch room), so ``accept`` is told the verified length. It also
keeps what each slot's verified drafts saved in its request, which caps the slot's next draft
(``selection.risk_cap``).

**Rivals learn too.** With ``expected`` every drafter drafts each step, but only the winner is
verified. The next step's context shows what the target really produced after the last draft (the
accepted tokens and the sampled one), so every draft that was not verified (the losers', and the
winner's if the step cut it to nothing) is scored against it for the positions it covers
(``_learn_rivals``): a drafter that loses every step still learns how far its drafts would have
been accepted. Without this, one early miss locked a drafter out: on a fresh server the suffix
drafter's first `repeat_zh` draft was rejected, its estimate fell to 0.44, and ngram-cache's
8-token drafts then won every step at 68% of the oracle, while suffix's 64-token ones were right.
Scoring costs a comparison of a few tokens per drafter; the statistics (`#gen`, `#acc`) still
count verified drafts only.
"""

from __future__ import annotations

import time
from typing import NamedTuple, Sequence

from ngram.protocol import Drafter
from slotserver.engine.batch import common_prefix
from slotserver.engine.verify_costs import VerifyProfile
from slotserver.speculation import selection as sel
from slotserver.speculation.config import SELECT_MODES, DraftLimits, SpecConfig
from slotserver.speculation.registry import DRAFT_MODEL, RANK
from slotserver.stats import DrafterStats

Key = tuple[str, str]  # (drafter type name, the drafter's tag for that kind of draft)


class _Unverified(NamedTuple):
    """A slot's last draft call (``_learn_rivals``): the context it followed (length, last token),
    the drafts nothing will verify, the winner's tokens, whole (scored too if the step cuts it to
    nothing), and ``tail``: (key, n) when the step verified only the winner's first n tokens and
    accepted them all, so the token the target sampled next scores the winner's position n."""

    n_ctx: int
    last: int
    drafts: list[tuple[Key, list[int]]]
    winner: list[int]
    tail: tuple[Key, int] | None = None


class DraftChain:
    """Owned by the engine thread, like the drafters it holds.

    ``model``: the draft model (``draft-simple``) comes last in precedence. It drafts for many slots
    at once, so the runner runs it (``uses_model`` says whether a request may ask it, ``adopt``
    hands its draft back); its wins and acceptance are counted here like any drafter's.
    ``profile``: the verify-cost profile (None: drafts are verified whole, as llama.cpp does).
    """

    def __init__(self, drafters: Sequence[tuple[str, Drafter]], *, stats: dict[str, DrafterStats] | None = None,
                 model: bool = False, select: str = "precedence", profile: VerifyProfile | None = None) -> None:
        if select not in SELECT_MODES:
            raise ValueError(f"unknown --spec-select mode: {select} (known: {', '.join(SELECT_MODES)})")
        self.drafters = sorted(drafters, key=lambda td: RANK[td[0]])  # (type name, drafter), precedence order
        self.model = model
        self.select = select
        self.profile = profile
        # Several chains (one per API key, or per request) may count into one shared stats dict.
        self.stats = stats if stats is not None else {}
        for name in self.types:
            self.stats.setdefault(name, DrafterStats())
        # slot -> the last draft's winner, its length and its drafter's own estimates (sel.hint) if any
        self._last: dict[int, tuple[Key, int, list[float] | None]] = {}
        self._global: dict[Key, sel.Counts] = {}  # drafter-wide acceptance
        self._slot: dict[tuple[int, Key], sel.Counts] = {}  # a slot's acceptance, this request
        self._probe: dict[tuple[int, Key], sel.Probe] = {}
        # slot -> seconds its verified drafts saved this request, plus RISK_SHARE of a plain step a
        # step since its first draft
        self._saved: dict[int, float] = {}
        # slot -> steps of this request's answer before any drafter had a draft (selection.RISK_HALF),
        # counted until that first draft
        self._quiet: dict[int, int] = {}
        self._drafted: set[int] = set()  # slots that have had a draft this request
        # slot -> seconds it may still spend on probes (PROBE_SHARE of a plain step per step)
        self._credit: dict[int, float] = {}
        # slot -> its last draft call's unverified drafts, until the next call shows what came after
        self._rivals: dict[int, _Unverified] = {}

    @classmethod
    def from_spec(cls, spec: SpecConfig, *, stats: dict[str, DrafterStats] | None = None,
                  profile: VerifyProfile | None = None) -> DraftChain:
        drafters = [(name, spec.make_drafter(name)) for name in spec.types if name != DRAFT_MODEL]
        return cls(drafters, stats=stats, model=DRAFT_MODEL in spec.types, select=spec.select, profile=profile)

    @property
    def types(self) -> list[str]:
        return [t for t, _ in self.drafters] + ([DRAFT_MODEL] if self.model else [])

    def begin(self, slot: int, prompt: Sequence[int]) -> None:
        self._last.pop(slot, None)
        self._saved.pop(slot, None)
        self._credit.pop(slot, None)
        self._rivals.pop(slot, None)
        self._quiet.pop(slot, None)
        self._drafted.discard(slot)
        for key in [k for k in self._slot if k[0] == slot]:
            del self._slot[key]
            self._probe.pop(key, None)
        for name, d in self.drafters:
            st = self.stats[name]
            t0 = time.perf_counter()
            d.begin(slot, prompt)
            st.t_begin_s.observe(time.perf_counter() - t0)
            st.n_call_begin += 1
        if self.model:
            self.stats[DRAFT_MODEL].n_call_begin += 1

    def finish(self, slot: int, history: Sequence[int]) -> None:
        """The slot's request ended with ``history`` (prompt, output, last sampled token): drafters
        that learn whole requests (``finish``, optional in the protocol) learn it now."""
        self._last.pop(slot, None)
        self._rivals.pop(slot, None)
        for _, d in self.drafters:
            if hasattr(d, "finish"):
                d.finish(slot, history)

    def draft(self, slot: int, history: Sequence[int], last_token: int, limits: DraftLimits) -> list[int]:
        """The slot's draft this step from its drafters (the draft model aside), ``[]`` for none."""
        self._last.pop(slot, None)
        self._learn_rivals(slot, history, last_token)
        if limits.n_max <= 0:
            return []
        if self.profile is not None:
            self._accrue(slot)
        expected = (limits.select or self.select) == "expected" and self.profile is not None
        best: tuple[float, Key, list[int], list[float] | None] | None = None
        # Drafts compete as far as the slot may risk verifying them: risk_cap(n) = min(n, risk_cap(n_max)).
        cap = self._risk_cap(slot, limits.n_max) if expected else 0
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
            key = (name, d.draft_tag(slot) if hasattr(d, "draft_tag") else "")
            hint = None
            if hasattr(d, "draft_probs"):
                cum = d.draft_probs(slot)[: len(tokens)]
                if len(cum) == len(tokens):
                    hint = sel.hint(cum)
                    key = (name, f"{key[1]}:{sel.hint_class(cum)}")
            if not expected:
                best = (0.0, key, tokens, hint)
                break
            rate = sel.best_rate(self._q(slot, key, min(cap, len(tokens)), hint), self.profile)
            offered.append((key, tokens))
            if best is None or rate > best[0]:
                best = (rate, key, tokens, hint)
        if best is None:
            if slot not in self._drafted:
                self._quiet[slot] = self._quiet.get(slot, 0) + 1
            return []
        self._first_draft(slot)
        self._last[slot] = (best[1], len(best[2]), best[3])
        if expected:
            self._rivals[slot] = _Unverified(len(history), last_token, [o for o in offered if o[1] is not best[2]],
                                             list(best[2]))  # a copy: the step cuts the draft it got
        return best[2]

    def _accrue(self, slot: int) -> None:
        """Each step of the slot's from its first draft of this request on widens what it may risk
        (``RISK_SHARE``) and spend on probes (``PROBE_SHARE``), both in plain steps of the profile.
        Steps before its first draft widen nothing: an answer that went on for a while with nothing
        to draft is no likelier to repeat itself for it (``_risk_cap``)."""
        if slot not in self._drafted:
            return
        t1 = self.profile.step(1)
        self._saved[slot] = self._saved.get(slot, 0.0) + sel.RISK_SHARE * t1
        self._credit[slot] = self._credit.get(slot, 0.0) + sel.PROBE_SHARE * t1

    def _first_draft(self, slot: int) -> None:
        """The slot has a draft this step: if it is its first this request, the quiet steps end
        and this step accrues (``_accrue``)."""
        if slot not in self._drafted:
            self._drafted.add(slot)
            if self.profile is not None:
                self._accrue(slot)

    def _risk_cap(self, slot: int, n: int) -> int:
        """``selection.risk_cap`` for the slot's ``n``-token draft. Its base budget halves for every
        ``RISK_HALF`` steps the answer went before its first draft: a short match that first turns
        up 49 tokens into an answer with nothing to repeat is more often a common phrase than the
        start of a copy. On SmolLM2's cold ``humaneval0`` two such 7-token drafts, trusted from
        earlier repetitive requests, were rejected at their first token and cost 6% of the answer."""
        return sel.risk_cap(self.profile, self._saved.get(slot, 0.0), n, self._quiet.get(slot, 0))

    def _learn_rivals(self, slot: int, history: Sequence[int], last_token: int) -> None:
        """Score the drafts of the slot's last draft call that nothing verified against what the
        target produced after that call's context: ``history`` must extend it (else nothing is known)."""
        rivals = self._rivals.pop(slot, None)
        if rivals is None:
            return
        n_ctx, last, drafts = rivals.n_ctx, rivals.last, rivals.drafts
        if (not drafts and rivals.tail is None) or len(history) <= n_ctx or history[n_ctx] != last:
            return
        truth = list(history[n_ctx + 1 : n_ctx + 1 + sel.BIN_EDGES[-1]]) + [last_token]
        for key, tokens in drafts:
            n, m = min(len(tokens), len(truth)), common_prefix(tokens, truth)
            self._global.setdefault(key, sel.Counts()).update(n, m, sel.GLOBAL_DECAY)
            self._slot.setdefault((slot, key), sel.Counts()).update(n, m, sel.SLOT_DECAY)
        if rivals.tail is not None:
            # The verified part was counted by accept(); the first position the step cut off is
            # known now too. Without it a slot whose drafts kept being cut to one token (Gemma's
            # free, after a first draft rejected at its second token) never tried a second one
            # again, and verified one-token drafts for the rest of its answer (offline replay).
            key, start = rivals.tail
            tokens = rivals.winner
            n, m = min(len(tokens), len(truth)), common_prefix(tokens, truth)
            self._global.setdefault(key, sel.Counts()).extend(start, n, m)
            self._slot.setdefault((slot, key), sel.Counts()).extend(start, n, m)

    def _probe_due(self, slot: int, probe: sel.Probe | None) -> bool:
        """Whether the slot's next draft of a kind is a probe: its denials say so (``Probe.due``) and
        the slot's probe credit covers a probe's cost (``selection.PROBE_SHARE``)."""
        if probe is None or not probe.due():
            return False
        return self.profile is None or self._credit.get(slot, 0.0) >= sel.probe_cost(self.profile)

    def confidence(self, slot: int) -> list[float]:
        """Cumulative acceptance probabilities of the slot's current draft (``selection``), as
        many as the slot may risk verifying (``selection.risk_cap``)."""
        key, n, hint = self._last.get(slot, (None, 0, None))
        if key is None:
            return []
        if self.profile is not None:
            n = self._risk_cap(slot, n)
        return self._q(slot, key, n, hint)

    def _q(self, slot: int, key: Key, n: int, hint: list[float] | None = None) -> list[float]:
        """Cumulative acceptance estimates of an ``n``-token draft of ``key``; ``hint``: the
        drafter's own estimates (conditional, per position), the prior instead of ``PRIOR_P``."""
        glob = self._global.get(key) or sel.Counts()
        own = self._slot.get((slot, key))
        probe = self._probe.get((slot, key))
        n_sure = sel.probe_rows(self.profile) if self._probe_due(slot, probe) else 0
        if hint is not None:
            p = glob.position_probs(hint[:n], sel.PRIOR_WEIGHT)
            if own is not None:
                p = own.position_probs(p, sel.SLOT_WEIGHT)
            return sel.product(p, n_sure)
        p = glob.probs(self._family_prior(key), sel.PRIOR_WEIGHT)
        if own is not None:
            p = own.probs(p, sel.SLOT_WEIGHT)
        return sel.cumulative(p, n, n_sure)

    def _family_prior(self, key: Key) -> list[float] | None:
        """The drafter's other kinds of draft, pooled: what a kind it has not drafted yet is first
        expected to do (None: the drafter has no other kind with data; then ``PRIOR_P``). ngram-mod's
        first pool draft, after its cold drafts were accepted for a whole answer, started over
        from 0.7 per position and grew from 3 tokens again (SmolLM2 `quote`, offline replay)."""
        pooled = sel.Counts()
        for (name, tag), c in self._global.items():
            if name == key[0] and tag != key[1]:
                pooled.add(c)
        return pooled.probs(None, sel.PRIOR_WEIGHT) if any(pooled.tried) else None

    def winner(self, slot: int) -> str | None:
        """The type name of the slot's current draft's drafter (None: no draft of the chain's)."""
        last = self._last.get(slot)
        return last[0][0] if last is not None else None

    def selected(self, slot: int, n: int) -> None:
        """The step verifies ``n`` tokens of the slot's draft: a draft cut to nothing is a denial
        (counted as skipped), a verified one while a probe is due is that probe."""
        last = self._last.get(slot)
        if last is None:
            return
        key = last[0]
        probe = self._probe.setdefault((slot, key), sel.Probe())
        if n == 0:
            probe.denied()
            self.stats[key[0]].n_skipped += 1
            self._last.pop(slot)
            rivals = self._rivals.get(slot)
            if rivals is not None:  # not verified: scored like a rival's
                rivals.drafts.append((key, list(rivals.winner)))  # a copy: the step cuts the draft it got
        elif self._probe_due(slot, probe):
            probe.probing = True
            if self.profile is not None:
                self._credit[slot] = self._credit.get(slot, 0.0) - sel.probe_cost(self.profile)

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
        if slot not in self._drafted:  # draft() counted this step as quiet: it was not
            self._quiet[slot] = max(0, self._quiet.get(slot, 0) - 1)
        self._first_draft(slot)
        self._last[slot] = ((DRAFT_MODEL, ""), len(tokens), None)
        return tokens

    def accept(self, slot: int, n_verified: int, n_accepted: int) -> None:
        """The slot's last draft was verified: ``n_verified`` of its tokens went into the batch
        (the step may have cut it) and the first ``n_accepted`` of those were accepted.

        Counters and estimates learn from the verified tokens only.
        """
        assert 0 <= n_accepted <= n_verified
        last = self._last.pop(slot, None)
        if last is None or n_verified == 0:  # no draft of the chain's (none, cut to nothing, or the oracle's)
            return
        key = last[0]
        winner = key[0]
        st = self.stats[winner]
        st.n_gen_drafts += 1
        st.n_gen_tokens += n_verified
        self._global.setdefault(key, sel.Counts()).update(n_verified, n_accepted, sel.GLOBAL_DECAY)
        self._slot.setdefault((slot, key), sel.Counts()).update(n_verified, n_accepted, sel.SLOT_DECAY)
        self._probe.setdefault((slot, key), sel.Probe()).verified(n_verified, n_accepted, sel.probe_rows(self.profile))
        if self.profile is not None:
            self._saved[slot] = self._saved.get(slot, 0.0) + sel.saved_s(self.profile, n_verified, n_accepted)
        rivals = self._rivals.get(slot)
        if rivals is not None and n_accepted == n_verified < len(rivals.winner):
            self._rivals[slot] = rivals._replace(tail=(key, n_verified))
        t0 = time.perf_counter()
        for name, d in self.drafters:
            if name == winner and hasattr(d, "cut"):
                d.cut(slot, n_verified)
            d.accept(slot, n_accepted, name != winner)
        st.t_accept_s.observe(time.perf_counter() - t0)
        st.add_accepted(n_accepted)

    def estimates(self) -> dict[str, list[float]]:
        """Drafter-wide acceptance per position bin, per drafter (and tag): for /props."""
        return {f"{n}:{t}" if t else n: [round(p, 3) for p in c.probs(None, sel.PRIOR_WEIGHT)]
                for (n, t), c in list(self._global.items())}  # a copy: /props reads while the engine steps

    def snapshot_estimates(self) -> dict[Key, sel.Counts]:
        """A copy of the drafter-wide estimates (engine thread), for ``--spec-estimates-file``."""
        return {key: sel.Counts(list(c.acc), list(c.tried)) for key, c in self._global.items()}

    def adopt_estimates(self, estimates: dict[Key, sel.Counts]) -> None:
        """Start from saved drafter-wide estimates (before serving): a restart drafts as far as
        the server had learned to. Estimates of drafters or tags this chain has no more are kept
        (a later save writes them back), so a restart with fewer types loses nothing."""
        self._global.update(estimates)

    def stats_lines(self) -> list[str]:
        return [st.line(name) for name, st in self.stats.items()]
