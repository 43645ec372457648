"""Bounds on what a GBNF grammar makes llama.cpp build and walk, checked in Python before llama.cpp sees it.

llama.cpp trusts its grammars. Its parser recurses once per ``(`` (32,000 of them, 64 KB of text,
overflow the C stack and kill the process); a count ``{5,2}`` makes it write 2^64 rules (memory
runs out); a left recursion hidden behind a rule that matches nothing (``a ::= b``, ``b ::=``) is not
detected and makes it build ever longer parse stacks until it aborts; and when a grammar is applied
to the candidates (the slow path of ``grammar_sampler``), every live parse stack is walked for every
one of Gemma's 262k tokens, on the engine thread that every slot waits for: 6,000 alternatives cost
12 s per token. So this reads the text as llama.cpp's parser does (``llama-grammar.cpp``: the same
syntax, the same rewriting of ``x*``, ``x+``, ``x?`` and ``x{m,n}`` into rules, the same rule ids),
without recursion, and refuses, as a BadRequest naming the field and the limit:

- groups nested deeper than ``MAX_GROUP_DEPTH``;
- more than ``MAX_ELEMENTS`` grammar elements written out (a repetition copies what it repeats: a
  literal of 1,000 characters repeated 2,000 times is 2 million elements);
- a chain of rule references from ``root`` longer than ``MAX_RULE_DEPTH`` (rules that reach each
  other, as right recursion does, count once each);
- left recursion that would grow llama.cpp's stacks, also through rules that can match the empty
  text (llama.cpp's own check only knows rules with an empty alternative);
- more parse-stack weight than ``MAX_STACK_WEIGHT`` at any point: the stacks llama.cpp creates at
  the start and after each character (alternatives add up; an element that can match nothing adds
  what follows it; the end of a rule adds what follows it in its callers), each weighted by what
  walking it costs; and stacks that would multiply with the text (``t ::= "a" t*``: each pending
  ``t*`` is a stack of its own; after 50 characters one pass costs 0.18 s, and reading 200 then
  making 5 passes did not end within 5 minutes);
- what llama.cpp refuses only after work (counts over 2,000, a largest count below the smallest).

Stack weights, measured on this project's 2-core machine with Gemma 3 (thread CPU time of one
whole-vocabulary pass, 32 alternatives of one shape; ``benchmarks/grammar_budget_cost.py``): a stack
whose next character is one fixed character costs 0.6-2.9 ms (weight 1); one whose next element is a
space (most tokens start with one), a class, ``.`` or a negated class followed by more of them costs
up to 21 ms (weight 8), plus 0.09 ms per class element (1 per 32). At ``MAX_STACK_WEIGHT`` (200) a
pass costs 0.41-0.53 s (200 letters, 200 quotes, 25 ``. . . .``, 25 ``[^"]`` runs). Typical schema
grammars stay well inside: any JSON value weighs 32, 40 optional properties 49, an enum of 100
values 100 (0.26 s a pass). What a static count cannot see: ambiguous rules read the same text in
several ways at once (``t ::= "a" t "b" | "a" t | "a" "b"``), and each way keeps stacks of its own;
the engine watchdog covers those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slotserver.errors import BadRequest

# llama.cpp's parser recurses twice per group (about 400 bytes of C stack per level: 16,000 levels
# pass in a thread's 8 MiB, 24,000 crash). The schema converter writes ``maxLength: 1000`` as 1,000
# nested groups, the most a schema can ask for (grammar.MAX_SCHEMA_REPEAT).
MAX_GROUP_DEPTH = 1024
# Elements llama.cpp stores (8 bytes each, copied for each request's sampler): 1 MiB; a schema's grammar
# needs a few thousand (100 optional properties: 2,646; ``maxLength: 1000``: 8,052).
MAX_ELEMENTS = 1 << 17
# Longest chain of rule references from root; each group and each repetition is a rule too
# (``maxLength: 1000`` chains 2,003). Bounds how long a parse stack gets, which llama.cpp copies.
MAX_RULE_DEPTH = 4096
# Parse-stack weight at any point (see the module docstring for the measurements).
MAX_STACK_WEIGHT = 200
NARROW_WEIGHT = 1  # the next character is one fixed character other than white space, or a token
WIDE_WEIGHT = 8  # a space, a class, ``.`` or a negated class
CLASS_ELEMENTS_PER_WEIGHT = 32  # a class's characters and ranges add to its weight
# llama.cpp's MAX_REPETITION_THRESHOLD: larger smallest counts are refused, larger largest counts
# mean "no largest", and rules written times counts multiplied past it are refused.
MAX_REPEAT = 2000
# Weights and counts saturate here: nothing past it is ever accepted, and big integers stay cheap.
_CAP = 1 << 40

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


@dataclass(frozen=True, slots=True)
class GrammarCost:
    """What a grammar would make llama.cpp build, as measured by ``measure``."""

    group_depth: int
    elements: int
    rules: int
    rule_depth: int
    stack_weight: int


def check_grammar_budget(text: str, field: str, what: str = "") -> GrammarCost:
    """BadRequest naming ``field`` (and ``what``, "the schema's grammar" for a converted schema) unless
    llama.cpp can parse and run ``text`` within every budget; the measured cost otherwise."""
    label = f"'{field}'" + (f": {what}" if what else "")
    try:
        return measure(text)
    except _Refused as exc:
        raise BadRequest(f"{label} {exc}") from None


def measure(text: str) -> GrammarCost:
    """The grammar's cost; ``_Refused`` (a reason) if it breaks a budget or would not parse."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _Refused("is not valid Unicode text (a lone surrogate)") from None
    text = text.split("\0", 1)[0]  # llama.cpp reads a C string
    parser = _Parser(text)
    parser.parse()
    return _Analysis(parser).run()


