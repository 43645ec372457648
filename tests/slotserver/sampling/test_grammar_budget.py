"""The structural budgets of a GBNF grammar (slotserver/grammar_budget.py), without the model.

The cases that crash or stall llama.cpp (issue 31) are refused with a message naming the field and
the limit; grammars the schema converter writes for typical schemas stay well inside; the scanner
reads GBNF as llama.cpp does; and on generated grammars near every budget it answers or refuses
quickly, never with another exception.
"""

from __future__ import annotations

import json
import socket
import time

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from llama_cpp.llama_grammar import json_schema_to_gbnf

from slotserver.errors import BadRequest
from slotserver.sampling.constraint import Constraint
from slotserver.sampling.grammar_budget import (
    MAX_ELEMENTS,
    MAX_GROUP_DEPTH,
    MAX_RULE_DEPTH,
    MAX_STACK_WEIGHT,
    NARROW_WEIGHT,
    WIDE_WEIGHT,
    GrammarCost,
    check_grammar_budget,
)
from slotserver.sampling.grammar_compile import to_gbnf
from slotserver.serving.request import parse_completion
from tests.slotserver.sampling.grammar_cases import (
    BACKWARDS_COUNT,
    CRASH,
    HIDDEN_LEFT_RECURSION,
    SIX_THOUSAND,
    schemas,
    structural,
)

# Generous for a loaded 2-core machine: the largest grammars take ~50 ms.
CHECK_SECONDS = 3.0


def cost(text: str) -> GrammarCost:
    return check_grammar_budget(text, "grammar")


def refused(text: str, needle: str, field: str = "grammar") -> str:
    with pytest.raises(BadRequest) as info:
        check_grammar_budget(text, field)
    message = str(info.value)
    assert message.startswith(f"'{field}' ") and needle in message, message
    return message


# -- what crashes or stalls llama.cpp -----------------------------------------------------------------

def test_the_crash_grammar_of_issue_31_is_refused_for_its_nesting():
    assert len(CRASH) < 65536  # under the character cap: only its structure gives it away
    refused(CRASH, f"nests groups '(...)' more than {MAX_GROUP_DEPTH} deep")
    assert cost("root ::= " + "(" * MAX_GROUP_DEPTH + '"a"' + ")" * MAX_GROUP_DEPTH).group_depth == MAX_GROUP_DEPTH
    refused("root ::= " + "(" * (MAX_GROUP_DEPTH + 1) + '"a"' + ")" * (MAX_GROUP_DEPTH + 1), "nests groups")


def test_thousands_of_alternatives_are_refused_for_their_parse_stacks():
    refused(SIX_THOUSAND, f"would make parse stacks of weight 6000 at one point, more than {MAX_STACK_WEIGHT}")
    at_limit = "root ::= " + " | ".join(f'"a{i}"' for i in range(MAX_STACK_WEIGHT))
    assert cost(at_limit).stack_weight == MAX_STACK_WEIGHT
    refused(at_limit + ' | "b"', f"weight {MAX_STACK_WEIGHT + 1}")


def test_stack_weight_counts_what_walking_each_stack_costs():
    assert cost('root ::= "a" | "b"').stack_weight == 2 * NARROW_WEIGHT
    assert cost('root ::= "a" | [a-z] | " " | . | [^"]').stack_weight == NARROW_WEIGHT + 4 * WIDE_WEIGHT
    assert cost("root ::= [" + "\\u0100" * 64 + "]").stack_weight == WIDE_WEIGHT + 2  # 64 class elements
    # A nullable element adds what follows it; the end of a rule adds what follows its callers.
    assert cost('root ::= "a"? "b"? "c"').stack_weight == 3
    assert cost('root ::= x "1" | x "2" | x "3"\nx ::= "a" | "b" | ""').stack_weight == 9
    assert cost('root ::= "s" x ("," | ";" | "." | "")\nx ::= "a" y\ny ::= "b"?').stack_weight == 5


def test_a_left_recursion_hidden_behind_an_empty_rule_is_refused():
    """llama.cpp's own check knows only rules with an empty alternative, and builds stacks until it aborts."""
    refused(HIDDEN_LEFT_RECURSION, "is left recursive (the rule 'root' can reach itself")
    refused("root ::= root \"a\" | \"b\"", "is left recursive")
    refused('root ::= x\nx ::= ("")* y\ny ::= x "a" | "b"', "is left recursive")
    assert cost('root ::= "a" root | "b"').stack_weight == 2  # right recursion is fine
    # Rules that reach each other only in last position leave llama.cpp's stacks as they are: it runs them.
    assert cost('root ::= (" "? "x"?)*').stack_weight == WIDE_WEIGHT + NARROW_WEIGHT + 2
    assert cost('root ::= ((("a")*)*)* "b"').stack_weight <= 4  # an upper bound: llama.cpp holds 2
    assert cost('root ::= "a"\nx ::= x "b"').rules == 2  # only what root reaches matters (llama.cpp refuses it)


