"""The constraint fields (grammar, json_schema, response_format) and the schema converter (no model)."""

from __future__ import annotations

import json
import re

import pytest

from slotserver.errors import BadRequest
from slotserver.sampling.constraint import (
    ANY_OBJECT,
    MAX_GRAMMAR_CHARS,
    MAX_PATTERN_COST,
    MAX_SCHEMA_BRANCHES,
    MAX_SCHEMA_DEPTH,
    Constraint,
    pattern_cost,
)
from slotserver.sampling.grammar_compile import to_gbnf
from slotserver.sampling.params import SamplingParams
from slotserver.serving.request import parse_completion

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def nested(levels: int) -> dict:
    """An object schema ``levels`` objects deep (two JSON levels each: the object and its properties)."""
    schema: dict = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def constraint(**fields) -> Constraint | None:
    return parse_completion({"prompt": "x", **fields}).constraint


def test_no_constraint_by_default_and_for_text_or_empty_grammar():
    assert constraint() is None
    assert constraint(grammar="") is None  # llama.cpp: an empty grammar is none
    assert constraint(response_format={"type": "text"}) is None
    assert constraint(response_format={}) is None  # OpenAI's default type is text


def test_each_field_names_itself():
    assert constraint(grammar='root ::= "a"') == Constraint("grammar", gbnf='root ::= "a"')
    assert constraint(json_schema=SCHEMA) == Constraint("json_schema", schema=SCHEMA)


def test_response_format_maps_as_openai_and_llama_server():
    assert constraint(response_format={"type": "json_object"}).schema == ANY_OBJECT
    assert constraint(response_format={"type": "json_object", "schema": SCHEMA}).schema == SCHEMA
    wrapped = {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": SCHEMA}}
    assert constraint(response_format=wrapped) == Constraint("response_format", schema=SCHEMA)
    assert constraint(response_format={"type": "json_schema", "json_schema": {"name": "x"}}).schema == {}


@pytest.mark.parametrize("fields,needle", [
    ({"grammar": 5}, "'grammar' must be a string"),
    ({"grammar": "x" * (MAX_GRAMMAR_CHARS + 1)}, f"'grammar' must be at most {MAX_GRAMMAR_CHARS}"),
    ({"json_schema": "{}"}, "'json_schema' must be a JSON schema object"),
    ({"response_format": "json"}, "'response_format' must be an object"),
    ({"response_format": {"type": "xml"}}, "'response_format.type' must be"),
    ({"response_format": {"type": "json_schema"}}, "'response_format.json_schema' must be an object"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": []}}},
     "'response_format.json_schema.schema' must be a JSON schema object"),
    ({"grammar": 'root ::= "a"', "json_schema": SCHEMA}, "use one of .* not 'grammar' and 'json_schema'"),
    ({"json_schema": SCHEMA, "response_format": {"type": "json_object"}}, "'json_schema' and 'response_format'"),
    ({"json_schema": {"type": "array", "maxItems": 10**9}}, "'json_schema': 'maxItems' must be at most 1000"),
    ({"response_format": {"type": "json_object", "schema": {"properties": {"s": {"minLength": 5000}}}}},
     "'response_format': 'minLength'"),
    ({"json_schema": {"type": "string", "pattern": "^((a{99}){99}){99}$"}}, "'json_schema': the pattern"),
    ({"json_schema": nested(MAX_SCHEMA_DEPTH // 2)}, f"'json_schema': the schema nests more than {MAX_SCHEMA_DEPTH}"),
    ({"json_schema": {"enum": list(range(MAX_SCHEMA_BRANCHES + 1))}}, f"more than {MAX_SCHEMA_BRANCHES} properties"),
    ({"json_schema": {"anyOf": [{"enum": list(range(500))}, {"enum": list(range(500))}]}}, "enum values and anyOf"),
    ({"json_schema": {"$ref": "https://example.com/schema.json"}}, "'json_schema': '\\$ref' must point inside"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": {"properties": {
        "a": {"$ref": "http://169.254.169.254/latest"}}}}}}, "'response_format': '\\$ref' must point inside"),
    ({"json_schema": {"$ref": "other.json#/a"}}, "schemas are never fetched"),
])
def test_malformed_constraints_are_a_400_naming_the_field(fields, needle):
    with pytest.raises(BadRequest, match=needle):
        constraint(**fields)


def test_schema_bounds_refuse_just_past_their_limits_and_local_refs_pass():
    assert constraint(json_schema=nested(MAX_SCHEMA_DEPTH // 2 - 1)).schema is not None
    with pytest.raises(BadRequest, match="nests more than"):
        constraint(json_schema=nested(MAX_SCHEMA_DEPTH // 2))
    assert constraint(json_schema={"enum": list(range(MAX_SCHEMA_BRANCHES))}).schema is not None
    with pytest.raises(BadRequest, match=f"more than {MAX_SCHEMA_BRANCHES} properties"):
        constraint(json_schema={"enum": list(range(MAX_SCHEMA_BRANCHES + 1))})
    local = {"$ref": "#/definitions/a", "definitions": {"a": {"type": "integer"}}}
    assert constraint(json_schema=local).schema == local
    with pytest.raises(BadRequest, match="must point inside the schema"):
        constraint(json_schema={**local, "$ref": "/definitions/a"})


def test_pattern_cost_multiplies_nested_quantifiers_only():
    assert pattern_cost("^abc$") == 5
    assert pattern_cost(r"^\d{3}-\d{4}$") == 10  # an escape and a class are one atom each
    assert pattern_cost("[a-z]{1,64}@[a-z]{1,64}") == 129  # side by side: they add
    assert pattern_cost("((a{9}){9}){9}") == 729  # nested: they multiply
    assert pattern_cost("(ab)*c+") == 5
    assert pattern_cost("a{99999999999999999999}") > MAX_PATTERN_COST  # no int() of a huge count


def test_a_grammar_makes_greedy_sampling_go_through_the_sampler():
    assert SamplingParams(temperature=0).is_plain_greedy
    assert not SamplingParams(temperature=0, grammar='root ::= "a"').is_plain_greedy


def test_schemas_convert_to_gbnf_with_a_root_rule():
    text = to_gbnf(Constraint("json_schema", schema=SCHEMA))
    assert re.search(r"^root ::= ", text, re.M) and '\\"a\\"' in text
    assert to_gbnf(Constraint("grammar", gbnf='root ::= "a"')) == 'root ::= "a"'


@pytest.mark.parametrize("schema", [
    {"$ref": "#/definitions/missing"},
    {"$ref": "https://example.com/schema.json"},  # the converter never fetches
    {"type": "frobnicate"},
])
def test_schemas_the_converter_refuses_are_a_400_naming_the_field(schema):
    with pytest.raises(BadRequest, match="^'response_format' is not a JSON schema that can be turned into a grammar"):
        to_gbnf(Constraint("response_format", schema=schema))


def test_a_schema_whose_grammar_is_too_long_is_a_400():
    props = {f"p{i:04d}": {"type": "string", "maxLength": 1000} for i in range(20)}
    assert len(json.dumps(props)) < MAX_GRAMMAR_CHARS
    with pytest.raises(BadRequest, match="'json_schema': the schema's grammar would be"):
        to_gbnf(Constraint("json_schema", schema={"type": "object", "properties": props}))
