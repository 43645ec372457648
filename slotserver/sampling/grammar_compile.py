"""Turn a request's constraint into GBNF text llama.cpp is known to parse, before the request is queued.

Runs in the worker thread that prepares the request, so a bad grammar is a 400 naming its field and
never reaches the engine step: schemas go through llama-cpp-python's converter (the Python port of
llama.cpp's ``json_schema_to_grammar``, which never fetches: ``allow_fetch=False``, and
``grammar.check_schema_bounds`` refuses any ``$ref`` but a local one first), the text it writes is held
to the same structural budgets as a ``grammar`` field (``grammar_budget``: llama.cpp's parser would
crash or stall on what they refuse), and only then parsed once by ``llama_sampler_init_grammar``,
which returns NULL on a syntax error, an undefined rule, a missing ``root`` or left recursion (llama.cpp
prints why to stderr). That trial sampler is freed at once; the slot builds its own when the request
starts (``grammar_sampler``), so no C pointer travels with a job that may never start.
"""

from __future__ import annotations

import json

import llama_cpp as lc
from llama_cpp.llama_grammar import json_schema_to_gbnf

from slotserver.errors import BadRequest
from slotserver.sampling.constraint import MAX_GRAMMAR_CHARS, Constraint
from slotserver.sampling.grammar_budget import check_grammar_budget

ROOT = b"root"


def to_gbnf(constraint: Constraint) -> str:
    """The constraint's GBNF text; BadRequest naming the field if a schema cannot be converted."""
    if constraint.schema is None:
        return constraint.gbnf
    schema = json.dumps(constraint.schema)
    if len(schema) > MAX_GRAMMAR_CHARS:
        raise BadRequest(f"'{constraint.field}': the schema must be at most {MAX_GRAMMAR_CHARS} characters of JSON")
    try:
        text = json_schema_to_gbnf(schema)
    except Exception as exc:  # the converter raises ValueError, AssertionError, KeyError, RecursionError...
        raise BadRequest(f"'{constraint.field}' is not a JSON schema that can be turned into a grammar: "
                         f"{str(exc)[:200] or type(exc).__name__}") from None
    if len(text) > MAX_GRAMMAR_CHARS:
        raise BadRequest(f"'{constraint.field}': the schema's grammar would be {len(text)} characters long, "
                         f"more than {MAX_GRAMMAR_CHARS}")
    check_grammar_budget(text, constraint.field, "the schema's grammar")
    return text


def check_gbnf(vocab, text: str, field: str) -> None:
    """BadRequest naming ``field`` unless llama.cpp parses ``text`` with the model's vocabulary."""
    sampler = lc.llama_sampler_init_grammar(vocab, text.encode(), ROOT)
    if not sampler:
        raise BadRequest(f"'{field}' is not a valid GBNF grammar (llama.cpp could not parse it: a syntax error, "
                         "an undefined rule, no 'root' rule or left recursion)")
    lc.llama_sampler_free(sampler)
