"""Generated text of one request: incremental UTF-8 decoding, stop strings and the n_indent rule.

While streaming, text that could be the start of a stop string is withheld until it is
disambiguated (as llama.cpp's server does), so a client never sees part of a stop string.
"""

from __future__ import annotations

import codecs


class TextStream:
    def __init__(self, stops: list[str], n_indent: int = 0) -> None:
        self.stops = stops
        self.n_indent = n_indent
        self.text = ""
        self.stopping_word = ""
        self.n_sent = 0  # characters already handed to the client
        self._n_checked = 0  # characters already searched for stop strings
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._max_stop = max((len(s) for s in stops), default=0)

    def push(self, piece: bytes) -> bool:
        """Append one token's bytes; True if a stop string or the indent rule ends the text."""
        self.text += self._decoder.decode(piece)
        return self._check_stop() or self._check_indent()

    def _check_stop(self) -> bool:
        if not self.stops:
            return False
        start = max(0, self._n_checked - self._max_stop + 1)
        best = -1
        for stop in self.stops:
            pos = self.text.find(stop, start)
            if pos != -1 and (best == -1 or pos < best):
                best, self.stopping_word = pos, stop
        self._n_checked = len(self.text)
        if best == -1:
            return False
        self.text = self.text[:best]
        return True

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
        self.text = self.text[: nl + 1]
        return True

    def has_new_line(self) -> bool:
        return "\n" in self.text

    def take(self, final: bool) -> str:
        """Text not yet sent; without ``final`` a trailing partial stop-string match is withheld."""
        end = len(self.text)
        if not final:
            end -= self._partial_stop_len()
        if end <= self.n_sent:
            return ""
        out = self.text[self.n_sent : end]
        self.n_sent = end
        return out

    def _partial_stop_len(self) -> int:
        """Length of the longest suffix of the text that is a proper prefix of a stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(self.text)), best, -1):
                if self.text.endswith(stop[:n]):
                    best = n
                    break
        return best
