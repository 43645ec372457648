"""The constraint fields of a request: ``grammar`` (GBNF), ``json_schema`` and OpenAI's ``response_format``.

Pure: this only reads and bounds the fields and says which one constrains the output. Turning a
schema into GBNF and checking that llama.cpp parses the result needs llama.cpp and the model's
vocabulary, so it happens in ``grammar_compile`` when the request is prepared (worker thread).

One constraint per request: llama-server silently lets ``grammar`` win over ``json_schema``; a
request naming two is more likely a client bug than a choice, so it is a 400 here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slotserver.errors import BadRequest
from slotserver.sampling.grammar_budget import check_grammar_budget

# GBNF text (sent, or converted from a schema) and a schema's JSON: 64 KiB covers a schema of a few
# hundred properties; llama.cpp keeps the parsed rules per request and walks them for every token.
MAX_GRAMMAR_CHARS = 65536
# The schema converter writes repetitions out (``maxItems: 3`` becomes ``item ("," item)?...``), so
# a count of 10^9 would build a gigabyte string in the worker thread; counts above this are refused.
MAX_SCHEMA_REPEAT = 1000
REPEAT_KEYWORDS = ("minItems", "maxItems", "minLength", "maxLength")
# A regex ``pattern`` is written out the same way, and nested quantifiers multiply: ``((a{9}){9}){9}``
# becomes 729 literal characters. Patterns whose written-out size would pass this are refused.
MAX_PATTERN_COST = 100_000
# A schema's nesting (JSON levels: an object property is two) and its properties, enum values and
# anyOf/oneOf/allOf/prefixItems entries in all: the converter recurses per level and writes rules per
# entry (OpenAI's structured outputs allow 5 object levels and a few hundred of each).
MAX_SCHEMA_DEPTH = 32
MAX_SCHEMA_BRANCHES = 1000
BRANCH_KEYWORDS = ("properties", "enum", "anyOf", "oneOf", "allOf", "prefixItems")
# OpenAI ``{"type": "json_object"}``: any JSON object.
ANY_OBJECT = {"type": "object"}


@dataclass(frozen=True, slots=True)
class Constraint:
    """What constrains a request's output, and the field it came from (named in every error)."""

    field: str  # grammar | json_schema | response_format
    gbnf: str = ""  # the GBNF text of a ``grammar`` field
    schema: dict | None = None  # the JSON schema of ``json_schema`` or ``response_format``


def parse_constraint(body: dict) -> Constraint | None:
    """The request's one constraint, or None; BadRequest naming the field if it is malformed."""
    found = [c for c in (_grammar(body), _json_schema(body), _response_format(body.get("response_format")))
             if c is not None]
    if len(found) > 1:
        raise BadRequest(f"use one of 'grammar', 'json_schema' and 'response_format', not "
                         f"{' and '.join(repr(c.field) for c in found)} together")
    if found and found[0].schema is not None:
        check_schema_bounds(found[0].schema, found[0].field)
    return found[0] if found else None


def _grammar(body: dict) -> Constraint | None:
    value = body.get("grammar")
    if value is None or value == "":  # llama.cpp: an empty grammar is none
        return None
    if not isinstance(value, str):
        raise BadRequest("'grammar' must be a string (GBNF)")
    if len(value) > MAX_GRAMMAR_CHARS:
        raise BadRequest(f"'grammar' must be at most {MAX_GRAMMAR_CHARS} characters long (got {len(value)})")
    check_grammar_budget(value, "grammar")  # before llama.cpp parses it (grammar_compile.check_gbnf)
    return Constraint("grammar", gbnf=value)


def _json_schema(body: dict) -> Constraint | None:
    value = body.get("json_schema")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("'json_schema' must be a JSON schema object")
    return Constraint("json_schema", schema=value)


