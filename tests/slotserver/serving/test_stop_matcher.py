"""The stop-string automaton against a brute-force reference of the old semantics, and its cost (no model)."""

import codecs

from hypothesis import given, settings
from hypothesis import strategies as st

from slotserver.serving.request import MAX_STOP_LEN, MAX_STOP_STRINGS
from slotserver.serving.stop_matcher import StopMatcher
from slotserver.serving.text_stream import TextStream


class BruteForceStream:
    """The semantics TextStream had before the automaton, written the obvious, quadratic way."""

    def __init__(self, stops: list[str], n_indent: int) -> None:
        self.stops, self.n_indent = stops, n_indent
        self.text, self.stopping_word, self.n_sent = "", "", 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, piece: bytes) -> bool:
        n_old = len(self.text)
        self.text += self.decoder.decode(piece)
        # every occurrence of every stop ending in the new text; the earliest start, then list order
        hits = [
            (start, i)
            for i, stop in enumerate(self.stops)
            for start in range(len(self.text))
            if self.text.startswith(stop, start) and start + len(stop) > n_old
        ]
        if hits:
            start, i = min(hits)
            self.text, self.stopping_word = self.text[:start], self.stops[i]
            return True
        if self.n_indent > 0 and "\n" in self.text:
            nl = self.text.rfind("\n")
            line = self.text[nl + 1 :]
            indent = len(line) - len(line.lstrip(" \t"))
            if indent < len(line) and indent < self.n_indent:
                self.text = self.text[: nl + 1]
                return True
        return False

    def take(self, final: bool) -> str:
        end = len(self.text)
        if not final:
            end -= max(
                (n for stop in self.stops for n in range(1, len(stop)) if self.text.endswith(stop[:n])), default=0
            )
        if end <= self.n_sent:
            return ""
        out, self.n_sent = self.text[self.n_sent : end], end
        return out


ALPHABET = "ab \n\té"  # é is two bytes, split across pieces; " \n\t" exercise the indent rule
STOP_ALPHABET = "ab\né"  # fewer still, so stops often overlap and are prefixes of one another


@st.composite
def cases(draw) -> tuple[list[str], list[bytes]]:
    """Stop strings, and a text built from them, their prefixes and stray characters, cut into pieces."""
    def prefixes(stop: st.SearchStrategy[str], low: int) -> st.SearchStrategy[str]:
        return stop.flatmap(lambda s: st.integers(min(low, len(s)), len(s)).map(lambda n: s[:n]))

    stops = draw(st.lists(st.text(alphabet=STOP_ALPHABET, min_size=1, max_size=4), max_size=4))
    part = st.text(alphabet=ALPHABET, max_size=3)
    if stops:
        # stops that are prefixes of others, in any order, make same-start ties for list order to break
        stops = draw(st.permutations(stops + draw(st.lists(prefixes(st.sampled_from(stops), 1), max_size=2))))
        stop = st.sampled_from(stops)
        part = st.one_of(part, stop, prefixes(stop, 0))
    data = "".join(draw(st.lists(part, max_size=12))).encode()
    cuts = draw(st.sets(st.integers(min_value=1, max_value=max(len(data) - 1, 1)), max_size=10))
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    return stops, [data[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=300, deadline=None, database=None)
@given(case=cases(), n_indent=st.integers(min_value=0, max_value=3))
def test_automaton_stream_matches_the_brute_force_semantics(case, n_indent):
    stops, pieces = case
    ts, ref = TextStream(stops, n_indent), BruteForceStream(stops, n_indent)
    for piece in pieces:
        stopped = ts.push(piece)
        assert stopped == ref.push(piece)
        assert (ts.text, ts.stopping_word) == (ref.text, ref.stopping_word)
        if stopped:
            break  # the job ends at a stop (apply.finish): only the final take follows
        assert ts.take(final=False) == ref.take(final=False)
        assert ts.n_sent == ref.n_sent
    assert ts.take(final=True) == ref.take(final=True)


def test_withheld_is_the_longest_suffix_that_is_a_proper_prefix():
    m = StopMatcher(["abcab", "bd", "c"])
    for text, withheld in (("x", 0), ("ab", 2), ("abc", 3), ("abca", 4), ("abcab", 2), ("b", 1), ("c", 0)):
        m.reset(text)
        assert m.withheld == withheld, text  # "abcab": a whole stop is not withheld, its suffix "ab" is


def test_feed_reports_matches_in_whole_text_offsets():
    m = StopMatcher(["needle"])
    assert m.feed("hay ne", 0) is None
    assert m.feed("edle!", 6) == (4, 0)


def test_empty_stop_strings_are_ignored():
    m = StopMatcher(["", "a"])
    assert m.feed("ba", 0) == (1, 1)


def test_step_cost_does_not_grow_with_the_text_or_the_stops():
    # the worst stops allowed: as many as the limit, each as long as the limit, all sharing a prefix
    # the text keeps repeating, so the old per-token re-search cost 16 x 256 character compares
    stops = ["a" * (MAX_STOP_LEN - 1) + chr(ord("b") + i) for i in range(MAX_STOP_STRINGS)]
    ts = TextStream(stops)
    steps = []
    for _ in range(20_000):
        before = ts._matcher.n_steps
        assert not ts.push(b"a")
        steps.append(ts._matcher.n_steps - before)
    assert sum(steps[1000:2000]) == sum(steps[-1000:])  # the same cost 1,000 or 19,000 characters in
    assert sum(steps) <= 2 * len(steps)  # amortized: each character is one goto plus at most one failure
    assert ts.take(final=False) == "a" * (20_000 - (MAX_STOP_LEN - 1))  # the withheld partial stop


def test_one_push_costs_at_most_its_length_plus_one_stop():
    m = StopMatcher(["a" * 10 + "b"])
    m.feed("a" * 1000, 0)
    before = m.n_steps
    m.feed("c", 1000)  # falls back through the partial match, never through the text
    assert m.n_steps - before <= 10 + 1
