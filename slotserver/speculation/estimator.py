"""The chain's acceptance estimator: how likely each kind of draft is to be accepted, and what a slot may risk.

``selection`` holds the arithmetic (bins, decay, priors, probes, the risk cap); this applies it to
what the chain sees. Estimates are kept per kind of draft (``Key``: drafter, tag) drafter-wide,
here, and per slot for its current request, in the slot's ``SlotSpeculation``; a slot's estimate
leans on the drafter-wide one. A kind a drafter has not drafted yet starts from its other kinds,
pooled (``family_prior``): a drafter that switches kinds is no worse at the new one than at the old,
until it shows otherwise.

It learns from what was verified, not from what was proposed: the step may cut a draft (cost,
batch room), so it is told the verified length.

**Rivals learn too.** With ``--spec-select expected`` every drafter drafts each step, but only the
winner is verified. The next draft call's context shows what the target really produced after the
last one (the accepted tokens and the sampled one), so every draft that was not verified (the
losers', and the winner's if the step cut it to nothing) is scored against it for the positions it
covers (``score_rivals``): a drafter that loses every step still learns how far its drafts would have
been accepted, and one early miss does not lock it out. Likewise the first position of the winner
that the step cut off, when every verified token was accepted: else a slot whose drafts keep being
cut to one token never learns that a second would pay. Scoring costs a comparison of a few tokens
per drafter; the statistics (``#gen``, ``#acc``) still count verified drafts only.

**What a slot may risk and spend on probes** grows with its steps from its first draft of the
request on (``RISK_SHARE``, ``PROBE_SHARE`` of a plain step each, ``accrue``) and with what its
verified drafts saved (``selection.saved_s``). Steps before its first draft widen nothing and halve
its base budget (``RISK_HALF``): a short match that first turns up late into an answer with nothing
to repeat is more often a common phrase than the start of a copy.

Engine thread only, like the chain that owns it. Measurements behind these rules:
docs/measurements.md, ``slotserver/speculation/estimator.py``.
"""

from __future__ import annotations

from typing import Sequence

from slotserver.engine.batch import common_prefix
from slotserver.engine.verify_costs import VerifyProfile
from slotserver.speculation import selection as sel
from slotserver.speculation.slot_record import Drafted, Key, SlotSpeculation


