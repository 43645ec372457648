"""GBNF read as llama.cpp's parser reads it (``llama-grammar.cpp``), without its recursion.

The same syntax, the same rewriting of ``x*``, ``x+``, ``x?`` and ``x{m,n}`` into rules and the same
rule ids, so that ``grammar_budget`` can measure exactly what llama.cpp would build. Reading already
refuses what would hurt llama.cpp while it parses: groups nested past ``MAX_GROUP_DEPTH`` (its
recursion overflows the C stack), more than ``MAX_ELEMENTS`` written out, counts past ``MAX_REPEAT``.
Pure; ``Refused`` carries the reason.
"""

from __future__ import annotations

import re

# llama.cpp's parser recurses twice per group (about 400 bytes of C stack per level: 16,000 levels
# pass in a thread's 8 MiB, 24,000 crash). The schema converter writes ``maxLength: 1000`` as 1,000
# nested groups, the most a schema can ask for (grammar.MAX_SCHEMA_REPEAT).
MAX_GROUP_DEPTH = 1024
# Elements llama.cpp stores (8 bytes each, copied for each request's sampler): 1 MiB; a schema's grammar
# needs a few thousand (100 optional properties: 2,646; ``maxLength: 1000``: 8,052).
MAX_ELEMENTS = 1 << 17
# llama.cpp's MAX_REPETITION_THRESHOLD: larger smallest counts are refused, larger largest counts
# mean "no largest", and rules written times counts multiplied past it are refused.
MAX_REPEAT = 2000
# Weights and counts saturate here: nothing past it is ever accepted, and big integers stay cheap.
CAP = 1 << 40

# Element codes, as llama.cpp lays a rule out: a rule id (>= 0) is a reference.
END, ALT, NARROW, WIDE, CONT = -1, -2, -3, -4, -5  # CONT: a class's further characters and ranges
_SPACE_NL = re.compile(r"(?:[ \t\r\n]+|#[^\r\n]*)*")
_SPACE = re.compile(r"(?:[ \t]+|#[^\r\n]*)*")
_NAME = re.compile(r"[a-zA-Z0-9-]+")
_DIGITS = re.compile(r"[0-9]+")
_HEX = {"x": 2, "u": 4, "U": 8}
_ESCAPES = set('tnr\\"[]-')
_WHITE = set(" \t\r\n\f\v")
_HEX_DIGITS = set("0123456789abcdefABCDEF")
_MAX_U64 = (1 << 64) - 1


class Refused(Exception):
    """A reason to refuse, worded to follow the field's name."""


class _Frame:
    """One ``parse_alternates`` call of llama.cpp's parser: a rule (or group) being read."""

    __slots__ = ("name", "rule_id", "nested", "rule", "last_sym_start", "n_prev_rules", "n_rules_before")

    def __init__(self, name: str, rule_id: int, nested: bool, n_rules_before: int) -> None:
        self.name, self.rule_id, self.nested, self.n_rules_before = name, rule_id, nested, n_rules_before
        self.rule: list[int] = []
        self.last_sym_start = 0
        self.n_prev_rules = 1


