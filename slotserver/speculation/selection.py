"""Expected-value drafting: how likely each draft token is to be accepted, and how many to verify.

**Acceptance estimates.** A draft's i-th token is accepted only if every token before it was; what
we estimate per position is that conditional probability, per drafter (and per kind of draft a
drafter tells apart, its tag) and per slot. Positions are pooled in bins that double in width
(0, 1, 2-3, 4-7, ... 64+). A bin without data of its own borrows the bin before it: once the first
positions of a drafter's drafts keep being accepted, its later positions are trusted as far, so
draft lengths grow as fast as the evidence allows. A slot's estimate leans on the drafter's
estimate over all slots (``SLOT_WEIGHT`` tokens' worth), which leans on ``PRIOR_P``. Older outcomes
fade (``*_DECAY`` per verified draft): acceptance changes within an answer.

**Drafters that estimate.** A drafter that gives its own probability per draft token
(``draft_probs``: the suffix drafter's frequencies) has those estimates as the prior, position by
position, instead of ``PRIOR_P`` and the bin before: a draft every earlier occurrence agreed on is
trusted from its first use (say, after a restart with a saved structure), and the counts correct
the drafter where it is over-confident. Its drafts are told apart by how sure the drafter was of
the first token (``hint_class``), so sure and unsure drafts learn separately.

**Selection.** Each generating slot offers its draft with the cumulative probabilities q_1 >= q_2
>= ... (q_i = chance that the first i draft tokens are all accepted, so verifying token i yields
q_i tokens in expectation). The step verifies the rows with the highest q first, across all slots,
as long as the expected tokens of the step per second of its estimated duration (the verify-cost
profile) still grows: rows go where they buy the most, and a draft that does not pay is not
verified at all. Where each slot has its own KV stream, llama.cpp runs a step whose slots bring
different numbers of rows as several graphs, each reading the weights again (``stream_ubatches``);
the estimate counts them, so one slot's long draft beside others' single rows must pay for that.

**Risk cap.** Estimates carried over from other requests can be confidently wrong about a new
one, and a long first draft rejected early costs many plain steps. So a slot's draft never risks
more than ``RISK_STEPS`` plain steps plus what its verified drafts of this request have saved so
far (``saved_s``, by the profile), plus ``RISK_SHARE`` of a plain step for every step the slot has
drafted in: a request loses at most a few plain steps and ``RISK_SHARE`` of its time to drafts that
never pay, whatever the estimates said, and one whose first drafts failed may draft again later in
its answer. The steps an answer goes before its first draft halve that ``RISK_STEPS`` every
``RISK_HALF`` of them: a short match that first turns up late in an answer with nothing to repeat
is more often a common phrase than the start of a copy.

**Probes.** A slot whose drafts of a kind keep being cut to nothing would never learn that they
started paying; after ``PROBE_MIN`` denials in a row (doubling while probes fail, up to
``PROBE_MAX``) its next draft of that kind is verified for ``probe_rows`` tokens regardless: as
many (up to ``PROBE_ROWS``) as cost at most ``PROBE_COST`` plain steps more than a plain step, and
never fewer than pay at all. A probe costs about a plain step, so probes are paid from one per-slot
credit of ``PROBE_SHARE`` of a plain step per step, whatever kind they probe: a probe waits until
the slot can afford it, and many kinds each probing on its own schedule cannot eat a short answer.
The chain scores drafts it did not verify anyway (``Estimator.score_rivals``), so a probe is rarely
what notices that drafts pay again.

Pure code, no llama.cpp: the estimator (``estimator.py``) keeps the estimates, ``serving/drafting.py``
runs the selection. The figures behind these rules: docs/measurements.md,
``slotserver/speculation/selection.py``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Sequence

from slotserver.engine.verify_costs import MIN_STEP_SHARE, VerifyProfile

BIN_EDGES = (1, 2, 4, 8, 16, 32, 64)  # bin b holds draft positions [BIN_EDGES[b-1], BIN_EDGES[b])
N_BINS = len(BIN_EDGES) + 1
PRIOR_P = 0.7  # a first position nobody has seen verified (docs/measurements.md)
PRIOR_WEIGHT = 2.0  # tokens' worth of the prior (or the bin before) in a drafter-wide bin
SLOT_WEIGHT = 2.0  # tokens' worth of the drafter-wide estimate in a slot's bin
GLOBAL_DECAY = 0.98  # per verified draft, drafter-wide
SLOT_DECAY = 0.9  # per verified draft of the slot
HINT_MIN, HINT_MAX = 0.05, 0.99  # a drafter's estimate as a prior: never certain either way
PROBE_MIN = 4
PROBE_MAX = 256
PROBE_ROWS = 4  # the most tokens a probe verifies (and the fewest the risk cap allows)
PROBE_COST = 0.5  # plain steps a probe may cost beyond the plain step it rides on
PROBE_SHARE = 0.01  # of a plain step, per step of a slot: what its probes may cost in all
RISK_STEPS = 8.0  # plain one-row steps a slot's draft may risk before its drafts have paid for more
RISK_SHARE = 0.05  # and this share of a plain step more for every step the slot has drafted in
RISK_HALF = 32.0  # steps of an answer without a draft that halve what its first draft may risk


def bin_of(pos: int) -> int:
    return bisect.bisect_right(BIN_EDGES, pos)


@dataclass(slots=True)
class Counts:
    """Decayed per-bin counts of draft positions verified (``tried``) and accepted (``acc``).

    A position counts as tried only if every position before it was accepted: the first rejected
    position is the last one tried (what follows it says nothing about the conditional probability).
    """

    acc: list[float] = field(default_factory=lambda: [0.0] * N_BINS)
    tried: list[float] = field(default_factory=lambda: [0.0] * N_BINS)

    def update(self, n_verified: int, n_accepted: int, decay: float) -> None:
        acc, tried = self.acc, self.tried
        for b in range(N_BINS):
            acc[b] *= decay
            tried[b] *= decay
        self.extend(0, n_verified, n_accepted)

    def extend(self, start: int, n_known: int, n_accepted: int) -> None:
        """Positions ``start``.. of a draft counted as ``update`` counts them all (``n_known`` of its
        tokens scored, the first ``n_accepted`` right), without decaying: the positions before
        ``start`` were counted, and decayed, when they were verified."""
        for pos in range(start, min(n_accepted + 1, n_known)):
            b = bin_of(pos)
            self.tried[b] += 1.0
            if pos < n_accepted:
                self.acc[b] += 1.0

    def add(self, other: Counts) -> None:
        for b in range(N_BINS):
            self.acc[b] += other.acc[b]
            self.tried[b] += other.tried[b]

    def probs(self, prior: Sequence[float] | None, weight: float) -> list[float]:
        """Per bin, the acceptance rate shrunk towards ``prior[b]`` (None: towards the bin before,
        the first towards ``PRIOR_P``) by ``weight`` tokens."""
        out: list[float] = []
        for b in range(N_BINS):
            p0 = prior[b] if prior is not None else (out[-1] if out else PRIOR_P)
            out.append((self.acc[b] + weight * p0) / (self.tried[b] + weight))
        return out

    def position_probs(self, prior: Sequence[float], weight: float) -> list[float]:
        """Per draft position, the acceptance rate of its bin shrunk towards ``prior[pos]`` by ``weight``."""
        acc, tried = self.acc, self.tried
        return [(acc[b] + weight * p0) / (tried[b] + weight) for b, p0 in ((bin_of(i), p) for i, p in enumerate(prior))]


def hint(cum: Sequence[float]) -> list[float]:
    """A drafter's cumulative probability estimates as conditional ones per position, clamped."""
    out, before = [], 1.0
    for q in cum:
        out.append(min(max(q / before if before > 0 else 0.0, HINT_MIN), HINT_MAX))
        before = q
    return out


