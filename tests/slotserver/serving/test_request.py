"""Request validation: field types, ranges, bounds and the speculative.* forms (no model)."""

import pytest

from slotserver.errors import BadRequest
from slotserver.serving.request import (
    FLOAT_ABS_MAX,
    INT_MAX,
    MAX_STOP_LEN,
    MAX_STOP_STRINGS,
    N_PROBS_BUDGET,
    N_PROBS_MAX,
    SEED_MAX,
    RequestBounds,
    check_probs_budget,
    parse_completion,
)
from slotserver.speculation.config import SPEC_N_MAX


def test_defaults_and_aliases():
    req = parse_completion({"prompt": "hi", "max_tokens": 7})
    assert req.n_predict == 7 and req.cache_prompt and req.sampling.temperature == 0.8


@pytest.mark.parametrize("body,needle", [
    ({}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": "x", "n_predict": -2}, "n_predict"),
    ({"prompt": "x", "n_predict": "10"}, "n_predict"),
    ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": "x", "stop": [1]}, "stop"),
    ({"prompt": "x", "speculative.type": "magic"}, "magic"),
    ({"prompt": "x", "speculative": {"n_max": -1}}, "n_max"),
    ([1, 2], "object"),
])
def test_bad_fields_are_rejected_with_the_field_named(body, needle):
    with pytest.raises(BadRequest, match=needle):
        parse_completion(body)


def test_speculative_flat_and_nested_forms_agree():
    flat = parse_completion({"prompt": "x", "speculative.n_max": 16, "speculative.type": "none"})
    nested = parse_completion({"prompt": "x", "speculative": {"n_max": 16, "type": "none"}})
    assert flat.spec == nested.spec
    assert flat.spec.n_max == 16 and flat.spec.types == frozenset()


def test_token_prompt_and_mixed_prompt():
    assert parse_completion({"prompt": [1, 2, 3]}).prompt == [1, 2, 3]
    assert parse_completion({"prompt": ["a", 5]}).prompt == ["a", 5]


# --- bounds: one malformed field must be a 400 naming it, never a crash or a stall later ----------


def parse(bounds=RequestBounds(), **fields):
    return parse_completion({"prompt": "x", **fields}, bounds=bounds)


@pytest.mark.parametrize("value", [2147483647, 8193, -2, 10**30])
def test_repeat_last_n_beyond_the_context_is_rejected(value):
    # it sizes the penalties sampler's token ring: 2**31-1 meant gigabytes or a C++ abort
    with pytest.raises(BadRequest, match=r"'repeat_last_n' must be between -1 and 8192"):
        parse(repeat_last_n=value)


def test_repeat_last_n_minus_one_is_the_whole_context():
    # as llama.cpp; passed on as -1, the penalties sampler clamped it to 0 and dropped the penalties
    req = parse(RequestBounds(n_ctx=4096), repeat_last_n=-1, repeat_penalty=1.1)
    assert req.sampling.repeat_last_n == 4096 and req.sampling.has_penalties
    assert parse(RequestBounds(n_ctx=4096), repeat_last_n=4096).sampling.repeat_last_n == 4096
    assert parse(repeat_last_n=0).sampling.repeat_last_n == 0


@pytest.mark.parametrize("asked,n_vocab,got", [
    (5, 262144, 5), (N_PROBS_MAX + 1, 262144, N_PROBS_MAX), (10**6, 262144, N_PROBS_MAX), (64, 50, 49),
])
def test_n_probs_is_clamped_below_the_cap_and_the_vocabulary(asked, n_vocab, got):
    # a top-n >= n_vocab raised inside the shared engine step
    assert parse(RequestBounds(n_vocab=n_vocab), n_probs=asked, n_predict=64).n_probs == got


@pytest.mark.parametrize("key", [
    "temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty",
])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_floats_are_rejected(key, value):
    with pytest.raises(BadRequest, match=rf"'{key}' must be a finite number"):
        parse(**{key: value})


@pytest.mark.parametrize("key", ["n_predict", "id_slot", "n_indent", "t_max_predict_ms", "top_k", "n_probs"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_values_for_integers_are_rejected(key, value):
    with pytest.raises(BadRequest, match=rf"'{key}' must be a finite number"):
        parse(**{key: value})


@pytest.mark.parametrize("key,value", [
    ("top_p", 1.5), ("top_p", -0.1), ("min_p", 2), ("min_p", -1),
    ("temperature", 10**400),  # float() of it would raise OverflowError
    ("temperature", 2 * FLOAT_ABS_MAX), ("presence_penalty", -2 * FLOAT_ABS_MAX),
    ("frequency_penalty", 1e300),
    ("top_k", -2), ("top_k", INT_MAX + 1),
    ("n_predict", 10**30), ("n_predict", -2), ("id_slot", 10**30), ("id_slot", -2),
    ("n_indent", -1), ("n_indent", INT_MAX + 1), ("t_max_predict_ms", 10**30), ("t_max_predict_ms", -2),
    ("seed", SEED_MAX + 1), ("seed", -2), ("seed", 1e30),
])
def test_out_of_range_numbers_are_rejected_with_the_field_named(key, value):
    with pytest.raises(BadRequest, match=rf"'{key}' must be between"):
        parse(**{key: value})


@pytest.mark.parametrize("value", [0, -1.5])
def test_repeat_penalty_must_be_positive(value):
    # llama.cpp divides positive logits by it: 0 made them inf, and the probabilities NaN
    with pytest.raises(BadRequest, match="'repeat_penalty' must be > 0"):
        parse(repeat_penalty=value)


def test_max_tokens_alias_is_bounded_too():
    with pytest.raises(BadRequest, match="'n_predict'"):
        parse(max_tokens=10**30)


def test_values_at_the_bounds_are_accepted():
    req = parse(
        top_p=1, min_p=0.0, top_k=0, temperature=-1.0, seed=SEED_MAX, n_predict=INT_MAX, id_slot=INT_MAX,
        n_indent=INT_MAX, t_max_predict_ms=-1, presence_penalty=FLOAT_ABS_MAX, frequency_penalty=-2.0,
    )
    assert req.sampling.top_p == 1.0 and req.sampling.top_k == 0 and req.sampling.seed == 0xFFFFFFFF
    assert req.n_predict == INT_MAX and isinstance(req.sampling.top_p, float)
    assert parse(seed=2**40 + 7).sampling.seed == 7  # 64-bit seeds keep their low 32 bits


@pytest.mark.parametrize("field,value", [
    ("n_max", SPEC_N_MAX + 1), ("n_min", 10**30), ("n_min", -1), ("p_min", 1.5), ("p_min", float("nan")),
])
def test_speculative_fields_are_bounded(field, value):
    with pytest.raises(BadRequest, match=rf"'{field}' must be"):
        parse(speculative={field: value})
    assert parse(**{"speculative.n_max": SPEC_N_MAX}).spec.n_max == SPEC_N_MAX


def test_stop_count_and_length_are_limited():
    ok = parse(stop=["s" * MAX_STOP_LEN] * MAX_STOP_STRINGS)
    assert len(ok.stop) == MAX_STOP_STRINGS
    # 1,000 stop strings of 1,000 characters once stalled every slot; now each limit is a 400
    for stop, needle in (
        (["x"] * 1000, f"at most {MAX_STOP_STRINGS} strings"),
        (["x" * 1000], f"at most {MAX_STOP_LEN} characters"),
        ("x" * (MAX_STOP_LEN + 1), f"at most {MAX_STOP_LEN} characters"),
    ):
        with pytest.raises(BadRequest, match=needle) as err:
            parse(stop=stop)
        assert err.value.status == 400 and "'stop'" in str(err.value)


def test_existing_callers_without_bounds_keep_working():
    # positional n_predict_default and seed_default, as routes call it; bounds defaults to RequestBounds()
    req = parse_completion({"prompt": "x", "repeat_last_n": -1}, 16, 1234)
    assert req.n_predict == 16 and req.sampling.seed == 1234
    assert req.sampling.repeat_last_n == RequestBounds().n_ctx


@pytest.mark.parametrize("key", ["post_sampling_probs", "return_progress", "timings_per_token"])
def test_token_level_flags_are_booleans_off_by_default(key):
    assert getattr(parse(), key) is False and getattr(parse(**{key: True}), key) is True
    with pytest.raises(BadRequest, match=rf"'{key}' must be a boolean"):
        parse(**{key: 1})


def test_probs_are_recorded_for_n_probs_or_openai_logprobs():
    assert not parse().records_probs and parse(n_probs=1).records_probs
    req = parse()
    req.token_probs = True  # what an OpenAI logprobs request sets (service.prepare)
    assert req.records_probs


# --- bounded work for every field (issue 31) ------------------------------------------------------


def test_n_probs_times_n_predict_is_bounded_with_both_fields_named():
    assert parse(n_probs=100, n_predict=N_PROBS_BUDGET // 100).n_probs == 100
    with pytest.raises(BadRequest, match=r"^'n_probs' times 'n_predict' must be at most 262144 \(got 100 "):
        parse(n_probs=100, n_predict=N_PROBS_BUDGET // 100 + 1)
    with pytest.raises(BadRequest, match="n_probs"):
        parse(n_probs=20, max_tokens=14000)  # OpenAI's names for the same fields


def test_an_unbounded_n_predict_counts_as_the_context_and_becomes_it():
    req = parse(RequestBounds(n_ctx=8192), n_probs=32)
    assert req.n_predict == 8192  # with --context-shift it could otherwise record past the context
    assert parse(RequestBounds(n_ctx=8192)).n_predict == -1  # without probabilities: untouched
    with pytest.raises(BadRequest, match="the context: no 'n_predict' was given"):
        parse(RequestBounds(n_ctx=8192), n_probs=33)


def test_openai_logprobs_set_after_parsing_are_checked_too():
    req = parse(max_tokens=14000)
    req.n_probs = 20  # what service.prepare sets for top_logprobs 20
    with pytest.raises(BadRequest, match="'n_probs' times 'n_predict'"):
        check_probs_budget(req, 8192)


@pytest.mark.parametrize("server,asked,got", [
    (0, None, 0), (0, 1, 0), (0, 4096, 0),  # the server has it off: a request cannot turn it on
    (256, None, 256), (256, 0, 0), (256, 1, 256), (256, 300, 300),  # never shorter chunks than the server's
])
def test_n_cache_reuse_is_the_servers_opt_in_and_floor(server, asked, got):
    body = {"prompt": "x"} if asked is None else {"prompt": "x", "n_cache_reuse": asked}
    assert parse_completion(body, n_cache_reuse_default=server).n_cache_reuse == got


def test_a_non_ascii_digit_in_a_schema_pattern_count_is_not_a_number():
    # "²".isdigit() holds but int("²") raised ValueError: a 500
    req = parse(json_schema={"type": "string", "pattern": "^a{²}$"})
    assert req.constraint is not None and req.constraint.field == "json_schema"
