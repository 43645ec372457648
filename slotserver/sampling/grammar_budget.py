"""Bounds on what a GBNF grammar makes llama.cpp build and walk, checked in Python before llama.cpp sees it.

llama.cpp trusts its grammars. Its parser recurses once per ``(`` (32,000 of them, 64 KB of text,
overflow the C stack and kill the process); a count ``{5,2}`` makes it write 2^64 rules (memory
runs out); a left recursion hidden behind a rule that matches nothing (``a ::= b``, ``b ::=``) is not
detected and makes it build ever longer parse stacks until it aborts; and when a grammar is applied
to the candidates (the slow path of ``grammar_sampler``), every live parse stack is walked for every
one of the vocabulary's tokens (Gemma's 262k), on the engine thread that every slot waits for:
thousands of alternatives cost seconds per token (docs/measurements.md). So this reads the text as
llama.cpp's parser does (``llama-grammar.cpp``: the same syntax, the same rewriting of ``x*``, ``x+``,
``x?`` and ``x{m,n}`` into rules, the same rule ids), without recursion (``gbnf_reader``), and
refuses, as a BadRequest naming the field and the limit:

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
  ``t*`` is a stack of its own, so a pass costs more with every character read, without bound:
  docs/measurements.md);
- what llama.cpp refuses only after work (counts over 2,000, a largest count below the smallest).

Stack weights follow what walking a stack costs in one whole-vocabulary pass (thread CPU time, 32
alternatives of one shape; ``benchmarks/grammar_budget_cost.py``, figures in docs/measurements.md): a
stack whose next character is one fixed character weighs 1; one whose next element is a space (most
tokens start with one), a class, ``.`` or a negated class followed by more of them costs up to eight
times as much and weighs 8, plus 1 per 32 class elements. ``MAX_STACK_WEIGHT`` (200) keeps a pass
within about half a second on a small CPU. Typical schema grammars stay well inside: any JSON value
weighs 32, 40 optional properties 49, an enum of 100 values 100. What a static count cannot see:
ambiguous rules read the same text in several ways at once (``t ::= "a" t "b" | "a" t | "a" "b"``),
and each way keeps stacks of its own; the engine watchdog covers those.
"""

from __future__ import annotations

from dataclasses import dataclass

from slotserver.errors import BadRequest

# The budgets reading enforces (MAX_GROUP_DEPTH, MAX_ELEMENTS) are named here too, beside the others.
from slotserver.sampling.gbnf_reader import ALT, CAP, CONT, MAX_ELEMENTS, MAX_GROUP_DEPTH, NARROW, WIDE, Parser, Refused  # noqa: F401 (the budget's limits, in one place)

# Longest chain of rule references from root; each group and each repetition is a rule too
# (``maxLength: 1000`` chains 2,003). Bounds how long a parse stack gets, which llama.cpp copies.
MAX_RULE_DEPTH = 4096
# Parse-stack weight at any point (see the module docstring for the measurements).
MAX_STACK_WEIGHT = 200
NARROW_WEIGHT = 1  # the next character is one fixed character other than white space, or a token
WIDE_WEIGHT = 8  # a space, a class, ``.`` or a negated class
CLASS_ELEMENTS_PER_WEIGHT = 32  # a class's characters and ranges add to its weight


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
    except Refused as exc:
        raise BadRequest(f"{label} {exc}") from None


def measure(text: str) -> GrammarCost:
    """The grammar's cost; ``Refused`` (a reason) if it breaks a budget or would not parse."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused("is not valid Unicode text (a lone surrogate)") from None
    text = text.split("\0", 1)[0]  # llama.cpp reads a C string
    parser = Parser(text)
    parser.parse()
    return _Analysis(parser).run()


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

    def __init__(self, parser: Parser) -> None:
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
            raise Refused(f"chains {depth} rule references from 'root', more than {MAX_RULE_DEPTH} "
                           "(each group and repetition is a rule)")
        first = self._starts(reachable, nullable)
        weight = self._stack_weight(reachable, nullable, first)
        if weight > MAX_STACK_WEIGHT:
            raise Refused(f"would make parse stacks of weight {weight if weight < CAP else 'unbounded'} at one "
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
                        raise Refused(f"is left recursive (the rule '{name}' can reach itself before reading "
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
                first[r] = min(total, CAP)
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
                        if rest > CAP:
                            rest = CAP
                        empty = empty and nullable[item]
        after = self._after(reachable, calls)
        best = max(best, first[self.root] + (after[self.root] if nullable[self.root] else 0))
        for r in reachable:
            if tail[r] >= 0:
                best = max(best, tail[r] + after[r])
        return min(best, CAP)

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
                        raise Refused(f"would hold more parse stacks the longer the text (the rule '{name}' "
                                       "recurses with an optional item after it)")
            for r in comp:
                after[r] = min(best, CAP)
        return after