def hint_class(cum: Sequence[float]) -> str:
    """How sure a drafter was of its draft's first token: its drafts learn separately per class."""
    first = cum[0] if cum else 0.0
    return "sure" if first >= 0.999 else "likely" if first >= 0.5 else "unsure"


def product(p: Sequence[float], n_sure: int = 0) -> list[float]:
    """Cumulative products of per-position probabilities; the first ``n_sure`` count as certain."""
    out, q = [], 1.0
    for pos, pp in enumerate(p):
        if pos >= n_sure:
            q *= pp
        out.append(q)
    return out


def cumulative(p_bins: Sequence[float], n: int, n_sure: int = 0) -> list[float]:
    """q_1..q_n for a draft of ``n`` tokens; the first ``n_sure`` count as certain (a probe)."""
    return product([p_bins[bin_of(pos)] for pos in range(n)], n_sure)


@dataclass(slots=True)
class Probe:
    """Per (slot, drafter, tag): drafts cut to nothing in a row, and when to verify one anyway."""

    n_denied: int = 0
    next_at: int = PROBE_MIN
    probing: bool = False  # the draft being verified is a probe

    def due(self) -> bool:
        return self.n_denied >= self.next_at

    def denied(self) -> None:
        self.n_denied += 1

    def verified(self, n_verified: int, n_accepted: int, rows: int = PROBE_ROWS) -> None:
        """``rows``: the probe's length (``probe_rows`` of the profile); a probe that verified more
        (its estimates allowed it) succeeds once that many were accepted."""
        if self.probing:
            ok = n_accepted >= min(n_verified, rows)
            self.next_at = PROBE_MIN if ok else min(2 * self.next_at, PROBE_MAX)
        self.n_denied, self.probing = 0, False