class Parser:
    """llama.cpp's ``llama_grammar_parser`` without its recursion: an explicit stack of open groups."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.n = len(text)
        self.symbol_ids: dict[str, int] = {}
        self.rules: list[list[int] | None] = []
        self.n_elements = 0
        self.max_depth = 0

    # -- llama.cpp's helpers ------------------------------------------------------------------
    def error(self, message: str, pos: int) -> Refused:
        line = self.text.count("\n", 0, pos) + 1
        return Refused(f"is not a valid GBNF grammar: {message} at line {line}: {self.text[pos:pos + 20]!r}")

    def space(self, pos: int, newline_ok: bool) -> int:
        return (_SPACE_NL if newline_ok else _SPACE).match(self.text, pos).end()

    def char_at(self, pos: int) -> str:
        return self.text[pos] if pos < self.n else ""

    def symbol_id(self, name: str) -> int:
        return self.symbol_ids.setdefault(name, len(self.symbol_ids))

    def generate_symbol_id(self, base: str) -> int:
        next_id = len(self.symbol_ids)
        self.symbol_ids[f"{base}_{next_id}"] = next_id  # as llama.cpp: may rebind a rule named so
        return next_id

    def add_rule(self, rule_id: int, rule: list[int]) -> None:
        if len(self.rules) <= rule_id:
            self.rules.extend([None] * (rule_id + 1 - len(self.rules)))
        self.rules[rule_id] = rule

    def grow(self, n: int, pos: int) -> None:
        self.n_elements += n
        if self.n_elements > MAX_ELEMENTS:
            raise Refused(f"writes out more than {MAX_ELEMENTS} grammar elements (repetitions copy what they "
                           f"repeat; near line {self.text.count(chr(10), 0, pos) + 1})")

    def parse_char(self, pos: int) -> tuple[str, int]:
        text = self.text
        if pos >= self.n:
            raise self.error("unexpected end of input", pos)
        c = text[pos]
        if c != "\\":
            return c, pos + 1
        e = self.char_at(pos + 1)
        if e in _HEX:
            size = _HEX[e]
            digits = text[pos + 2:pos + 2 + size]
            end = next((i for i, d in enumerate(digits) if d not in _HEX_DIGITS), len(digits))
            if end != size:
                raise self.error(f"expecting {size} hex chars", pos)
            return chr(min(int(digits, 16), 0x10FFFF)), pos + 2 + size
        if e in _ESCAPES:
            return {"t": "\t", "n": "\n", "r": "\r"}.get(e, e), pos + 2
        raise self.error("unknown escape", pos)

    def parse_int(self, pos: int) -> tuple[int, int]:
        m = _DIGITS.match(self.text, pos)
        if m is None:
            raise self.error("expecting an integer", pos)
        digits = m.group()
        if len(digits) > 20 or int(digits) > _MAX_U64:
            raise Refused(f"has a repetition count that is too large ({digits[:24]}...), at most {MAX_REPEAT}")
        return int(digits), m.end()

    # -- rules, alternates and sequences --------------------------------------------------------
    def parse(self) -> None:
        pos = self.space(0, True)
        while pos < self.n:
            pos = self.parse_rule(pos)
        for rule_id, rule in enumerate(self.rules):
            if rule is None:
                name = next((k for k, v in self.symbol_ids.items() if v == rule_id), str(rule_id))
                raise Refused(f"is not a valid GBNF grammar: the rule '{name}' is used but not defined")
        for rule in self.rules:
            for e in rule:
                if e >= 0 and (e >= len(self.rules) or self.rules[e] is None):
                    name = next((k for k, v in self.symbol_ids.items() if v == e), str(e))
                    raise Refused(f"is not a valid GBNF grammar: the rule '{name}' is used but not defined")
        if "root" not in self.symbol_ids:
            raise Refused("is not a valid GBNF grammar: it has no 'root' rule")

    def parse_rule(self, pos: int) -> int:
        m = _NAME.match(self.text, pos)
        if m is None:
            raise self.error("expecting a rule name", pos)
        name = m.group()
        rule_id = self.symbol_id(name)
        pos = self.space(m.end(), False)
        if self.text[pos:pos + 3] != "::=":
            raise self.error("expecting ::=", pos)
        pos = self.alternates(self.space(pos + 3, True), name, rule_id)
        c = self.char_at(pos)
        if c == "\r":
            pos += 2 if self.char_at(pos + 1) == "\n" else 1
        elif c == "\n":
            pos += 1
        elif c:
            raise self.error("expecting newline or end", pos)
        return self.space(pos, True)

    def alternates(self, pos: int, name: str, rule_id: int) -> int:
        """llama.cpp's ``parse_alternates`` for a rule, its groups read on an explicit stack."""
        frames = [_Frame(name, rule_id, False, 0)]
        while True:
            frame = frames[-1]
            pos = self.sequence(pos, frame)
            if self.char_at(pos) == "(":  # a group: a new rule, read before this sequence goes on
                if len(frames) > MAX_GROUP_DEPTH:
                    raise Refused(f"nests groups '(...)' more than {MAX_GROUP_DEPTH} deep "
                                   f"(line {self.text.count(chr(10), 0, pos) + 1})")
                self.max_depth = max(self.max_depth, len(frames))
                n_before = len(self.symbol_ids)
                frames.append(_Frame(frame.name, self.generate_symbol_id(frame.name), True, n_before))
                pos = self.space(pos + 1, True)
                continue
            if self.char_at(pos) == "|":
                self.grow(1, pos)
                frame.rule.append(ALT)
                frame.last_sym_start, frame.n_prev_rules = len(frame.rule), 1
                pos = self.space(pos + 1, True)
                continue
            self.grow(1, pos)
            frame.rule.append(END)
            self.add_rule(frame.rule_id, frame.rule)
            frames.pop()
            if not frames:
                return pos
            parent = frames[-1]
            parent.n_prev_rules = max(1, len(self.symbol_ids) - frame.n_rules_before)
            parent.last_sym_start = len(parent.rule)
            self.grow(1, pos)
            parent.rule.append(frame.rule_id)
            if self.char_at(pos) != ")":
                raise self.error("expecting ')'", pos)
            pos = self.space(pos + 1, parent.nested)

    def sequence(self, pos: int, f: _Frame) -> int:
        """llama.cpp's ``parse_sequence`` up to its end, or up to a ``(`` (the caller opens the group)."""
        text, rule = self.text, f.rule
        while pos < self.n:
            c = text[pos]
            if c == '"':
                pos += 1
                f.last_sym_start, f.n_prev_rules = len(rule), 1
                while self.char_at(pos) != '"':
                    if pos >= self.n:
                        raise self.error("unexpected end of input in a string", pos)
                    ch, pos = self.parse_char(pos)
                    rule.append(WIDE if ch in _WHITE else NARROW)
                self.grow(len(rule) - f.last_sym_start, pos)
                pos = self.space(pos + 1, f.nested)
            elif c == "[":
                pos += 1
                negated = self.char_at(pos) == "^"
                pos += negated
                f.last_sym_start, f.n_prev_rules = len(rule), 1
                count, first = 0, ""
                while self.char_at(pos) != "]":
                    if pos >= self.n:
                        raise self.error("unexpected end of input in a class", pos)
                    ch, pos = self.parse_char(pos)
                    first = first or ch
                    count += 1
                    if self.char_at(pos) == "-" and self.char_at(pos + 1) != "]":
                        if pos + 1 >= self.n:
                            raise self.error("unexpected end of input in a class", pos)
                        _, pos = self.parse_char(pos + 1)
                        count += 1
                if count:
                    self.grow(count, pos)
                    narrow = count == 1 and not negated and first not in _WHITE
                    rule.append(NARROW if narrow else WIDE)
                    rule.extend([CONT] * (count - 1))
                pos = self.space(pos + 1, f.nested)
            elif c in "<!":
                pos += c == "!"
                pos = self.token(pos)
                f.last_sym_start, f.n_prev_rules = len(rule), 1
                self.grow(1, pos)
                rule.append(NARROW)
                pos = self.space(pos, f.nested)
            elif c.isascii() and (c.isalnum() or c == "-"):
                m = _NAME.match(text, pos)
                ref = self.symbol_id(m.group())
                pos = self.space(m.end(), f.nested)
                f.last_sym_start, f.n_prev_rules = len(rule), 1
                self.grow(1, pos)
                rule.append(ref)
            elif c == "(":
                return pos
            elif c == ".":
                f.last_sym_start, f.n_prev_rules = len(rule), 1
                self.grow(1, pos)
                rule.append(WIDE)
                pos = self.space(pos + 1, f.nested)
            elif c in "*+?":
                at = pos
                pos = self.space(pos + 1, f.nested)
                self.repeat(f, *{"*": (0, None), "+": (1, None), "?": (0, 1)}[c], at)
            elif c == "{":
                at = pos
                pos = self.space(pos + 1, f.nested)
                if not self.char_at(pos).isdigit() or not self.char_at(pos).isascii():
                    raise self.error("expecting an int", pos)
                lo, pos = self.parse_int(pos)
                pos = self.space(pos, f.nested)
                hi: int | None
                if self.char_at(pos) == "}":
                    hi = lo
                    pos = self.space(pos + 1, f.nested)
                elif self.char_at(pos) == ",":
                    pos = self.space(pos + 1, f.nested)
                    hi = None
                    if self.char_at(pos).isascii() and self.char_at(pos).isdigit():
                        hi, pos = self.parse_int(pos)
                        pos = self.space(pos, f.nested)
                    if self.char_at(pos) != "}":
                        raise self.error("expecting '}'", pos)
                    pos = self.space(pos + 1, f.nested)
                else:
                    raise self.error("expecting ','", pos)
                if lo > MAX_REPEAT:
                    raise Refused(f"repeats an item at least {lo} times, more than {MAX_REPEAT}")
                if hi is not None and hi > MAX_REPEAT:
                    hi = None  # llama.cpp: no largest count
                if hi is not None and hi < lo:  # llama.cpp would write 2^64 rules
                    raise Refused(f"has a repetition {{{lo},{hi}}} whose largest count is below its smallest")
                self.repeat(f, lo, hi, at)
            else:
                break
        return pos

    def token(self, pos: int) -> int:
        """The end of a ``<[id]>`` or ``<piece>`` token (llama.cpp checks that a piece is one token)."""
        if self.char_at(pos) != "<":
            raise self.error("expecting '<'", pos)
        pos += 1
        if self.char_at(pos) == "[":
            token_id, pos = self.parse_int(pos + 1)
            if token_id > 0xFFFFFFFF or self.text[pos:pos + 2] != "]>":
                raise self.error("expecting a token id and ']>'", pos)
            return pos + 2
        end = self.text.find(">", pos)
        if end < 0:
            raise self.error("expecting '>'", pos)
        return end + 1

    def repeat(self, f: _Frame, lo: int, hi: int | None, pos: int) -> None:
        """llama.cpp's ``handle_repetitions``: S{m,n} -> S written m times, then n-m nested optional rules
        (S{m,} -> one right-recursive rule); the size is checked before anything is written."""
        rule = f.rule
        if f.last_sym_start == len(rule):
            raise self.error("expecting an item before the repetition", pos)
        prev = rule[f.last_sym_start:]
        no_max = hi is None
        total_rules = hi if not no_max and hi > 0 else (lo if lo > 0 else 1)
        if f.n_prev_rules * total_rules > MAX_REPEAT:
            raise Refused(f"repeats {f.n_prev_rules} rules {total_rules} times, more than llama.cpp's {MAX_REPEAT}")
        n_opt = 1 if no_max else hi - lo
        self.grow(max(lo - 1, 0) * len(prev) + n_opt * (len(prev) + 3) + 1, pos)
        if lo == 0:
            del rule[f.last_sym_start:]
        else:
            rule.extend(prev * (lo - 1))
        last_rec = 0
        for i in range(n_opt):
            rec_id = self.generate_symbol_id(f.name)
            rec = list(prev)
            if i > 0 or no_max:
                rec.append(rec_id if no_max else last_rec)
            rec += (ALT, END)
            self.add_rule(rec_id, rec)
            last_rec = rec_id
        if n_opt > 0:
            rule.append(last_rec)
        f.n_prev_rules *= total_rules
