"""The vocabulary bridge on toy tokenizers whose conversions can be checked exactly (no model).

Target vocabulary: byte strings with ids handed out on first sight; a history is a UTF-8 text cut
into pieces anywhere, even inside a character (all cuts: one token per byte). Id 0 is its BOS, which
the bridge sees as b"" as model_drafter maps it. Draft vocabulary: whole words, split before
" ", "\\n" and "\\t", ids handed out on first sight; id 0 is its end of generation, id 1 its BOS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from slotserver.speculation.vocab_bridge import (
    MAX_TAIL_TOKENS,
    VOCAB_MAX_SIZE_DIFFERENCE,
    WORD_STARTS,
    SameVocab,
    TextBridge,
    incompatibility,
)


class Table:
    """Ids for byte strings, handed out on first sight."""

    def __init__(self, *reserved: bytes) -> None:
        self.texts: list[bytes] = list(reserved)
        self.ids = {t: i for i, t in enumerate(reserved)}

    def id(self, text: bytes) -> int:
        if text not in self.ids:
            self.ids[text] = len(self.texts)
            self.texts.append(text)
        return self.ids[text]

    def piece(self, token: int) -> bytes:
        return self.texts[token]

    def join(self, tokens) -> bytes:
        return b"".join(self.texts[t] for t in tokens)


class Target(Table):
    BOS = 0

    def __init__(self) -> None:
        super().__init__(b"<bos>")

    def tokens(self, pieces: list[bytes]) -> list[int]:
        return [self.id(p) for p in pieces]

    def bytewise(self, text: str | bytes) -> list[int]:
        data = text.encode() if isinstance(text, str) else text
        return self.tokens([data[i : i + 1] for i in range(len(data))])


class Words(Table):
    """Draft vocabulary; with ``pairs`` two consecutive words make one token, so tokenizing a text
    whole differs from tokenizing it in pieces (as with real merges across a boundary)."""

    EOG, BOS = 0, 1

    def __init__(self, pairs: bool = False) -> None:
        super().__init__(b"</s>", b"<s>")
        self.pairs = pairs

    def tokenize(self, text: str) -> list[int]:
        words = [w for w in re.split(r"(?=[ \n\t])", text) if w]
        if self.pairs:
            words = ["".join(words[i : i + 2]) for i in range(0, len(words), 2)]
        return [self.id(w.encode()) for w in words]

    def words(self, tokens) -> list[str]:
        return [self.texts[t].decode() for t in tokens]


def make_bridge(tgt: Target, dft: Words, prefix=()) -> TextBridge:
    return TextBridge(
        tgt_piece=lambda t: b"" if t == Target.BOS else tgt.piece(t),
        dft_tokenize=dft.tokenize, dft_piece=dft.piece, tgt_tokenize=tgt.bytewise,
        dft_is_eog=lambda t: t == Words.EOG, dft_prefix=prefix)


def whole_chars(data: bytes) -> bytes:
    """``data`` less an incomplete last character (the histories are valid UTF-8 cut anywhere)."""
    return data.decode("utf-8", errors="ignore").encode()


def runs_fit(pieces: list[bytes]) -> bool:
    """No more than MAX_TAIL_TOKENS pieces in a row without one starting a word: every commit is
    then at a word start, and converting piecewise equals converting at once."""
    run = 0
    for p in pieces:
        run = 1 if p[:1] in WORD_STARTS else run + 1
        if run > MAX_TAIL_TOKENS:
            return False
    return True


# 1-, 2-, 3- and 4-byte characters and the three word starts.
ALPHABET = "ab" + "\u00e9\u4e2d\U0001f600" + " \n\t"


@st.composite
def pieces(draw, max_chars: int = 40) -> list[bytes]:
    """A text cut into pieces at random byte offsets, inside characters too."""
    data = draw(st.text(alphabet=ALPHABET, max_size=max_chars)).encode()
    cut_after = draw(st.lists(st.booleans(), min_size=len(data), max_size=len(data)))
    out, start = [], 0
    for i, cut in enumerate(cut_after):
        if cut or i == len(data) - 1:
            out.append(data[start : i + 1])
            start = i + 1
    return out


SETTINGS = settings(max_examples=200, deadline=None, database=None)


# --- TextBridge.view ---------------------------------------------------------------------------


def test_a_history_converts_into_draft_words_with_the_last_word_as_tail():
    tgt, dft = Target(), Words()
    view = make_bridge(tgt, dft).view(tgt.bytewise("the cat sat"))
    assert dft.words(view) == ["the", " cat", " sat"]


@SETTINGS
@given(parts=pieces())
def test_every_view_spells_the_history_text_less_an_incomplete_last_character(parts):
    tgt, dft = Target(), Words()
    history = tgt.tokens(parts)
    grown = make_bridge(tgt, dft)
    for k in range(len(history) + 1):
        want = whole_chars(tgt.join(history[:k]))
        assert dft.join(grown.view(history[:k])) == want
        fresh = make_bridge(tgt, dft)
        assert dft.join(fresh.view(history[:k])) == want


@SETTINGS
@given(parts=pieces())
def test_appending_one_token_at_a_time_gives_the_view_of_converting_at_once(parts):
    assume(runs_fit(parts))  # a longer word is committed in parts: the same text, other cuts
    tgt, dft = Target(), Words()
    history = tgt.tokens(parts)
    grown = make_bridge(tgt, dft)
    for k in range(len(history) + 1):
        view = grown.view(history[:k])
    assert view == make_bridge(tgt, dft).view(history)
    assert view == dft.tokenize(whole_chars(tgt.join(history)).decode())


def test_committed_words_are_not_retokenized_with_later_text():
    """A draft tokenizer merging across words would turn "a b" into one token; the bridge has
    committed "a" before " b" came, so the draft context's KV of "a" stays valid."""
    tgt, dft = Target(), Words(pairs=True)
    bridge = make_bridge(tgt, dft)
    history = tgt.bytewise("a b c d")
    views = [dft.words(bridge.view(history[:k])) for k in (1, 3, 5, 7)]
    assert views == [["a"], ["a", " b"], ["a", " b", " c"], ["a", " b", " c", " d"]]
    assert dft.words(dft.tokenize("a b c d")) == ["a b", " c d"]


