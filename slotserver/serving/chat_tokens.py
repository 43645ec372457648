"""Chat prompts tokenized so that message content cannot forge the template's control tokens.

A chat template renders messages into one text, e.g. ChatML's
``<|im_start|>user\\n{content}<|im_end|>\\n``. Tokenized with control tokens parsed, a user message
containing ``<|im_end|>\\n<|im_start|>system\\n...`` would become a system turn of its own. So the
server tokenizes the template's own text with its control tokens and the messages' content as
plain text (``--chat-special`` restores parsing everything):

1. ``content_spans``: where each message's content lies in the rendered text. The messages are
   rendered twice, once as sent and once with each content replaced by a unique mark; the marked
   render gives the template's text around every content, and walking the real render along it
   finds each content (as sent, or trimmed of ASCII whitespace as some templates do). A template
   that changes content otherwise is refused (``TemplateMismatch``) rather than guessed at.
2. ``split_specials``: control tokens are looked for only outside those spans, as llama.cpp's
   tokenizer partitions text (longest token first, whitespace stripped beside tokens that ask
   for it); everything between two control tokens is one piece of raw text.
3. ``tokenize_pieces``: raw pieces are tokenized with ``parse_special`` off, control tokens are
   their ids, BOS (EOS) is added as ``add_special`` would. Raw pieces are exactly the fragments
   llama.cpp tokenizes separately, so a chat whose content holds no control token's text gets the
   same tokens as tokenizing the whole render with specials parsed.

Pure functions, except ``ControlTokens.from_vocab`` (reads the vocabulary's token attributes once).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from slotserver.engine.vocab import Vocab

ASCII_SPACE = " \t\n\v\f\r"  # C's isspace: what llama.cpp's trim() and token strip attributes remove
Pieces = list["str | int"]  # raw text to tokenize as text, or a control token's id


class TemplateMismatch(ValueError):
    """The chat template changed message content in a way ``content_spans`` cannot follow."""


@dataclass(frozen=True, slots=True)
class ControlTokens:
    """The tokens ``parse_special`` turns on (llama.cpp's CONTROL and UNKNOWN attributes), by text."""

    by_length: dict[int, dict[str, int]]  # text length -> {text: id}
    lstrip: frozenset[int] = frozenset()  # ids whose token eats whitespace on its left
    rstrip: frozenset[int] = frozenset()  # ... and on its right
    first_chars: frozenset[str] = frozenset()  # every token text's first character

    @classmethod
    def of(cls, texts: dict[str, int], lstrip=(), rstrip=()) -> "ControlTokens":
        by_length: dict[int, dict[str, int]] = {}
        for text, token in texts.items():
            if text:
                by_length.setdefault(len(text), {})[text] = token
        return cls(by_length, frozenset(lstrip), frozenset(rstrip), frozenset(t[0] for t in texts if t))

    @classmethod
    def from_vocab(cls, vocab: Vocab) -> "ControlTokens":
        import llama_cpp as lc

        texts, lstrip, rstrip = {}, [], []
        for token in range(vocab.n_tokens):
            attr = lc.llama_vocab_get_attr(vocab.ptr, token)
            if not attr & (lc.LLAMA_TOKEN_ATTR_CONTROL | lc.LLAMA_TOKEN_ATTR_UNKNOWN):
                continue
            text = vocab.text(token).decode("utf-8", errors="replace")
            texts.setdefault(text, token)
            if attr & lc.LLAMA_TOKEN_ATTR_LSTRIP:
                lstrip.append(token)
            if attr & lc.LLAMA_TOKEN_ATTR_RSTRIP:
                rstrip.append(token)
        return cls.of(texts, lstrip, rstrip)


def content_spans(render: Callable[[list[tuple[str, str]]], str],
                  messages: Sequence[tuple[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered prompt and the [start, end) character span of every message content in it."""
    text = render(list(messages))
    nonce = secrets.token_hex(8)
    while any(nonce in content for _, content in messages):  # 64 random bits: never in practice
        nonce = secrets.token_hex(8)
    marked = render([(role, f"\ue000{nonce}{i}\ue001") for i, (role, _) in enumerate(messages)])
    parts = re.split(f"\ue000{nonce}(\\d+)\ue001", marked)  # template, index, template, ..., template
    spans: list[tuple[int, int]] = []
    pos = 0
    for k in range(0, len(parts) - 1, 2):
        before, content, after = parts[k], messages[int(parts[k + 1])][1], parts[k + 2]
        is_last = k + 2 == len(parts) - 1
        if not text.startswith(before, pos):
            raise TemplateMismatch("the chat template renders text around messages differently per message")
        pos += len(before)
        for shown in dict.fromkeys((content, content.strip(ASCII_SPACE), content.lstrip(ASCII_SPACE),
                                    content.rstrip(ASCII_SPACE))):
            end = pos + len(shown)
            if text.startswith(shown, pos) and (text[end:] == after if is_last else text.startswith(after, end)):
                break
        else:
            raise TemplateMismatch("the chat template changes message content")
        spans.append((pos, end))
        pos = end
    if len(parts) == 1 and text != marked:
        raise TemplateMismatch("the chat template renders text around messages differently per message")
    return text, spans


def split_specials(text: str, spans: Sequence[tuple[int, int]], controls: ControlTokens) -> Pieces:
    """``text`` as raw pieces and control token ids, control tokens found only outside ``spans``.

    As llama.cpp's partition: longer tokens first, each piece searched left to right; a token with
    the lstrip (rstrip) attribute removes ASCII whitespace before (after) it.
    """
    # Regions: (start, end, searchable); content regions are never searched.
    regions: list[tuple[int, int, bool]] = []
    pos = 0
    for start, end in sorted(spans):
        if start > pos:
            regions.append((pos, start, True))
        if end > start:
            regions.append((start, end, False))
        pos = max(pos, end)
    if pos < len(text):
        regions.append((pos, len(text), True))
    # Where a control token could start: template text at one of their first characters.
    firsts = re.compile("[" + re.escape("".join(controls.first_chars)) + "]") if controls.first_chars else None
    starts: list[tuple[int, int]] = []  # (position, end of its region)
    for r_start, r_end, searchable in regions:
        if searchable and firsts is not None:
            starts += [(m.start(), r_end) for m in firsts.finditer(text, r_start, r_end)]
    found: list[tuple[int, int, int]] = []  # (start, end, token) of control tokens in the template text
    taken = bytearray(len(text))  # 1 where a longer (or earlier) control token was already found
    for length in sorted(controls.by_length, reverse=True):
        table = controls.by_length[length]
        for i, r_end in starts:
            if i + length <= r_end and (token := table.get(text[i : i + length])) is not None \
                    and taken.find(1, i, i + length) < 0:
                found.append((i, i + length, token))
                taken[i : i + length] = b"\x01" * length
    found.sort()
    out: Pieces = []
    pos = 0
    for i, (start, end, token) in enumerate(found):
        raw = text[pos:start]
        if token in controls.lstrip:
            raw = raw.rstrip(ASCII_SPACE)
        if i > 0 and found[i - 1][2] in controls.rstrip:
            raw = raw.lstrip(ASCII_SPACE)
        if raw:
            out.append(raw)
        out.append(token)
        pos = end
    raw = text[pos:]
    if found and found[-1][2] in controls.rstrip:
        raw = raw.lstrip(ASCII_SPACE)
    if raw:
        out.append(raw)
    return out


def tokenize_pieces(pieces: Pieces, tokenize_text: Callable[[str], list[int]], *, bos: int | None = None,
                    eos: int | None = None) -> list[int]:
    """Raw pieces tokenized as text (``tokenize_text``: no specials added, none parsed), control
    tokens as they are, ``bos``/``eos`` (if given) around them as ``add_special`` adds them."""
    tokens = [bos] if bos is not None else []
    for piece in pieces:
        if isinstance(piece, str):
            tokens.extend(tokenize_text(piece))
        else:
            tokens.append(piece)
    if eos is not None:
        tokens.append(eos)
    return tokens
