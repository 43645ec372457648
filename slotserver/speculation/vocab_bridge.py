"""Between a target and a draft model: are their vocabularies the same, and if not, convert through text.

``incompatibility`` is llama.cpp's ``common_speculative_are_compatible`` (same tokenizer type, same
BOS/EOS handling, vocabulary sizes within 128, identical token text from id 5 on). Where it holds,
token ids pass through unchanged (``SameVocab``). Where it does not, llama-server refuses the draft
model; we bridge instead (``TextBridge``): the slot's target tokens are detokenized and tokenized
with the draft vocabulary, and a draft is detokenized and tokenized with the target's. Output stays
lossless either way, because the target verifies every draft token; the bridge only decides how
good the drafts are.

Pure code: the tokenizers are passed in as functions, so every rule is tested with toy ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from slotserver.engine.batch import common_prefix

VOCAB_MAX_SIZE_DIFFERENCE = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
VOCAB_CHECK_START_TOKEN_ID = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID

# Uncommitted target tokens are re-converted on every draft call; past this many without a word
# boundary (text without spaces, e.g. Chinese) they are committed at the last character start.
MAX_TAIL_TOKENS = 16
WORD_STARTS = (b" ", b"\n", b"\t")


class VocabView(Protocol):
    vocab_type: int
    n_tokens: int
    add_bos: bool
    add_eos: bool
    bos: int
    eos: int

    def text(self, token: int) -> bytes: ...


def incompatibility(tgt: VocabView, dft: VocabView) -> str:
    """Why the draft's token ids do not mean the target's, or "" when they do (llama.cpp's check)."""
    if tgt.vocab_type != dft.vocab_type:
        return f"tokenizer types differ ({tgt.vocab_type} vs {dft.vocab_type})"
    if tgt.add_bos != dft.add_bos or (tgt.add_bos and tgt.bos != dft.bos):
        return "BOS handling differs"
    if tgt.add_eos != dft.add_eos or (tgt.add_eos and tgt.eos != dft.eos):
        return "EOS handling differs"
    if abs(tgt.n_tokens - dft.n_tokens) > VOCAB_MAX_SIZE_DIFFERENCE:
        return f"vocabulary sizes differ ({tgt.n_tokens} vs {dft.n_tokens})"
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(tgt.n_tokens, dft.n_tokens)):
        if tgt.text(i) != dft.text(i):
            return f"token {i} differs ({tgt.text(i)!r} vs {dft.text(i)!r})"
    return ""


class SameVocab:
    """Identical vocabularies: the draft model reads and writes target token ids (up to the first id
    past the target's vocabulary, which may be up to 128 tokens smaller)."""

    is_bridge = False

    def __init__(self, n_target: int) -> None:
        self.n_target = n_target

    def view(self, history: Sequence[int]) -> Sequence[int]:
        return history

    def to_target(self, draft: list[int]) -> list[int]:
        for i, t in enumerate(draft):
            if t >= self.n_target:
                return draft[:i]
        return draft


@dataclass(slots=True)
class _Converted:
    """One slot's history as converted so far."""

    tgt: list[int] = field(default_factory=list)  # target tokens seen (a prefix of the slot's history)
    marks: list[tuple[int, int]] = field(default_factory=list)  # (n target, n draft) commit points
    dft: list[int] = field(default_factory=list)  # draft tokens of the committed target tokens


class TextBridge:
    """Different vocabularies: convert through text, incrementally and stably, for one slot.

    The slot's target history is converted in committed pieces that end where the next target token
    starts a word (its text begins with whitespace), so a word is tokenized whole and a converted
    piece never changes: the draft context keeps its KV entries for it. The text after the last
    commit is converted afresh on each call (``view``). When the target history changes other than
    by appending (a new prompt, a context shift), conversion rolls back to the last commit before
    the first changed token.

    ``tgt_piece(token)`` is the token's text as bytes (b"" for tokens the draft should not see,
    such as the target's BOS); ``dft_tokenize(text)`` gives draft tokens without BOS;
    ``dft_piece`` and ``tgt_tokenize`` go the other way. ``dft_prefix`` starts every converted
    history (the draft's BOS when its vocabulary wants one).
    """

    is_bridge = True

    def __init__(self, tgt_piece: Callable[[int], bytes], dft_tokenize: Callable[[str], list[int]],
                 dft_piece: Callable[[int], bytes], tgt_tokenize: Callable[[str], list[int]],
                 dft_is_eog: Callable[[int], bool], dft_prefix: Sequence[int] = ()) -> None:
        self.tgt_piece, self.dft_tokenize = tgt_piece, dft_tokenize
        self.dft_piece, self.tgt_tokenize, self.dft_is_eog = dft_piece, tgt_tokenize, dft_is_eog
        self._conv = _Converted(marks=[(0, len(dft_prefix))], dft=list(dft_prefix))

    def view(self, history: Sequence[int]) -> list[int]:
        """Draft tokens for the target tokens ``history`` (committed pieces plus the converted tail)."""
        c = self._conv
        n = len(c.tgt)
        if len(history) < n or list(history[:n]) != c.tgt:
            n = common_prefix(c.tgt, history)
            # A commit at n was made because the old token n started a word; the new one may not.
            while len(c.marks) > 1 and c.marks[-1][0] >= n:
                c.marks.pop()
            del c.tgt[n:]
            del c.dft[c.marks[-1][1] :]
        c.tgt.extend(history[len(c.tgt) :])
        self._commit()
        tail = _whole_chars(b"".join(self.tgt_piece(t) for t in c.tgt[c.marks[-1][0] :]))
        return c.dft + (self.dft_tokenize(tail.decode("utf-8")) if tail else [])

    def _commit(self) -> None:
        c = self._conv
        start = c.marks[-1][0]
        pieces = [self.tgt_piece(t) for t in c.tgt[start:]]
        data = b"".join(pieces)
        offsets = [0]
        for piece in pieces:
            offsets.append(offsets[-1] + len(piece))
        cut = 0  # commit pieces[:cut]
        for j in range(1, len(pieces)):
            if data[offsets[j] : offsets[j] + 1] in WORD_STARTS:
                cut = j
        if len(pieces) - cut > MAX_TAIL_TOKENS:  # no word boundary for long: cut at the last character start
            for j in range(len(pieces) - 1, cut, -1):
                if offsets[j] < len(data) and data[offsets[j]] & 0xC0 != 0x80:
                    cut = j
                    break
        if cut == 0:
            return
        text = data[: offsets[cut]].decode("utf-8", errors="replace")
        c.dft.extend(self.dft_tokenize(text) if text else [])
        c.marks.append((start + cut, len(c.dft)))

    def to_target(self, draft: list[int]) -> list[int]:
        """Target tokens for the draft's text (up to its first end-of-generation token, whole characters only)."""
        out = []
        for t in draft:
            if self.dft_is_eog(t):
                break
            out.append(self.dft_piece(t))
        text = _whole_chars(b"".join(out))
        return self.tgt_tokenize(text.decode("utf-8")) if text else []


def _whole_chars(data: bytes) -> bytes:
    """``data`` without a trailing incomplete UTF-8 character (a multi-byte character split across tokens)."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return data[:cut]
    return data.decode("utf-8", errors="ignore").encode("utf-8")