@SETTINGS
@given(text=st.text(alphabet=ALPHABET, max_size=60))
def test_while_the_history_only_grows_the_draft_tokens_before_the_tail_never_change(text):
    """Byte tokens: the tail after the last commit is at most one word, so at most the last draft token
    of a view may change later (with the pair-merging draft tokenizer, re-tokenizing would change more)."""
    tgt, dft = Target(), Words(pairs=True)
    history = tgt.bytewise(text)
    bridge = make_bridge(tgt, dft)
    stable: list[int] = []
    for k in range(len(history) + 1):
        view = bridge.view(history[:k])
        assert view[: len(stable)] == stable
        stable = view[:-1]


def test_a_changed_history_rolls_back_to_the_last_commit_in_the_common_prefix():
    tgt, dft = Target(), Words()
    bridge = make_bridge(tgt, dft)
    old = bridge.view(tgt.bytewise("ab cd ef"))
    kept = bridge.view(tgt.bytewise("ab cd xy"))  # diverges in the tail: committed words stay
    assert dft.words(kept) == ["ab", " cd", " xy"] and kept[:2] == old[:2]
    assert dft.words(bridge.view(tgt.bytewise("ab q"))) == ["ab", " q"]  # diverges inside " cd"
    assert dft.words(bridge.view(tgt.bytewise("ab"))) == ["ab"]  # truncated
    assert dft.words(bridge.view(tgt.bytewise("x"))) == ["x"]  # nothing in common
    assert bridge.view([]) == []


def test_a_history_diverging_right_at_a_commit_converts_like_a_fresh_one():
    """"ab cd" committed "ab" because " cd" starts a word; "abx" does not start one there."""
    tgt, dft = Target(), Words()
    bridge = make_bridge(tgt, dft)
    bridge.view(tgt.bytewise("ab cd"))
    assert dft.words(bridge.view(tgt.bytewise("abx"))) == ["abx"]


