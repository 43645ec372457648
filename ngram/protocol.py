"""The drafter protocol shared by every draftless drafter (after llama.cpp's ``common_speculative_impl``).

Every method of ``Drafter`` is required; a drafter that has nothing to do in one of them writes the
no-op out. The methods of ``OptionalDrafterHooks`` are optional: the chain
(``slotserver/speculation/chain.py``) looks each one up with ``hasattr`` and, where a drafter lacks
it, does what its docstring calls the default. These four are every optional method the chain
uses (``tests/slotserver/speculation/test_drafter_protocol.py`` checks that).
Token sequences are plain ``list[int]``; ``slot`` is the integer slot (sequence) id.
"""

from __future__ import annotations

from typing import Protocol, Sequence


class Drafter(Protocol):
    """A draft proposer. The chain calls it; it never decodes, samples or counts anything itself."""

    # No name attribute: the registry (slotserver/speculation/registry.py) names every drafter.

    def begin(self, slot: int, prompt: Sequence[int]) -> None:
        """A slot finished processing ``prompt`` (all tokens now in the KV cache) and starts generating."""
        ...

    def draft(self, slot: int, history: Sequence[int], last_token: int, n_max: int) -> list[int]:
        """Propose up to ``n_max`` tokens that follow ``history + [last_token]``.

        ``history`` is everything in the slot's KV cache (prompt and accepted output); ``last_token``
        is the token just sampled and not yet decoded. Return ``[]`` for no draft; fewer than
        ``n_max`` tokens is fine.
        """
        ...

    def accept(self, slot: int, n_accepted: int, is_other: bool) -> None:
        """Verification of the slot's last draft accepted ``n_accepted`` tokens.

        ``is_other`` is True when another drafter produced that draft (this one was not asked or
        had nothing); drafters that adapt only to their own drafts return early then.
        """
        ...


class OptionalDrafterHooks(Protocol):
    """Methods a drafter may add to ``Drafter``; each is looked up on its own (a drafter has any of them)."""

    def draft_tag(self, slot: int) -> str:
        """Which kind of draft the slot's last one was (say ngram-mod's ``pool`` or ``cold``): the
        chain keeps separate acceptance estimates per kind. Default: "" (one kind)."""
        ...

    def draft_probs(self, slot: int) -> list[float]:
        """The drafter's own cumulative acceptance estimates of the slot's last draft, one per token
        (non-increasing): the chain's prior for that draft, position by position. Default, or a list
        of another length than the draft the chain kept: the chain's counts alone."""
        ...

    def cut(self, slot: int, n_verified: int) -> None:
        """Called before ``accept`` on the drafter whose draft it was: the step verified only its first
        ``n_verified`` tokens. Default: nothing (``accept`` alone)."""
        ...

    def finish(self, slot: int, history: Sequence[int]) -> None:
        """The slot's request ended with ``history`` (prompt, output and the last sampled token), for
        drafters that learn whole requests. Default: nothing (the next ``begin`` is the first word)."""
        ...