def test_stacks_that_would_grow_with_the_text_are_refused():
    refused('root ::= "a" root "b"? | "c"', "would hold more parse stacks the longer the text")
    refused('root ::= "x" t\nt ::= "a" t t | ""', "would hold more parse stacks")
    refused('root ::= "x" t\nt ::= "a" t*', "would hold more parse stacks")  # 0.18 s a pass after 50 characters
    assert cost('root ::= "a" root "b" | "c"').stack_weight == 2  # "b" not optional: no more than at the start


def test_counts_llama_cpp_refuses_only_after_work_are_refused_first():
    refused(BACKWARDS_COUNT, "has a repetition {5,2} whose largest count is below its smallest")
    refused('root ::= "a"{2001}', "repeats an item at least 2001 times, more than 2000")
    refused('root ::= "a"{99999999999999999999999}', "has a repetition count that is too large")
    refused('root ::= "a"{1,' + "9" * 5000 + "}", "too large")  # int() of thousands of digits refuses
    refused('root ::= (("a"){0,50}){0,50}', "repeats 52 rules 50 times, more than llama.cpp's 2000")
    assert cost('root ::= "a"{0,5000}').rules == 2  # a largest count past 2000 means none, as in llama.cpp


def test_written_out_size_multiplies_what_repetitions_copy():
    length = 100
    count = MAX_ELEMENTS // length
    refused(f'root ::= "{"a" * length}"{{{count + 1}}}', f"writes out more than {MAX_ELEMENTS} grammar elements")
    assert 0 <= cost(f'root ::= "{"a" * length}"{{{count - 2}}}').elements - length * (count - 2) <= 2
    # [a-z] is 2 elements: 3 copies, 2 optional rules of 2 + 3, a reference, the end.
    assert 0 <= cost("root ::= [a-z]{3,5}").elements - (3 * 2 + 2 * (2 + 3) + 1 + 1) <= 2
    assert cost('root ::= ("ab"){0,3}').rules == 5  # the group, and one optional rule per count


def test_rule_reference_depth_counts_a_cycle_once():
    chain = "".join(f"r{i} ::= r{i + 1}\n" for i in range(MAX_RULE_DEPTH + 5)) + f'r{MAX_RULE_DEPTH + 5} ::= "a"\n'
    refused("root ::= r0\n" + chain, f"chains {MAX_RULE_DEPTH + 7} rule references from 'root', more than "
            f"{MAX_RULE_DEPTH}")
    assert cost('root ::= a\na ::= b\nb ::= "x" a | "y"').rule_depth == 3  # {a, b} count once each
    assert cost('root ::= "x" ("y" ("z")?)?').rule_depth == 5  # groups and repetitions are rules


# -- GBNF as llama.cpp reads it -----------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    'root ::= "a" # a comment\n# a whole-line comment\n',
    'root ::= [\\]\\\\\\-a-z] [^"\\\\] "\\x41\\u00e9\\U0001F600\\"\\t\\n\\r\\\\"',
    "root ::= my-rule\nmy-rule ::= \"x\"\r\n",
    'root ::= "a"{ 2 , 4 } "b"{3} "c"{1,} "d"* "e"+ "f"?',
    'root ::= <[42]> !<[7]> <|im_end|> "x"',
    "root ::= (\n  \"a\" |\n  \"b\"\n)\n",
    'root ::= [] "a"',  # an empty class writes nothing, as in llama.cpp
    'root ::= "a"\0 anything after a NUL is not read by llama.cpp',
])
def test_gbnf_syntax_is_read_as_llama_cpp_does(text):
    assert cost(text).stack_weight >= 1


@pytest.mark.parametrize("text,needle", [
    ("root ::= (", "expecting ')'"),
    ('root ::= "abc', "unexpected end of input"),
    ("root ::= [abc", "unexpected end of input"),
    ('root ::= "\\q"', "unknown escape"),
    ('root ::= "\\x4"', "expecting 2 hex chars"),
    ("root ::= undefined-rule", "the rule 'undefined-rule' is used but not defined"),
    ('start ::= "a"', "it has no 'root' rule"),
    ('root = "a"', "expecting ::="),
    ('root ::= "a" )', "expecting newline or end"),
    ("root ::= *", "expecting an item before the repetition"),
    ('root ::= "a"{x}', "expecting an int"),
    ('root ::= "\ud800"', "is not valid Unicode text"),
])
def test_malformed_grammars_are_a_400_saying_where(text, needle):
    message = refused(text, needle)
    assert message.startswith("'grammar' is not a valid GBNF grammar") or "Unicode" in message