@SETTINGS
@given(first=pieces(), second=pieces(), share=st.floats(min_value=0.0, max_value=1.0))
def test_after_any_rollback_the_view_equals_a_fresh_conversion(first, second, share):
    """The first history grows a token at a time (a commit at every word start), then the history
    keeps a share of it and continues differently."""
    tgt, dft = Target(), Words()
    old = tgt.tokens(first)
    keep = round(share * len(old))
    while whole_chars(tgt.join(old[:keep])) != tgt.join(old[:keep]):
        keep -= 1  # diverge between characters: the new history is valid UTF-8 too
    new = old[:keep] + tgt.tokens(second)
    bridge = make_bridge(tgt, dft)
    for k in range(len(old) + 1):
        bridge.view(old[:k])
    view = bridge.view(new)
    assert dft.join(view) == whole_chars(tgt.join(new))
    if runs_fit([tgt.piece(t) for t in new]):
        assert view == make_bridge(tgt, dft).view(new)


def test_text_without_spaces_is_committed_so_the_tail_stays_bounded():
    """Sixty 3-byte characters, one byte token at a time: past MAX_TAIL_TOKENS (16) byte tokens
    the bridge commits at the last character start (15 bytes: five characters)."""
    assert MAX_TAIL_TOKENS == 16
    tgt, dft = Target(), Words()
    text = "\u4e2d\u6587" * 30
    history = tgt.bytewise(text)
    bridge = make_bridge(tgt, dft)
    for k in range(len(history) + 1):
        view = bridge.view(history[:k])
        assert len(dft.piece(view[-1]) if view else b"") <= MAX_TAIL_TOKENS
    assert dft.words(view) == [text[i : i + 5] for i in range(0, 60, 5)]


@SETTINGS
@given(text=st.text(alphabet=ALPHABET, max_size=60))
def test_no_view_token_holds_a_replacement_character_or_a_split_character(text):
    tgt, dft = Target(), Words()
    history = tgt.bytewise(text)
    bridge = make_bridge(tgt, dft)
    for k in range(len(history) + 1):
        for token in bridge.view(history[:k]):
            assert "\ufffd" not in dft.piece(token).decode("utf-8")  # strict: raises on a split character


def test_the_draft_bos_leads_every_view_and_survives_a_rollback_to_nothing():
    tgt, dft = Target(), Words()
    bridge = make_bridge(tgt, dft, prefix=[Words.BOS])
    assert bridge.view([]) == [Words.BOS]
    assert dft.words(bridge.view(tgt.bytewise("hi there"))) == ["<s>", "hi", " there"]
    assert dft.words(bridge.view(tgt.bytewise("yo"))) == ["<s>", "yo"]


def test_the_target_bos_has_no_text_for_the_draft():
    tgt, dft = Target(), Words()
    with_bos = make_bridge(tgt, dft, prefix=[Words.BOS]).view([Target.BOS] + tgt.bytewise("hi there"))
    assert dft.words(with_bos) == ["<s>", "hi", " there"]


@SETTINGS
@given(parts=st.lists(st.binary(max_size=4), max_size=30))
def test_invalid_utf8_in_the_history_never_raises(parts):
    """A model may sample byte tokens that are no UTF-8: the view is worse, the bridge still works."""
    tgt, dft = Target(), Words()
    history = tgt.tokens([p for p in parts if p])
    bridge = make_bridge(tgt, dft)
    for k in range(len(history) + 1):
        dft.join(bridge.view(history[:k])).decode("utf-8")  # raises on a split or invalid character
    tgt.join(bridge.to_target([dft.id(p) for p in parts if p])).decode("utf-8")


# --- TextBridge.to_target ----------------------------------------------------------------------


def test_a_draft_converts_to_target_tokens_of_its_text():
    tgt, dft = Target(), Words()
    bridge = make_bridge(tgt, dft)
    assert bridge.to_target(dft.tokenize("ok go")) == tgt.bytewise("ok go")
    assert bridge.to_target([]) == []