def _response_format(value: Any) -> Constraint | None:
    """OpenAI's ``response_format``: ``text`` (none), ``json_object`` (any object, or llama-server's
    ``schema`` key), ``json_schema`` (its ``json_schema.schema``; any JSON value without one, as llama-server)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("'response_format' must be an object")
    kind = value.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = value.get("schema", ANY_OBJECT)
        where = "response_format.schema"
    elif kind == "json_schema":
        wrapper = value.get("json_schema")
        if not isinstance(wrapper, dict):
            raise BadRequest("'response_format.json_schema' must be an object with a 'schema'")
        schema = wrapper.get("schema", {})
        where = "response_format.json_schema.schema"
    else:
        raise BadRequest(f"'response_format.type' must be 'text', 'json_object' or 'json_schema' (got {kind!r})")
    if not isinstance(schema, dict):
        raise BadRequest(f"'{where}' must be a JSON schema object")
    return Constraint("response_format", schema=schema)


def check_schema_bounds(schema: Any, field: str) -> None:
    """Refuse what the converter would write out too large or follow elsewhere: deep nesting, too many
    properties/enum values/branches, large repetition counts, multiplying regex patterns, and any
    ``$ref`` but a local ``#/...`` one (llama-cpp-python's converter never fetches a URL, and with
    this it is never asked to)."""
    stack = [(schema, 1)]
    n_branches = 0
    while stack:
        node, depth = stack.pop()
        if isinstance(node, list):
            stack.extend((item, depth + 1) for item in node)
            continue
        if not isinstance(node, dict):
            continue
        if depth > MAX_SCHEMA_DEPTH:
            raise BadRequest(f"'{field}': the schema nests more than {MAX_SCHEMA_DEPTH} levels deep")
        for key in BRANCH_KEYWORDS:
            if isinstance(node.get(key), (dict, list)):
                n_branches += len(node[key])
        if n_branches > MAX_SCHEMA_BRANCHES:
            raise BadRequest(f"'{field}': the schema has more than {MAX_SCHEMA_BRANCHES} properties, enum values "
                             "and anyOf/oneOf/allOf/prefixItems entries in all")
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#/"):
            raise BadRequest(f"'{field}': '$ref' must point inside the schema ('#/...'), got {ref[:80]!r}: "
                             "schemas are never fetched")
        for key in REPEAT_KEYWORDS:
            count = node.get(key)
            if isinstance(count, (int, float)) and not isinstance(count, bool) and count > MAX_SCHEMA_REPEAT:
                raise BadRequest(f"'{field}': '{key}' must be at most {MAX_SCHEMA_REPEAT} (got {count})")
        pattern = node.get("pattern")
        if isinstance(pattern, str) and pattern_cost(pattern) > MAX_PATTERN_COST:
            raise BadRequest(f"'{field}': the pattern {pattern[:40]!r} repeats too much to be turned into a grammar "
                             f"(its quantifiers multiply past {MAX_PATTERN_COST})")
        stack.extend((value, depth + 1) for value in node.values())


def pattern_cost(pattern: str) -> int:
    """About how many atoms the converter writes for ``pattern``: each ``{m,n}`` multiplies what it
    repeats (an atom, a class or a whole group) by its largest count; ``*``, ``+``, ``?`` do not."""
    totals = [0]  # the running cost of each open group, innermost last
    last = 0  # cost of the atom a quantifier would repeat
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "(":
            totals.append(0)
            last = 0
        elif c == ")" and len(totals) > 1:
            last = totals.pop()
            totals[-1] += last
        elif c == "{" and "}" in pattern[i:]:
            end = pattern.index("}", i)
            counts = [int(n) if len(n) <= 9 else 10**9  # int() refuses thousands of digits
                      for n in pattern[i + 1 : end].replace(" ", "").split(",") if n.isascii() and n.isdigit()]
            times = max(counts, default=1)
            totals[-1] += last * (times - 1)
            last *= times
            i = end
        else:
            if c == "\\":
                i += 1
            elif c == "[":
                close = pattern.find("]", i + 2)  # a ']' right after '[' is part of the class
                i = close if close > 0 else len(pattern)
            last = 1
            totals[-1] += 1
        i += 1
    return sum(totals)