def best_rate(q: Sequence[float], profile: VerifyProfile) -> float:
    """Expected tokens per second of a one-slot step verifying the best prefix of a draft with
    cumulative probabilities ``q``: how one drafter's offer compares with another's."""
    tokens, best = 1.0, 1.0 / profile.step(1)
    for k, qk in enumerate(q, 1):
        tokens += qk
        best = max(best, tokens / profile.step(1 + k))
    return best


def _most_tokens(profile: VerifyProfile, k: int, n: int, extra_s: float) -> int:
    """From ``k``, the most draft tokens (up to ``n``) whose one-slot step costs at most ``extra_s``
    seconds more than a plain step."""
    t1 = profile.step(1)
    while k < n and profile.step(2 + k) - t1 <= extra_s:
        k += 1
    return k


def probe_rows(profile: VerifyProfile | None) -> int:
    """Draft tokens a probe verifies: the most, up to ``PROBE_ROWS``, whose step costs at most
    ``PROBE_COST`` plain steps more than a plain step, and never fewer than the fewest with which a
    draft that is all accepted beats a plain step (else no probe would ever be verified). Without
    a profile, ``PROBE_ROWS``."""
    if profile is None:
        return PROBE_ROWS
    return _most_tokens(profile, min_paying(profile), PROBE_ROWS, PROBE_COST * profile.step(1))


def probe_cost(profile: VerifyProfile) -> float:
    """Seconds a probe's step costs beyond a plain step."""
    return profile.step(1 + probe_rows(profile)) - profile.step(1)


def min_paying(profile: VerifyProfile) -> int:
    """The fewest draft tokens (up to ``PROBE_ROWS``) whose step, all of them accepted, yields more
    tokens per second than a plain step; 1 if none does (probes would never pay). Where a second row
    costs about a whole plain step that is 2, not 1."""
    t1 = profile.step(1)
    return next((k for k in range(1, PROBE_ROWS + 1) if (1 + k) / profile.step(1 + k) > 1 / t1), 1)


def saved_s(profile: VerifyProfile, n_verified: int, n_accepted: int) -> float:
    """Seconds a verified draft saved against plain steps (negative: it cost more than it gained)."""
    return (1 + n_accepted) * profile.step(1) - profile.step(1 + n_verified)


