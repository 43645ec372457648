"""Grammars and JSON schemas near every ``grammar_budget`` limit, for the pure and the live-server tests.

Each strategy draws around one budget (a little under it, at it, a little over it), and a few draw
the cases that crash or stall llama.cpp without the budgets (32,000 nested groups, hidden left
recursion, a largest count below the smallest, thousands of alternatives).
"""

from __future__ import annotations

from hypothesis import strategies as st

from slotserver.sampling.constraint import MAX_SCHEMA_BRANCHES, MAX_SCHEMA_DEPTH
from slotserver.sampling.grammar_budget import (
    MAX_ELEMENTS,
    MAX_GROUP_DEPTH,
    MAX_RULE_DEPTH,
    MAX_STACK_WEIGHT,
    WIDE_WEIGHT,
)

CRASH = "root ::= " + "(" * 32000 + '"a"' + ")" * 32000  # issue 31: kills the process at 24272d3
HIDDEN_LEFT_RECURSION = 'root ::= a root "x" | "x"\na ::= b\nb ::= ""\n'  # llama.cpp: bad_alloc, abort
SIX_THOUSAND = "root ::= " + " | ".join(f'"a{i}"' for i in range(6000))  # issue 31: 12 s per token
BACKWARDS_COUNT = 'root ::= "a"{5,2}'  # llama.cpp writes 2^64 rules

NARROW_HEADS = ['"a"', '"\\""', '"x" "y"', "[b]", "<[42]>", '"\\u00e9"']
WIDE_HEADS = ['" "', "[a-z]", '[^"]', ".", "[0-9a-fA-F]", '"\\n"', "[^\\x00-\\x1F]"]


def _near(limit: int, spread: int) -> st.SearchStrategy[int]:
    return st.integers(min_value=max(1, limit - spread), max_value=limit + spread)


@st.composite
def deep(draw) -> str:
    """Nested groups around MAX_GROUP_DEPTH (the C parser recurses once per group)."""
    depth = draw(st.one_of(_near(MAX_GROUP_DEPTH, 4), st.integers(1, 64), st.just(32000)))
    inner = draw(st.sampled_from(['"a"', '[a-z]', '"a" | "b"', '"x"?']))
    return "root ::= " + "(" * depth + inner + ")" * depth


@st.composite
def wide(draw) -> str:
    """Alternatives whose stack weight is around MAX_STACK_WEIGHT, narrow and wide heads mixed."""
    n_wide = draw(st.integers(0, MAX_STACK_WEIGHT // WIDE_WEIGHT + 1))
    target = max(0, MAX_STACK_WEIGHT - WIDE_WEIGHT * n_wide)
    n_narrow = draw(st.integers(max(0, target - 3), target + 3))
    heads = [draw(st.sampled_from(NARROW_HEADS)) for _ in range(n_narrow)]
    heads += [draw(st.sampled_from(WIDE_HEADS)) for _ in range(n_wide)]
    alts = [f'{h} "{i}"' for i, h in enumerate(draw(st.permutations(heads)))]
    if draw(st.booleans()):  # the same alternatives one rule further down, behind an optional prefix
        return 'root ::= "p"? alts "q"\nalts ::= ' + " | ".join(alts)
    return "root ::= " + " | ".join(alts)


@st.composite
def repeated(draw) -> str:
    """Repetitions around MAX_ELEMENTS (a literal copied count times) and nested counts."""
    kind = draw(st.sampled_from(["literal", "nested", "optional"]))
    if kind == "literal":
        length = draw(st.integers(1, 200))
        count = draw(_near(MAX_ELEMENTS // length, 3)) if length > MAX_ELEMENTS // 2000 else draw(st.integers(0, 2000))
        return f'root ::= "{"a" * length}"{{{count}}}'
    if kind == "nested":
        counts = draw(st.lists(st.integers(1, 60), min_size=1, max_size=4))
        text = '"ab"'
        for c in counts:
            text = f"({text}){{0,{c}}}"
        return "root ::= " + text
    lo = draw(st.integers(0, 2100))
    hi = draw(st.one_of(st.none(), st.integers(0, 2100), st.just(10**30)))
    return f'root ::= [a-z]{{{lo},{"" if hi is None else hi}}}'


def short_name(i: int) -> str:
    """Rule names of two or three characters, so a chain of 4,096 rules fits in 64 KiB."""
    digits = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return "r" + digits[i // len(digits) % len(digits)] + digits[i % len(digits)] + ("" if i < 52 * 52 else "z")


@st.composite
def chained(draw) -> str:
    """A chain of rule references around MAX_RULE_DEPTH; sometimes closed into a left-recursive loop."""
    n = draw(_near(MAX_RULE_DEPTH, 4) | st.integers(1, 50))
    first, last = short_name(0), short_name(n)
    closing = draw(st.sampled_from(['"a"', first, f'"a" {first}', f'{first} "a"']))  # first last: left recursion
    chain = "".join(f"{short_name(i)} ::= {short_name(i + 1)}\n" for i in range(n))
    return f"root ::= {first}\n{chain}{last} ::= {closing}\n"


structural = st.one_of(
    deep(), wide(), repeated(), chained(),
    st.sampled_from([CRASH, HIDDEN_LEFT_RECURSION, SIX_THOUSAND, BACKWARDS_COUNT,
                     'root ::= "a" root "b"? | "c"']),  # parse stacks that grow with the text
)


@st.composite
def schemas(draw) -> dict:
    """JSON schemas around the schema budgets and the grammar budgets their converted text meets."""
    kind = draw(st.sampled_from(["enum", "properties", "deep", "string", "anyOf", "ref"]))
    if kind == "enum":
        return {"enum": [f"v{i}" for i in range(draw(_near(MAX_STACK_WEIGHT, 8)))]}
    if kind == "properties":
        n = draw(st.integers(1, 120))
        props = {f"p{i}": {"type": draw(st.sampled_from(["integer", "string", "boolean"]))} for i in range(n)}
        step = draw(st.integers(1, 3))
        return {"type": "object", "properties": props, "required": [f"p{i}" for i in range(0, n, step)]}
    if kind == "deep":
        schema: dict = {"type": "integer"}
        for _ in range(draw(_near(MAX_SCHEMA_DEPTH // 2, 2))):
            schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
        return schema
    if kind == "string":
        lo = draw(st.integers(0, 1000))
        return {"type": "string", "minLength": lo, "maxLength": draw(st.integers(lo, 1001))}
    if kind == "anyOf":
        n = draw(st.one_of(st.integers(1, 60), _near(MAX_SCHEMA_BRANCHES, 2)))
        return {"anyOf": [{"const": i} for i in range(n)]}
    return {"$ref": draw(st.sampled_from(["#/definitions/a", "https://127.0.0.1:9/s.json", "other.json#/a",
                                          "file:///etc/passwd"])), "definitions": {"a": {"type": "integer"}}}