class Estimator:
    """Owns the drafter-wide estimates (``drafter_wide``) and the verify-cost profile they are
    weighed under (None: drafts are verified whole, as llama.cpp does); reads and updates the
    estimation fields of the slot records the chain hands it."""

    def __init__(self, profile: VerifyProfile | None = None) -> None:
        self.profile = profile
        self.drafter_wide: dict[Key, sel.Counts] = {}

    @staticmethod
    def kind(name: str, tag: str, cum: list[float] | None, n: int) -> tuple[Key, list[float] | None]:
        """The key of drafter ``name``'s ``n``-token draft of kind ``tag``, and its own estimates as a
        prior (``selection.hint``) when ``cum`` (its cumulative estimates, cut to the draft) has one
        per token: then its drafts learn apart by how sure it was (``selection.hint_class``)."""
        if cum is not None and len(cum) == n:
            return (name, f"{tag}:{sel.hint_class(cum)}"), sel.hint(cum)
        return (name, tag), None

    # -- a step of the slot -------------------------------------------------------------------

    def accrue(self, rec: SlotSpeculation) -> None:
        """Each step of the slot's from its first draft of this request on widens what it may risk
        (``RISK_SHARE``) and spend on probes (``PROBE_SHARE``), both in plain steps of the profile.
        Steps before its first draft widen nothing (``risk_cap``)."""
        if not rec.drafted or self.profile is None:
            return
        t1 = self.profile.step(1)
        rec.saved += sel.RISK_SHARE * t1
        rec.credit += sel.PROBE_SHARE * t1

    @staticmethod
    def no_draft(rec: SlotSpeculation) -> None:
        """No drafter had a draft this step: before the slot's first draft, a quiet step."""
        if not rec.drafted:
            rec.quiet += 1

    def first_draft(self, rec: SlotSpeculation, *, counted_quiet: bool = False) -> None:
        """The slot has a draft this step: if it is its first this request, the quiet steps end and
        this step accrues (``accrue``). ``counted_quiet``: this step was counted quiet already (the
        chain's drafters had nothing, the draft model had a draft): it was not."""
        if rec.drafted:
            return
        if counted_quiet:
            rec.quiet = max(0, rec.quiet - 1)
        rec.drafted = True
        self.accrue(rec)

    def risk_cap(self, rec: SlotSpeculation, n: int) -> int:
        """``selection.risk_cap`` for the slot's ``n``-token draft (needs a profile): what its drafts
        saved widens it, the quiet steps before its first draft halve its base budget."""
        return sel.risk_cap(self.profile, rec.saved, n, rec.quiet)

    # -- estimates -----------------------------------------------------------------------------

    def rate(self, rec: SlotSpeculation, key: Key, n: int, hint: list[float] | None) -> float:
        """Expected tokens per second of the slot's step verifying the best prefix of an ``n``-token
        draft of ``key`` (``selection.best_rate``; needs a profile): how drafts compete."""
        return sel.best_rate(self.q(rec, key, n, hint), self.profile)

    def confidence(self, rec: SlotSpeculation, drafted: Drafted) -> list[float]:
        """Cumulative acceptance probabilities of the slot's current draft, as many as the slot
        may risk verifying (``risk_cap``)."""
        n = self.risk_cap(rec, drafted.n) if self.profile is not None else drafted.n
        return self.q(rec, drafted.key, n, drafted.hint)

    def q(self, rec: SlotSpeculation, key: Key, n: int, hint: list[float] | None = None) -> list[float]:
        """Cumulative acceptance estimates of an ``n``-token draft of ``key``; ``hint``: the
        drafter's own estimates (conditional, per position), the prior instead of ``PRIOR_P``."""
        glob = self.drafter_wide.get(key) or sel.Counts()
        own = rec.counts.get(key)
        n_sure = sel.probe_rows(self.profile) if self.probe_due(rec, rec.probes.get(key)) else 0
        if hint is not None:
            p = glob.position_probs(hint[:n], sel.PRIOR_WEIGHT)
            if own is not None:
                p = own.position_probs(p, sel.SLOT_WEIGHT)
            return sel.product(p, n_sure)
        p = glob.probs(self.family_prior(key), sel.PRIOR_WEIGHT)
        if own is not None:
            p = own.probs(p, sel.SLOT_WEIGHT)
        return sel.cumulative(p, n, n_sure)

    def family_prior(self, key: Key) -> list[float] | None:
        """The drafter's other kinds of draft, pooled: what a kind it has not drafted yet is first
        expected to do (None: the drafter has no other kind with data; then ``PRIOR_P``)."""
        pooled = sel.Counts()
        for (name, tag), c in self.drafter_wide.items():
            if name == key[0] and tag != key[1]:
                pooled.add(c)
        return pooled.probs(None, sel.PRIOR_WEIGHT) if any(pooled.tried) else None

    # -- probes --------------------------------------------------------------------------------

    def probe_due(self, rec: SlotSpeculation, probe: sel.Probe | None) -> bool:
        """Whether the slot's next draft of a kind is a probe: its denials say so (``Probe.due``) and
        the slot's probe credit covers a probe's cost (``selection.PROBE_SHARE``)."""
        if probe is None or not probe.due():
            return False
        return self.profile is None or rec.credit >= sel.probe_cost(self.profile)

    def denied(self, rec: SlotSpeculation, key: Key) -> None:
        """The step verifies none of the slot's current draft (of ``key``): a denial, and the draft is
        scored like a rival's at the next draft call."""
        rec.probes.setdefault(key, sel.Probe()).denied()
        rec.end_draft()
        rivals = rec.rivals
        if rivals is not None:
            rivals.drafts.append((key, list(rivals.winner)))  # a copy: the step cuts the draft it got

    def verifying(self, rec: SlotSpeculation, key: Key) -> None:
        """The step verifies some of the slot's current draft (of ``key``): if a probe is due, this
        is it, paid from the slot's credit."""
        probe = rec.probes.setdefault(key, sel.Probe())
        if self.probe_due(rec, probe):
            probe.probing = True
            if self.profile is not None:
                rec.credit -= sel.probe_cost(self.profile)

    # -- learning ------------------------------------------------------------------------------

    def learn_verified(self, rec: SlotSpeculation, key: Key, n_verified: int, n_accepted: int) -> None:
        """The slot's draft of ``key`` was verified for ``n_verified`` tokens, the first ``n_accepted``
        accepted (``n_verified`` > 0)."""
        self.drafter_wide.setdefault(key, sel.Counts()).update(n_verified, n_accepted, sel.GLOBAL_DECAY)
        rec.counts.setdefault(key, sel.Counts()).update(n_verified, n_accepted, sel.SLOT_DECAY)
        rec.probes.setdefault(key, sel.Probe()).verified(n_verified, n_accepted, sel.probe_rows(self.profile))
        if self.profile is not None:
            rec.saved += sel.saved_s(self.profile, n_verified, n_accepted)
        rivals = rec.rivals
        if rivals is not None and n_accepted == n_verified < len(rivals.winner):
            rec.rivals = rivals._replace(tail=(key, n_verified))

    def score_rivals(self, rec: SlotSpeculation, history: Sequence[int], last_token: int) -> None:
        """Score the drafts of the slot's last draft call that nothing verified against what the
        target produced after that call's context: ``history`` must extend it (else nothing is known)."""
        rivals = rec.take_rivals()
        if rivals is None:
            return
        n_ctx, last, drafts = rivals.n_ctx, rivals.last, rivals.drafts
        if (not drafts and rivals.tail is None) or len(history) <= n_ctx or history[n_ctx] != last:
            return
        truth = list(history[n_ctx + 1 : n_ctx + 1 + sel.BIN_EDGES[-1]]) + [last_token]
        for key, tokens in drafts:
            n, m = min(len(tokens), len(truth)), common_prefix(tokens, truth)
            self.drafter_wide.setdefault(key, sel.Counts()).update(n, m, sel.GLOBAL_DECAY)
            rec.counts.setdefault(key, sel.Counts()).update(n, m, sel.SLOT_DECAY)
        if rivals.tail is not None:
            # The verified part was counted by learn_verified(); the first position the step cut
            # off is known now too.
            key, start = rivals.tail
            tokens = rivals.winner
            n, m = min(len(tokens), len(truth)), common_prefix(tokens, truth)
            self.drafter_wide.setdefault(key, sel.Counts()).extend(start, n, m)
            rec.counts.setdefault(key, sel.Counts()).extend(start, n, m)

    # -- the drafter-wide estimates, for /props and --spec-estimates-file ------------------------

    def estimates(self) -> dict[str, list[float]]:
        """Drafter-wide acceptance per position bin, per drafter (and tag): for /props."""
        return {f"{n}:{t}" if t else n: [round(p, 3) for p in c.probs(None, sel.PRIOR_WEIGHT)]
                for (n, t), c in list(self.drafter_wide.items())}  # a copy: /props reads while the engine steps

    def snapshot(self) -> dict[Key, sel.Counts]:
        """A copy of the drafter-wide estimates (engine thread), for ``--spec-estimates-file``."""
        return {key: sel.Counts(list(c.acc), list(c.tried)) for key, c in self.drafter_wide.items()}

    def adopt(self, estimates: dict[Key, sel.Counts]) -> None:
        """Start from saved drafter-wide estimates (before serving): a restart drafts as far as the
        server had learned to. Estimates of drafters or tags the chain has no more are kept (a later
        save writes them back), so a restart with fewer types loses nothing."""
        self.drafter_wide.update(estimates)
