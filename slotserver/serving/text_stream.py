"""Generated text of one request: incremental UTF-8 decoding, stop strings and the n_indent rule.

While streaming, text that could be the start of a stop string is withheld until it is
disambiguated (as llama.cpp's server does), so a client never sees part of a stop string.
Stop strings are found by an Aho–Corasick automaton (``stop_matcher``) fed only the new characters of
each piece, so a step costs the same however many stop strings there are and however long the text.
"""

from __future__ import annotations

import codecs

from slotserver.serving.stop_matcher import StopMatcher


class TextStream:
    def __init__(self, stops: list[str], n_indent: int = 0) -> None:
        self.stops = stops
        self.n_indent = n_indent
        self.text = ""
        self.stopping_word = ""
        self.n_sent = 0  # characters already handed to the client
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._matcher = StopMatcher(stops)

    def push(self, piece: bytes) -> bool:
        """Append one token's bytes; True if a stop string or the indent rule ends the text."""
        new = self._decoder.decode(piece)
        base = len(self.text)
        self.text += new
        return self._check_stop(new, base) or self._check_indent()

    def _check_stop(self, new: str, base: int) -> bool:
        """The earliest-starting stop string ending in the new characters cuts the text before it."""
        hit = self._matcher.feed(new, base)
        if hit is None:
            return False
        start, index = hit
        self.stopping_word = self.stops[index]
        self._cut(start)
        return True

    def _cut(self, end: int) -> None:
        self.text = self.text[:end]
        self._matcher.reset(self.text)  # its state described the text before the cut

    def _check_indent(self) -> bool:
        """llama.cpp's n_indent rule: a new line indented less than n_indent ends the completion."""
        if self.n_indent <= 0:
            return False
        nl = self.text.rfind("\n")
        if nl == -1:
            return False
        line = self.text[nl + 1 :]
        indent = len(line) - len(line.lstrip(" \t"))
        if indent == len(line) or indent >= self.n_indent:
            return False  # still only whitespace, or indented enough
        self._cut(nl + 1)
        return True

    def has_new_line(self) -> bool:
        return "\n" in self.text

    def take(self, final: bool) -> str:
        """Text not yet sent; without ``final`` a trailing partial stop-string match is withheld."""
        end = len(self.text)
        if not final:
            end -= self._matcher.withheld
        if end <= self.n_sent:
            return ""
        out = self.text[self.n_sent : end]
        self.n_sent = end
        return out