# -- typical schema grammars stay well inside ---------------------------------------------------------

TYPICAL = {
    "any JSON value": {},
    "an object of 60 properties, half optional": {
        "type": "object", "properties": {f"p{i}": {"type": ["integer", "string", "boolean"][i % 3]} for i in range(60)},
        "required": [f"p{i}" for i in range(0, 60, 2)]},
    "40 optional properties": {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(40)}},
    "an enum of 100 values": {"enum": [f"value{i}" for i in range(100)]},
    "nested arrays of objects": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 40}, "tags": {"type": "array", "items": {"type": "string"}},
        "when": {"type": "string", "format": "date-time"}, "id": {"type": "string", "format": "uuid"}}}},
    "a string of up to 1000 characters": {"type": "string", "maxLength": 1000},
    "a pattern": {"type": "string", "pattern": "^[A-Z][a-z]{1,20} [0-9]{3}-[0-9]{4}$"},
    "anyOf of 20 objects": {"anyOf": [{"type": "object", "properties": {f"k{i}": {"type": "number"}},
                                       "required": [f"k{i}"]} for i in range(20)]},
}


@pytest.mark.parametrize("name", TYPICAL)
def test_typical_schema_grammars_stay_well_inside(name):
    c = cost(json_schema_to_gbnf(json.dumps(TYPICAL[name])))
    assert c.stack_weight <= MAX_STACK_WEIGHT // 2, c
    assert c.elements <= MAX_ELEMENTS // 10 and c.group_depth < MAX_GROUP_DEPTH and c.rule_depth < MAX_RULE_DEPTH, c


def test_larger_schemas_still_fit():
    for schema in ({"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(100)}},
                   {"enum": [f"v{i}" for i in range(MAX_STACK_WEIGHT)]}):
        assert cost(json_schema_to_gbnf(json.dumps(schema))).stack_weight <= MAX_STACK_WEIGHT


def test_a_schema_whose_grammar_breaks_a_budget_is_a_400_naming_its_field():
    big_enum = Constraint("json_schema", schema={"enum": [f"v{i}" for i in range(300)]})
    with pytest.raises(BadRequest, match="^'json_schema': the schema's grammar would make parse stacks of weight 300"):
        to_gbnf(big_enum)


def test_the_grammar_field_is_checked_when_the_request_is_parsed():
    with pytest.raises(BadRequest, match="^'grammar' nests groups"):
        parse_completion({"prompt": "x", "grammar": CRASH})


def test_the_converter_never_fetches_a_remote_ref():
    """llama-cpp-python's converter can fetch https refs; ``json_schema_to_gbnf`` runs it with
    ``allow_fetch=False``. A listening socket sees no connection (and the request check refuses such
    refs before the converter runs: tests/slotserver/sampling/test_grammar.py)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        for ref in (f"https://127.0.0.1:{port}/s.json", f"https://127.0.0.1:{port}/s.json#/a"):
            with pytest.raises(BadRequest, match="is not a JSON schema that can be turned into a grammar"):
                to_gbnf(Constraint("json_schema", schema={"$ref": ref}))
        with pytest.raises(BlockingIOError):
            listener.accept()


# -- generated grammars near every budget -------------------------------------------------------------

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(text=structural)
@example(text=CRASH)
@example(text=HIDDEN_LEFT_RECURSION)
@example(text=SIX_THOUSAND)
def test_grammars_near_every_budget_are_measured_or_refused_quickly(text):
    start = time.perf_counter()
    try:
        c = cost(text)
    except BadRequest as exc:
        assert str(exc).startswith("'grammar' ")
    else:
        assert c.group_depth <= MAX_GROUP_DEPTH and c.elements <= MAX_ELEMENTS
        assert c.rule_depth <= MAX_RULE_DEPTH and c.stack_weight <= MAX_STACK_WEIGHT
    assert time.perf_counter() - start < CHECK_SECONDS


@SETTINGS
@given(text=st.lists(st.sampled_from(list('ab|()[]^-"\\*+?{},.<>!#: \n\t\r\0') + ["::=", "root ::= ", "x", "1"]),
                    max_size=80).map("".join))
def test_any_text_is_measured_or_refused_never_another_exception(text):
    try:
        cost(text)
    except BadRequest:
        pass


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(schema=schemas())
def test_schemas_near_the_budgets_are_converted_or_refused_quickly(schema):
    start = time.perf_counter()
    try:
        request = parse_completion({"prompt": "x", "json_schema": schema})
        to_gbnf(request.constraint)
    except BadRequest as exc:
        assert str(exc).startswith("'json_schema'")
    assert time.perf_counter() - start < CHECK_SECONDS
