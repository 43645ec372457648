"""When does a draft model's token pay for itself? The cost model of draft-model speculation.

Drafting one more token costs a draft-model decode (shared by every slot drafting in that decode)
plus one more verified row in the target's batch; it gains one token of plain decoding time, but
only if it is accepted. So it pays when its acceptance probability exceeds

    threshold = (t_draft / n_drafting + t_row) / t_token

where t_token is what one token costs without drafting (a step of n slots, one row each, divided by
n); the drafter multiplies it by a margin (``PAY_MARGIN``) against the noise of the measured costs.
The draft model's own probability of its token stands in for the acceptance probability, and the
product along the draft for the chance that the whole prefix is accepted: drafting stops at the
first token whose product falls below the threshold. A threshold of 1 or more means no token can
pay: the draft model is not run at all.

This is Leviathan et al.'s analysis (expected speedup ``(1 - a**(g+1)) / ((1 - a) * (g*c + 1))``
for acceptance rate a, draft length g, cost ratio c of a draft to a target step) with the verify
cost made explicit: on a CPU a verified row is not free (``t_row``, a large share of a step:
docs/measurements.md).
``Payoff`` then checks per slot what the calls really saved.
Pure code; ``draft_model.calibrate`` measures the four times once at start-up, and the one-row
decode times then follow what serving measures (``observed``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

# A draft token must be expected to save this much more than it costs: near a threshold of 1 the
# gain is a few percent of a token, less than the measurement noise of the costs themselves.
PAY_MARGIN = 1.1
# Weight of a new observation in the running averages of the one-row decode times.
OBSERVE_WEIGHT = 0.05


@dataclass(frozen=True, slots=True)
class DraftCosts:
    t_target_s: float  # target llama_decode of one row (an output)
    t_row_s: float  # each further output row in the same target decode
    t_draft_s: float  # draft-model llama_decode of one row
    t_draft_row_s: float  # each further row in the same draft decode (another drafting slot)

    @property
    def c(self) -> float:
        """Leviathan's cost ratio: a draft-model step over a target step."""
        return self.t_draft_s / self.t_target_s

    def t_token(self, n_plain: int) -> float:
        """What one token of one slot costs without drafting, with ``n_plain`` slots in the step."""
        n_plain = max(n_plain, 1)
        return (self.t_target_s + self.t_row_s * (n_plain - 1)) / n_plain

    def threshold(self, n_plain: int, n_drafting: int) -> float:
        """Acceptance probability a further draft token needs to pay, with ``n_plain`` slots
        generating in the step and ``n_drafting`` of them drafting together."""
        n_drafting = max(n_drafting, 1)
        t_draft = (self.t_draft_s + self.t_draft_row_s * (n_drafting - 1)) / n_drafting
        return (t_draft + self.t_row_s) / self.t_token(n_plain)

    def observed(self, *, t_target_s: float | None = None, t_draft_s: float | None = None) -> DraftCosts:
        """These costs moved towards a one-row decode time measured while serving (start-up
        calibration runs on an idle context; serving adds the rest of the step around it)."""
        w = OBSERVE_WEIGHT
        out = self
        if t_target_s is not None:
            out = replace(out, t_target_s=(1 - w) * out.t_target_s + w * t_target_s)
        if t_draft_s is not None:
            out = replace(out, t_draft_s=(1 - w) * out.t_draft_s + w * t_draft_s)
        return out

    def as_dict(self) -> dict:
        out = {k[:-2] + "_ms": round(v * 1e3, 3) for k, v in asdict(self).items()}
        return {**out, "c": round(self.c, 3), "pays_above_1_slot": round(self.threshold(1, 1) * PAY_MARGIN, 3)}


def expected_speedup(alpha: float, gamma: int, c: float, r: float = 0.0) -> float:
    """Expected speedup of drafting ``gamma`` tokens accepted with probability ``alpha`` each, a draft step
    costing ``c`` target steps and each verified row ``r`` target steps (Leviathan et al. with r = 0)."""
    if alpha >= 1.0:
        tokens = gamma + 1.0
    else:
        tokens = (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return tokens / (gamma * c + 1 + gamma * r)


# The payoff guard: a slot whose draft-model calls lost time on average (EWMA over calls) stops
# asking for PAYOFF_SKIP_MIN steps, doubling while it keeps losing, up to PAYOFF_SKIP_MAX; then
# one call probes whether drafting pays again.
PAYOFF_WEIGHT = 0.3
PAYOFF_MIN_CALLS = 2
PAYOFF_SKIP_MIN = 4
PAYOFF_SKIP_MAX = 256


@dataclass(slots=True)
class Payoff:
    """Per slot: what its draft-model calls really saved, measured, with ``--spec-draft-when pays``.

    The per-token threshold trusts the draft model's probabilities; this guard checks the outcome:
    accepted tokens times the time a token costs without drafting, minus the call's time and the
    verified rows' cost. It catches what the threshold cannot see, such as a confident draft model
    that is often wrong, or a first draft decode that yields nothing.
    """

    gain_s: float = 0.0  # EWMA of seconds saved per call (negative: drafting cost time)
    n_calls: int = 0  # calls since the last skip
    n_skip: int = 0  # steps still to skip
    next_skip: int = PAYOFF_SKIP_MIN

    def settle(self, gain_s: float) -> None:
        self.gain_s = gain_s if self.n_calls == 0 else (1 - PAYOFF_WEIGHT) * self.gain_s + PAYOFF_WEIGHT * gain_s
        self.n_calls += 1
        if self.gain_s >= 0:
            self.next_skip = PAYOFF_SKIP_MIN
        elif self.n_calls >= PAYOFF_MIN_CALLS:
            self.n_skip, self.next_skip = self.next_skip, min(2 * self.next_skip, PAYOFF_SKIP_MAX)
            self.gain_s, self.n_calls = 0.0, 0

    def skips(self) -> bool:
        if self.n_skip > 0:
            self.n_skip -= 1
            return True
        return False
