"""Grammar- and schema-constrained sampling on the real model (the session server).

The output must fit the grammar, end when the grammar is complete, and stay the same with and
without speculation: verification samples through the same grammar state, which only emitted
tokens advance.
"""

from __future__ import annotations

import json

import jsonschema

from tests.integration.ties import TIE_PROBS, check_same_draw, check_same_or_tie

FIVE_AS = 'root ::= "a" "a" "a" "a" "a"'
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer"},  # the converter ignores minimum/maximum (docs/api.md)
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
}
# Eight objects with the same keys: the text repeats, so n-gram drafts of it get accepted.
CHORES = {
    "type": "array", "minItems": 8, "maxItems": 8,
    "items": {
        "type": "object",
        "properties": {"task": {"type": "string", "maxLength": 24}, "done": {"type": "boolean"},
                       "priority": {"enum": ["low", "medium", "high"]}, "owner": {"type": "string", "maxLength": 12}},
        "required": ["task", "done", "priority", "owner"],
    },
}
CHORES_PROMPT = "Eight chores for the team, as JSON:\n"
GREEDY = {"temperature": 0.0}
SEEDED = {"temperature": 0.8, "seed": 42}


def body(prompt: str, spec: str = "none", **extra) -> dict:
    return {"prompt": prompt, "n_predict": 400, "return_tokens": True, "cache_prompt": False,
            "speculative.type": spec, **GREEDY, **extra}


async def test_a_gbnf_grammar_forces_its_text_and_ends_with_it(server):
    for sampling in (GREEDY, SEEDED):
        out = await server.complete(**body("Write the word 'hello':", grammar=FIVE_AS, **sampling))
        assert out["content"] == "aaaaa" and out["stop_type"] == "eos", out
        assert out["generation_settings"]["grammar"] == FIVE_AS


async def test_a_complete_grammar_ends_generation_even_with_ignore_eos(server):
    """The complete grammar allows only end-of-generation tokens, which ignore_eos bans: no token
    is left, and the request ends there instead of accepting a token the grammar refuses."""
    for extra in ({}, {"n_probs": 3, "post_sampling_probs": True}):
        out = await server.complete(**body("Say something:", grammar=FIVE_AS, ignore_eos=True, **extra))
        assert out["content"] == "aaaaa" and out["tokens_predicted"] == len(out["tokens"]), out
        if extra:
            assert len(out["completion_probabilities"]) == len(out["tokens"])


async def test_a_json_schema_forces_a_valid_object(server):
    for sampling in (GREEDY, SEEDED):
        out = await server.complete(**body("A person, as JSON:\n", json_schema=PERSON, **sampling))
        assert out["stop_type"] == "eos", out
        jsonschema.validate(json.loads(out["content"]), PERSON)


async def test_response_format_on_the_chat_endpoint(server):
    rf = {"type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": PERSON}}
    status, out = await server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Describe a person."}], "max_tokens": 400,
        "temperature": 0, "response_format": rf})
    assert status == 200 and out["choices"][0]["finish_reason"] == "stop", out
    jsonschema.validate(json.loads(out["choices"][0]["message"]["content"]), PERSON)
    status, out = await server.post("/v1/completions", {  # llama-server's json_object with a schema
        "prompt": "A person, as JSON:\n", "max_tokens": 400, "temperature": 0,
        "response_format": {"type": "json_object", "schema": PERSON}})
    assert status == 200 and out["choices"][0]["finish_reason"] == "stop", out
    jsonschema.validate(json.loads(out["choices"][0]["text"]), PERSON)


async def test_invalid_grammars_and_schemas_are_a_400_and_the_server_keeps_serving(server):
    cases = [
        ("/completion", {"prompt": "x", "grammar": "root ::= undefined-rule"}, "'grammar' is not a valid GBNF"),
        ("/completion", {"prompt": "x", "grammar": 'start ::= "a"'}, "'grammar' is not a valid GBNF"),  # no root
        ("/completion", {"prompt": "x", "json_schema": {"type": "frobnicate"}}, "'json_schema' is not a JSON schema"),
        ("/v1/completions", {"prompt": "x", "grammar": "root ::= ("}, "'grammar' is not a valid GBNF"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                  "response_format": {"type": "json_schema", "json_schema": {"schema": {"$ref": "#/x"}}}},
         "'response_format' is not a JSON schema"),
    ]
    for path, request, needle in cases:
        status, out = await server.post(path, request)
        assert status == 400 and needle in out["error"]["message"], (path, out)
    out = await server.complete(**body("Write the word 'hello':", grammar=FIVE_AS))
    assert out["content"] == "aaaaa"


async def test_constrained_output_is_the_same_with_and_without_speculation(server):
    drafted = n_differ = 0
    for prompt, constraint in [(CHORES_PROMPT, {"json_schema": CHORES}),
                               ("A person, as JSON:\n", {"json_schema": PERSON}),
                               ("Write the word 'hello':", {"grammar": FIVE_AS})]:
        for sampling in (GREEDY, SEEDED):
            label, greedy = f"{prompt!r} {sampling}", sampling is GREEDY
            # Greedy: a flip must be a near-tie of the reference's logits. Seeded: one draw must
            # explain both tokens (as test_lossless.py); a logit gap says nothing there, the draw can
            # sit on the boundary of any two neighbouring candidates. n_probs 40 = the default
            # top_k: every candidate the chain leaves.
            probs = dict(n_probs=TIE_PROBS) if greedy else dict(n_probs=40, post_sampling_probs=True)
            plain = await server.complete(**body(prompt, "none", **probs, **constraint, **sampling))
            spec = await server.complete(**body(prompt, "ngram-mod", **({} if greedy else probs), **constraint,
                                                **sampling))
            same = check_same_or_tie(plain, spec["tokens"], label) if greedy else check_same_draw(plain, spec, label)
            n_differ += not same
            assert "draft_n" not in plain["timings"]
            drafted += spec["timings"].get("draft_n", 0)
    assert drafted > 0  # the comparison covered verified drafts
    assert n_differ <= 1  # a near-tie flipped by batched rounding, as in test_lossless.py (none seen so far)


async def test_drafts_are_accepted_on_a_repetitive_json_task(server):
    out = await server.complete(**body(CHORES_PROMPT, "ngram-mod", json_schema=CHORES))
    jsonschema.validate(json.loads(out["content"]), CHORES)
    assert out["timings"]["draft_n_accepted"] > 0, out["timings"]