def test_to_target_stops_at_the_draft_end_of_generation():
    tgt, dft = Target(), Words()
    bridge = make_bridge(tgt, dft)
    assert bridge.to_target(dft.tokenize("ok") + [Words.EOG] + dft.tokenize(" more")) == tgt.bytewise("ok")
    assert bridge.to_target([Words.EOG] + dft.tokenize("ok")) == []


def test_to_target_drops_an_incomplete_last_character():
    tgt, dft = Target(), Words()
    bridge = make_bridge(tgt, dft)
    half = "\u4e2d".encode()[:2]  # a byte-fallback draft token ending inside a character
    draft = dft.tokenize("ok") + [dft.id(half)]
    assert bridge.to_target(draft) == tgt.bytewise("ok")
    assert bridge.to_target(draft + [dft.id("\u4e2d".encode()[2:])]) == tgt.bytewise("ok\u4e2d")
    assert bridge.to_target([dft.id(half)]) == []


# --- SameVocab ----------------------------------------------------------------------------------


def test_same_vocab_passes_histories_through_and_cuts_drafts_at_the_first_id_past_the_target():
    same = SameVocab(n_target=100)
    history = [1, 2, 3]
    assert same.view(history) is history and same.is_bridge is False
    assert same.to_target([5, 99, 100, 7]) == [5, 99]
    assert same.to_target([150, 1]) == [] and same.to_target([0, 99]) == [0, 99]


# --- incompatibility ----------------------------------------------------------------------------


@dataclass
class ToyVocab:
    texts: list[bytes] = field(default_factory=lambda: [b"<unk>", b"<s>", b"</s>", b"<pad>", b"<x>"]
                               + [bytes([c]) for c in range(97, 123)])
    vocab_type: int = 2
    add_bos: bool = True
    add_eos: bool = False
    bos: int = 1
    eos: int = 2
    n_tokens: int = 0

    def __post_init__(self) -> None:
        self.n_tokens = self.n_tokens or len(self.texts)

    def text(self, token: int) -> bytes:
        return self.texts[token] if token < len(self.texts) else b"<extra %d>" % token


def test_identical_vocabularies_are_compatible():
    assert incompatibility(ToyVocab(), ToyVocab()) == ""


def test_tokenizer_types_must_match():
    assert incompatibility(ToyVocab(), ToyVocab(vocab_type=1)) == "tokenizer types differ (2 vs 1)"


def test_bos_handling_must_match_and_bos_ids_only_when_added():
    assert incompatibility(ToyVocab(), ToyVocab(add_bos=False)) == "BOS handling differs"
    assert incompatibility(ToyVocab(), ToyVocab(bos=3)) == "BOS handling differs"
    assert incompatibility(ToyVocab(add_bos=False), ToyVocab(add_bos=False, bos=3)) == ""


def test_eos_handling_must_match_and_eos_ids_only_when_added():
    assert incompatibility(ToyVocab(), ToyVocab(add_eos=True)) == "EOS handling differs"
    assert incompatibility(ToyVocab(add_eos=True), ToyVocab(add_eos=True, eos=3)) == "EOS handling differs"
    assert incompatibility(ToyVocab(), ToyVocab(eos=3)) == ""


def test_vocabulary_sizes_may_differ_by_at_most_128():
    small = ToyVocab()
    n = small.n_tokens
    assert VOCAB_MAX_SIZE_DIFFERENCE == 128
    assert incompatibility(small, replace(small, n_tokens=n + 128)) == ""
    assert incompatibility(replace(small, n_tokens=n + 129), small) == f"vocabulary sizes differ ({n + 129} vs {n})"


def test_token_texts_must_match_from_id_5_on():
    base = ToyVocab()
    first_five = replace(base, texts=[b"0", b"1", b"2", b"3", b"4"] + base.texts[5:])
    assert incompatibility(base, first_five) == ""
    at_5 = replace(base, texts=base.texts[:5] + [b"A"] + base.texts[6:])
    assert incompatibility(base, at_5) == "token 5 differs (b'a' vs b'A')"
    last = replace(base, texts=base.texts[:-1] + [b"Z"])
    assert incompatibility(last, base) == f"token {len(base.texts) - 1} differs (b'Z' vs b'z')"