class _Refused(Exception):
    """A reason to refuse, worded to follow the field's name."""


class _Frame:
    """One ``parse_alternates`` call of llama.cpp's parser: a rule (or group) being read."""

    __slots__ = ("name", "rule_id", "nested", "rule", "last_sym_start", "n_prev_rules", "n_rules_before")

    def __init__(self, name: str, rule_id: int, nested: bool, n_rules_before: int) -> None:
        self.name, self.rule_id, self.nested, self.n_rules_before = name, rule_id, nested, n_rules_before
        self.rule: list[int] = []
        self.last_sym_start = 0
        self.n_prev_rules = 1


class _Parser:
    """llama.cpp's ``llama_grammar_parser`` without its recursion: an explicit stack of open groups."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.n = len(text)
        self.symbol_ids: dict[str, int] = {}
        self.rules: list[list[int] | None] = []
        self.n_elements = 0
        self.max_depth = 0

    # -- llama.cpp's helpers ------------------------------------------------------------------
    def error(self, message: str, pos: int) -> _Refused:
        line = self.text.count("\n", 0, pos) + 1
        return _Refused(f"is not a valid GBNF grammar: {message} at line {line}: {self.text[pos:pos + 20]!r}")

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
            raise _Refused(f"writes out more than {MAX_ELEMENTS} grammar elements (repetitions copy what they "
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
            raise _Refused(f"has a repetition count that is too large ({digits[:24]}...), at most {MAX_REPEAT}")
        return int(digits), m.end()

    # -- rules, alternates and sequences --------------------------------------------------------
    def parse(self) -> None:
        pos = self.space(0, True)
        while pos < self.n:
            pos = self.parse_rule(pos)
        for rule_id, rule in enumerate(self.rules):
            if rule is None:
                name = next((k for k, v in self.symbol_ids.items() if v == rule_id), str(rule_id))
                raise _Refused(f"is not a valid GBNF grammar: the rule '{name}' is used but not defined")
        for rule in self.rules:
            for e in rule:
                if e >= 0 and (e >= len(self.rules) or self.rules[e] is None):
                    name = next((k for k, v in self.symbol_ids.items() if v == e), str(e))
                    raise _Refused(f"is not a valid GBNF grammar: the rule '{name}' is used but not defined")
        if "root" not in self.symbol_ids:
            raise _Refused("is not a valid GBNF grammar: it has no 'root' rule")

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
                    raise _Refused(f"nests groups '(...)' more than {MAX_GROUP_DEPTH} deep "
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
                    raise _Refused(f"repeats an item at least {lo} times, more than {MAX_REPEAT}")
                if hi is not None and hi > MAX_REPEAT:
                    hi = None  # llama.cpp: no largest count
                if hi is not None and hi < lo:  # llama.cpp would write 2^64 rules
                    raise _Refused(f"has a repetition {{{lo},{hi}}} whose largest count is below its smallest")
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
            raise _Refused(f"repeats {f.n_prev_rules} rules {total_rules} times, more than llama.cpp's {MAX_REPEAT}")
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


def _sccs(nodes: list[int], succ: dict[int, list[int]] | list[list[int]]) -> list[list[int]]:
    """Strongly connected components (Tarjan's, iterative), each after every component it reaches."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            edges = succ[v]
            recursed = False
            while i < len(edges):
                w = edges[i]
                i += 1
                if w not in index:
                    work.append((v, i))
                    work.append((w, 0))
                    recursed = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if recursed:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


class _Analysis:
    """Rule depth, left recursion and parse-stack weight of a parsed grammar (linear in its size)."""

    def __init__(self, parser: _Parser) -> None:
        self.parser = parser
        self.root = parser.symbol_ids["root"]
        # The most weight after a terminal that another terminal follows (inside a literal, say).
        self.inner = 0
        # Each rule as its alternatives; an alternative as items: a rule id, or -weight of a terminal
        # (a run of terminals is its first one: the others only ever follow it, and count in ``inner``).
        self.alts: list[list[list[int]]] = [self._alternatives(rule) for rule in parser.rules]

    def _alternatives(self, rule: list[int] | None) -> list[list[int]]:
        alts: list[list[int]] = [[]]
        items = alts[0]
        after_terminal = False
        inner = self.inner
        rule = rule or []
        n = len(rule)
        for i, e in enumerate(rule):
            if e >= 0:
                items.append(e)
                after_terminal = False
                continue
            if e == CONT:
                continue
            if e == NARROW:
                w = NARROW_WEIGHT
            elif e == WIDE:
                k = 1
                while i + k < n and rule[i + k] == CONT:
                    k += 1
                w = WIDE_WEIGHT + k // CLASS_ELEMENTS_PER_WEIGHT
            else:  # ALT or END
                if e == ALT:
                    items = []
                    alts.append(items)
                after_terminal = False
                continue
            if after_terminal:
                if w > inner:
                    inner = w
            else:
                items.append(-w)
                after_terminal = True
        self.inner = inner
        return alts

    def run(self) -> GrammarCost:
        reachable = self._reachable()
        nullable = self._nullable()
        depth = self._rule_depth(reachable)
        if depth > MAX_RULE_DEPTH:
            raise _Refused(f"chains {depth} rule references from 'root', more than {MAX_RULE_DEPTH} "
                           "(each group and repetition is a rule)")
        first = self._starts(reachable, nullable)
        weight = self._stack_weight(reachable, nullable, first)
        if weight > MAX_STACK_WEIGHT:
            raise _Refused(f"would make parse stacks of weight {weight if weight < _CAP else 'unbounded'} at one "
                           f"point, more than {MAX_STACK_WEIGHT} (each alternative that can come next is walked "
                           "for every token of the vocabulary; a class or space weighs 8)")
        p = self.parser
        return GrammarCost(p.max_depth, p.n_elements, len(p.rules), depth, weight)

    def _reachable(self) -> list[int]:
        seen = {self.root}
        todo = [self.root]
        while todo:
            for alt in self.alts[todo.pop()]:
                for item in alt:
                    if item >= 0 and item not in seen:
                        seen.add(item)
                        todo.append(item)
        return sorted(seen)

    def _nullable(self) -> list[bool]:
        """Which rules can match the empty text (a worklist: linear, whatever the nesting)."""
        nullable = [False] * len(self.alts)
        waiting: dict[int, list[int]] = {}
        owner: list[int] = []
        missing: list[int] = []
        todo: list[int] = []
        for r, alts in enumerate(self.alts):
            for alt in alts:
                if any(item < 0 for item in alt):
                    continue
                if not alt:
                    if not nullable[r]:
                        nullable[r] = True
                        todo.append(r)
                    continue
                k = len(owner)
                owner.append(r)
                missing.append(len(alt))
                for item in alt:
                    waiting.setdefault(item, []).append(k)
        while todo:
            for k in waiting.get(todo.pop(), ()):
                missing[k] -= 1
                if missing[k] == 0 and not nullable[owner[k]]:
                    nullable[owner[k]] = True
                    todo.append(owner[k])
        return nullable

    def _rule_depth(self, reachable: list[int]) -> int:
        """Longest chain of references from root; rules that reach each other count once each."""
        succ = {r: sorted({i for alt in self.alts[r] for i in alt if i >= 0}) for r in reachable}
        comp_of: dict[int, int] = {}
        depth: list[int] = []
        for c, comp in enumerate(_sccs(reachable, succ)):  # each after the components it reaches
            for r in comp:
                comp_of[r] = c
            below = max((depth[comp_of[s]] for r in comp for s in succ[r] if comp_of.get(s, c) != c), default=0)
            depth.append(len(comp) + below)
        return depth[comp_of[self.root]]

    def _starts(self, reachable: list[int], nullable: list[bool]) -> list[int]:
        """Per rule, the stack weight its start yields (alternatives add; a reference that can match
        nothing adds what follows it). Refuses left recursion that would grow llama.cpp's stacks: a
        rule reaching itself before reading anything through a reference that something follows
        (llama.cpp finds it only where no rule that can match nothing lies in between, and otherwise
        allocates until it aborts). Rules reaching each other only in last position, as ``(x*)*``
        does, leave the stacks as they are: llama.cpp stops on the stacks it has seen."""
        left: dict[int, list[int]] = {}
        pushes: dict[int, set[int]] = {}  # r -> rules it starts with through a reference followed by more
        for r in reachable:
            heads, pushing = [], set()
            for alt in self.alts[r]:
                for i, item in enumerate(alt):
                    if item < 0:
                        break
                    heads.append(item)
                    if i < len(alt) - 1:
                        pushing.add(item)
                    if not nullable[item]:
                        break
            left[r], pushes[r] = heads, pushing
        first = [0] * len(self.alts)
        for comp in _sccs(reachable, left):  # each after the components it starts with
            members = set(comp)
            if len(comp) > 1 or comp[0] in left[comp[0]]:
                for r in comp:
                    if pushes[r] & members:
                        name = next((k for k, v in self.parser.symbol_ids.items() if v == r), str(r))
                        raise _Refused(f"is left recursive (the rule '{name}' can reach itself before reading "
                                       "anything, and something follows); llama.cpp cannot run that")
            total = 0  # a cycle's rules yield the same stacks: what each yields outside it, once
            for r in comp:
                for alt in self.alts[r]:
                    for item in alt:
                        if item < 0:
                            total += -item
                            break
                        if item not in members:
                            total += first[item]
                        if not nullable[item]:
                            break
            for r in comp:
                first[r] = min(total, _CAP)
        return first

    def _stack_weight(self, reachable: list[int], nullable: list[bool], first: list[int]) -> int:
        """The most stack weight llama.cpp holds at one point: at the start, and after each terminal,
        what the rest of its alternative yields, plus, where that rest can match nothing, what follows
        the rule in its callers (``after``). Refuses stacks that grow with the text."""
        best = self.inner  # after a terminal, from the rest of its alternative alone
        tail = dict.fromkeys(reachable, -1)  # per rule: the most, after a terminal, from a rest that can end it
        calls: dict[int, list[tuple[int, int, bool]]] = {r: [] for r in reachable}  # callee: (caller, w, pops)
        for r in reachable:
            for alt in self.alts[r]:
                rest, empty = 0, True  # what the items from here on yield, and whether they can match nothing
                for item in reversed(alt):
                    if item < 0:
                        if empty:
                            if rest > tail[r]:
                                tail[r] = rest
                        elif rest > best:
                            best = rest
                        rest, empty = -item, False
                    else:
                        calls[item].append((r, rest, empty))
                        rest = first[item] + rest if nullable[item] else first[item]
                        if rest > _CAP:
                            rest = _CAP
                        empty = empty and nullable[item]
        after = self._after(reachable, calls)
        best = max(best, first[self.root] + (after[self.root] if nullable[self.root] else 0))
        for r in reachable:
            if tail[r] >= 0:
                best = max(best, tail[r] + after[r])
        return min(best, _CAP)

    def _after(self, reachable: list[int], calls: dict[int, list[tuple[int, int, bool]]]) -> dict[int, int]:
        """Per rule, the most stack weight its end yields (what follows it in a caller, and so on up
        through callers whose rest can match nothing; the end of root: the empty stack)."""
        pops = {r: [c for c, _, p in calls[r] if p] for r in reachable}
        after: dict[int, int] = {}
        comp_of: dict[int, int] = {}
        for c, comp in enumerate(_sccs(reachable, pops)):  # callers before the rules they call
            for r in comp:
                comp_of[r] = c
            best = 1 if self.root in comp else 0  # the empty stack: generation may end
            for r in comp:
                for caller, w, popped in calls[r]:
                    if not popped:
                        best = max(best, w)
                    elif comp_of.get(caller) != c:
                        best = max(best, w + after[caller])
                    elif w > 0:  # a cycle that adds stacks each time round: they grow with the text
                        name = next((k for k, v in self.parser.symbol_ids.items() if v == r), str(r))
                        raise _Refused(f"would hold more parse stacks the longer the text (the rule '{name}' "
                                       "recurses with an optional item after it)")
            for r in comp:
                after[r] = min(best, _CAP)
        return after
