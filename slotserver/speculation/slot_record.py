"""One request's speculation on one slot: everything the chain and its estimator know of it, in one record.

``DraftChain.slots`` maps a slot to its ``SlotSpeculation``; the chain owns it, the estimator
(``estimator.py``) reads and updates the estimation fields in it. A record lives as long as the
slot's request: it is dropped with one ``pop`` when the request ends (``DraftChain.finish``) or
its history starts over (``DraftChain.begin``, also after a context shift), so nothing of one
request can leak into the next. What outlives requests is not here: the drafter-wide estimates
(``Estimator``) and the drafters' own structures.

Two fields live for less than the request, and are cleared on their own:
- ``draft``, the slot's current draft, until it is verified (``accept``) or cut to nothing
  (``selected``), or the next ``draft`` call replaces it (``end_draft``);
- ``rivals``, the last draft call's drafts that nothing verified, until the next draft call scores
  them against what came after (``take_rivals``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from slotserver.speculation.selection import Counts, Probe

Key = tuple[str, str]  # (drafter type name, the drafter's tag for that kind of draft)


class Drafted(NamedTuple):
    """The slot's current draft: whose it is, how long, and its drafter's own estimates if any
    (``selection.hint``: conditional acceptance per position)."""

    key: Key
    n: int
    hint: list[float] | None


class Unverified(NamedTuple):
    """A slot's last draft call (``Estimator.score_rivals``): the context it followed (length, last
    token), the drafts nothing will verify, the winner's tokens, whole (scored too if the step cuts
    it to nothing), and ``tail``: (key, n) when the step verified only the winner's first n tokens
    and accepted them all, so the token the target sampled next scores the winner's position n."""

    n_ctx: int
    last: int
    drafts: list[tuple[Key, list[int]]]
    winner: list[int]
    tail: tuple[Key, int] | None = None


@dataclass(slots=True)
class SlotSpeculation:
    """One slot's speculation in its current request. Owned by ``DraftChain`` (engine thread)."""

    draft: Drafted | None = None  # the current draft (the draft model's too), None: none
    counts: dict[Key, Counts] = field(default_factory=dict)  # acceptance per kind of draft, this request
    probes: dict[Key, Probe] = field(default_factory=dict)  # denials in a row per kind, and the probe due
    # seconds the verified drafts saved this request, plus RISK_SHARE of a plain step a step since
    # the first draft (selection.risk_cap)
    saved: float = 0.0
    quiet: int = 0  # steps of the answer before any drafter had a draft (selection.RISK_HALF)
    drafted: bool = False  # the slot has had a draft this request (quiet steps ended)
    credit: float = 0.0  # seconds the slot may still spend on probes (PROBE_SHARE of a plain step a step)
    rivals: Unverified | None = None  # the last draft call's unverified drafts

    def end_draft(self) -> Drafted | None:
        """The current draft is over (verified, cut to nothing or replaced): returns it."""
        drafted, self.draft = self.draft, None
        return drafted

    def take_rivals(self) -> Unverified | None:
        """The last draft call's unverified drafts, to be scored once (returns and forgets them)."""
        rivals, self.rivals = self.rivals, None
        return rivals