def risk_cap(profile: VerifyProfile, saved: float, n: int, quiet: int = 0) -> int:
    """How many of ``n`` draft tokens a slot may verify when its drafts have saved ``saved``
    seconds in this request and its answer went ``quiet`` steps before any drafter had a draft: the
    most whose extra cost over a plain step is within ``RISK_STEPS`` plain steps (halved every
    ``RISK_HALF`` quiet steps) plus ``saved``, and never fewer than a probe's (``probe_rows``)."""
    base = RISK_STEPS * 0.5 ** (quiet / RISK_HALF)
    return _most_tokens(profile, min(probe_rows(profile), n), n, base * profile.step(1) + saved)


@dataclass(slots=True)
class Offer:
    q: list[float]  # cumulative acceptance probability of each draft token, non-increasing
    depth: int  # tokens the slot has cached (attention cost of its rows)


def stream_ubatches(rows: Sequence[int]) -> list[tuple[int, int]]:
    """(rows, sequences) of each graph llama.cpp runs for one decode when every sequence has its own
    KV stream (no ``--kv-unified``): its ``split_equal`` takes a run of consecutive sequences that
    still have rows and the same number of rows from each (the fewest any of them has left), until
    none is left. ``rows``: each sequence's rows, in sequence order (taken as consecutive ids)."""
    left = list(rows)
    out: list[tuple[int, int]] = []
    while True:
        start = next((i for i, r in enumerate(left) if r > 0), None)
        if start is None:
            return out
        end = start
        while end < len(left) and left[end] > 0:
            end += 1
        m = min(left[start:end])
        out.append((m * (end - start), end - start))
        for i in range(start, end):
            left[i] -= m


def step_cost(profile: VerifyProfile, counts: Sequence[int], n_input: int, depth_rows: float, streams: bool) -> float:
    """Estimated seconds of a step where slot i verifies ``counts[i]`` draft tokens besides its
    sampled token. With ``streams`` the step is several graphs where the slots' rows differ
    (``stream_ubatches``), each paying for the weights again."""
    n = len(counts)
    if not streams:
        return profile.step(n + sum(counts), n, n_input, depth_rows)
    graphs = stream_ubatches([1 + c for c in counts])
    total = sum(profile.step(rows, seqs) for rows, seqs in graphs)
    extra = profile.t_input_row_s * n_input + profile.t_depth_row_s * depth_rows  # once per step
    return max(total + extra, MIN_STEP_SHARE * profile.t_rows_s[0])


def choose(offers: Sequence[Offer], profile: VerifyProfile, *, n_input: int = 0, room: int | None = None,
           streams: bool = False) -> list[int]:
    """How many draft tokens of each offer to verify in one step (see the module docstring).

    Every offer's slot decodes its sampled token anyway; ``n_input`` prompt rows share the step;
    ``room`` caps the draft rows (the batch); ``streams``: every slot has its own KV stream
    (``step_cost``). Ties go to fewer rows.
    """
    n = len(offers)
    if n == 0:
        return []
    items = sorted(((-qk, pos, i) for i, o in enumerate(offers) for pos, qk in enumerate(o.q)))
    if room is not None:
        items = items[: max(room, 0)]
    streams = streams and n > 1  # one sequence is one graph either way
    depth_rows = float(sum(o.depth - profile.depth for o in offers))
    tokens = float(n)
    counts = [0] * n
    best_k, best = 0, tokens / step_cost(profile, counts, n_input, depth_rows, streams)
    for k, (neg_q, _, i) in enumerate(items, 1):
        tokens -= neg_q
        depth_rows += offers[i].depth - profile.depth
        counts[i] += 1
        rate = tokens / step_cost(profile, counts, n_input, depth_rows, streams)
        if rate > best:
            best_k, best = k, rate
    counts = [0] * n
    for _, _, i in items[:best_k]:
        counts[i] += 1
    return counts
