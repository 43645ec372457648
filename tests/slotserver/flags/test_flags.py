"""The command line as llama-server's: every spelling, LLAMA_ARG_* variables, precedence, warnings
for ignored flags, and sampling/speculative defaults reaching parsed requests. No model is loaded."""

from __future__ import annotations

import os

import pytest

from slotserver.flags.command_line import build_parser, config_from_args, parse_args, startup_warnings
from slotserver.flags.common import IGNORED as COMMON_IGNORED
from slotserver.flags.server import IGNORED as SERVER_IGNORED
from slotserver.flags.speculative import IGNORED as SPEC_IGNORED
from slotserver.sampling.params import SamplingParams
from slotserver.serving.request import RequestBounds, parse_completion

MODEL = ["-m", "model.gguf"]


def config(argv: list[str], environ: dict[str, str] | None = None):
    return config_from_args(parse_args(MODEL + argv, environ or {}))


# (spellings, value given, ServerConfig attribute path, expected)
VALUE_FLAGS = [
    (("-c", "--ctx-size"), "1024", "engine.n_ctx", 1024),
    (("-n", "--predict", "--n-predict"), "7", "n_predict", 7),
    (("-t", "--threads"), "3", "engine.n_threads", 3),
    (("-b", "--batch-size"), "64", "engine.n_batch", 64),
    (("-ub", "--ubatch-size"), "32", "engine.n_ubatch", 32),
    (("-np", "--parallel"), "3", "engine.n_parallel", 3),
    (("--kv-streams",), "on", "engine.kv_streams", True),
    (("--kv-streams",), "off", "engine.kv_streams", False),
    (("--kv-streams",), "auto", "engine.kv_streams", None),
    (("-a", "--alias"), "mine", "alias", "mine"),
    (("--spec-suffix-depth",), "12", "spec.suffix.depth", 12),
    (("--spec-suffix-min-prob",), "0.25", "spec.suffix.min_prob", 0.25),
    (("--spec-suffix-factor",), "2", "spec.suffix.factor", 2.0),
    (("--spec-suffix-n-max",), "32", "spec.suffix.n_max", 32),
    (("--spec-suffix-max-mb",), "8", "spec.suffix.max_mb", 8.0),
    (("--spec-suffix-file",), "s.sssuffix", "spec.suffix_file", "s.sssuffix"),
    (("--spec-estimates-file",), "e.ssestim", "spec.estimates_file", "e.ssestim"),
    (("-s", "--seed"), "5", "seed", 5),
    (("-to", "--timeout"), "9", "limits.timeout_s", 9.0),
    (("--keep",), "-1", "n_keep", -1),
    (("--cache-reuse",), "256", "cache_reuse", 256),
    (("--host",), "0.0.0.0", "host", "0.0.0.0"),
    (("--port",), "1234", "port", 1234),
    (("--spec-draft-n-max", "--draft-max", "--draft", "--draft-n"), "16", "draft_limits.n_max", 16),
    (("--spec-draft-n-min", "--draft-min", "--draft-n-min"), "2", "draft_n_min", 2),
    (("--spec-draft-p-min", "--draft-p-min"), "0.5", "draft_p_min", 0.5),
    (("--spec-ngram-mod-n-match-cold",), "0", "spec.ngram_mod.n_match_cold", 0),  # default 8; 0 = off
    (("--temp", "--temperature"), "0.7", "sampling.temperature", 0.7),
    (("--top-k",), "20", "sampling.top_k", 20),
    (("--top-p",), "0.9", "sampling.top_p", 0.9),
    (("--min-p",), "0.1", "sampling.min_p", 0.1),
    (("--top-nsigma", "--top-n-sigma"), "1.5", "sampling.top_n_sigma", 1.5),
    (("--xtc-probability",), "0.2", "sampling.xtc_probability", 0.2),
    (("--xtc-threshold",), "0.3", "sampling.xtc_threshold", 0.3),
    (("--typical", "--typical-p"), "0.8", "sampling.typical_p", 0.8),
    (("--repeat-last-n",), "32", "sampling.repeat_last_n", 32),
    (("--repeat-penalty",), "1.1", "sampling.repeat_penalty", 1.1),
    (("--presence-penalty",), "0.5", "sampling.presence_penalty", 0.5),
    (("--frequency-penalty",), "0.25", "sampling.frequency_penalty", 0.25),
    (("--samplers",), "top_k;temperature", "sampling.samplers", ("top_k", "temperature")),
    (("--sampling-seq", "--sampler-seq"), "kt", "sampling.samplers", ("top_k", "temperature")),
]
SWITCHES = [
    (("-kvu", "--kv-unified"), "engine.kv_unified", ["-np", "2"], True),
    (("-no-kvu", "--no-kv-unified"), "engine.kv_unified", [], False),
    (("--context-shift",), "context_shift", [], True),
    (("--no-cache-prompt",), "cache_prompt", [], False),
    (("--no-slots",), "slots_endpoint", [], False),
    (("--metrics",), "metrics", [], True),
    (("--ignore-eos",), "sampling.ignore_eos", [], True),
    (("--spm-infill",), "spm_infill", [], True),
]


def attr(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("names,value,path,expected", VALUE_FLAGS)
def test_every_spelling_of_a_value_flag(names, value, path, expected):
    for name in names:
        assert attr(config([name, value]), path) == expected, name


@pytest.mark.parametrize("names,path,extra,expected", SWITCHES)
def test_every_spelling_of_a_switch(names, path, extra, expected):
    assert attr(config(extra), path) != expected
    for name in names:
        assert attr(config(extra + [name]), path) == expected, name


def test_double_dash_underscores_and_equals_as_llama_cpp():
    assert config(["--ctx_size", "512", "--n_predict=3"]).engine.n_ctx == 512
    assert config(["--n_predict=3"]).n_predict == 3


def test_no_abbreviations_unknown_flags_fail():
    for argv in (["--ctx", "1"], ["--grammar", "root ::= x"], ["--mirostat", "2"], ["--dry-multiplier", "1"]):
        with pytest.raises(SystemExit):
            parse_args(MODEL + argv, {})


ENV = [
    ("LLAMA_ARG_MODEL", "other.gguf", "engine.model_path", "other.gguf"),
    ("LLAMA_ARG_CTX_SIZE", "1024", "engine.n_ctx", 1024),
    ("LLAMA_ARG_N_PARALLEL", "2", "engine.n_parallel", 2),
    ("LLAMA_ARG_THREADS", "2", "engine.n_threads", 2),
    ("LLAMA_ARG_BATCH", "128", "engine.n_batch", 128),
    ("LLAMA_ARG_UBATCH", "64", "engine.n_ubatch", 64),
    ("LLAMA_ARG_N_PREDICT", "9", "n_predict", 9),
    ("LLAMA_ARG_HOST", "0.0.0.0", "host", "0.0.0.0"),
    ("LLAMA_ARG_PORT", "8081", "port", 8081),
    ("LLAMA_ARG_ALIAS", "a", "alias", "a"),
    ("LLAMA_ARG_TIMEOUT", "30", "limits.timeout_s", 30.0),
    ("LLAMA_ARG_CACHE_REUSE", "256", "cache_reuse", 256),
    ("LLAMA_ARG_TOP_K", "7", "sampling.top_k", 7),
    ("LLAMA_ARG_SPEC_TYPE", "ngram-simple,ngram-mod", "spec.types", ("ngram-simple", "ngram-mod")),
    ("LLAMA_ARG_SPEC_DRAFT_N_MAX", "12", "draft_limits.n_max", 12),
    ("LLAMA_ARG_DRAFT_MAX", "12", "draft_limits.n_max", 12),
    ("LLAMA_ARG_SPEC_DRAFT_N_MIN", "3", "draft_n_min", 3),
    ("LLAMA_ARG_DRAFT_MIN", "3", "draft_n_min", 3),
    ("LLAMA_ARG_SPEC_DRAFT_P_MIN", "0.25", "draft_p_min", 0.25),
    ("LLAMA_ARG_DRAFT_P_MIN", "0.25", "draft_p_min", 0.25),
    ("LLAMA_ARG_ENDPOINT_METRICS", "1", "metrics", True),
    ("LLAMA_ARG_ENDPOINT_SLOTS", "disabled", "slots_endpoint", False),
    ("LLAMA_ARG_NO_ENDPOINT_SLOTS", "anything", "slots_endpoint", False),
    ("LLAMA_ARG_CACHE_PROMPT", "false", "cache_prompt", False),
    ("LLAMA_ARG_CONTEXT_SHIFT", "on", "context_shift", True),
    ("LLAMA_ARG_KV_UNIFIED", "true", "engine.kv_unified", True),
]


@pytest.mark.parametrize("name,value,path,expected", ENV)
def test_environment_variable_stands_for_the_flag(name, value, path, expected):
    argv = ([] if name == "LLAMA_ARG_MODEL" else MODEL) + ([] if name == "LLAMA_ARG_N_PARALLEL" else ["-np", "2"])
    assert attr(config_from_args(parse_args(argv, {name: value})), path) == expected


def test_api_key_file_from_the_environment(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("k1\n")
    assert config([], {"LLAMA_ARG_API_KEY_FILE": str(keys)}).api_keys == ("k1",)


@pytest.mark.parametrize("true", ["true", "1", "on", "enabled"])
@pytest.mark.parametrize("false", ["false", "0", "off", "disabled"])
def test_booleans_as_llama_cpp_reads_them(true, false):
    assert config([], {"LLAMA_ARG_CONTEXT_SHIFT": true}).context_shift is True
    assert config([], {"LLAMA_ARG_CONTEXT_SHIFT": false}).context_shift is False
    assert config([], {"LLAMA_ARG_ENDPOINT_METRICS": true}).metrics is True
    assert config([], {"LLAMA_ARG_ENDPOINT_METRICS": false}).metrics is False  # a switch: only truthy sets it


def test_a_pair_needs_a_boolean():
    with pytest.raises(SystemExit):
        parse_args(MODEL, {"LLAMA_ARG_CONTEXT_SHIFT": "yes"})


def test_the_command_line_wins_over_the_environment():
    env = {"LLAMA_ARG_CTX_SIZE": "1024", "LLAMA_ARG_CONTEXT_SHIFT": "1", "LLAMA_ARG_SPEC_TYPE": "ngram-simple"}
    args = parse_args(MODEL + ["-c", "512", "--no-context-shift", "--spec-type", "ngram-mod"], env)
    cfg = config_from_args(args)
    assert (cfg.engine.n_ctx, cfg.context_shift, cfg.spec.types) == (512, False, ("ngram-mod",))
    notes = startup_warnings(args)
    assert "LLAMA_ARG_CTX_SIZE is set, but the command line's --ctx-size wins" in notes
    assert len([n for n in notes if "wins" in n]) == 3


def value_for(spec) -> list[str]:
    return [] if spec.metavar is None or spec.negative else ["1"]


@pytest.mark.parametrize("spec", COMMON_IGNORED + SERVER_IGNORED, ids=lambda s: s.names[0])
def test_each_ignored_flag_is_accepted_with_one_warning_saying_why(spec):
    for name in spec.names + spec.negative:
        args = parse_args(MODEL + [name, *([] if name in spec.negative else value_for(spec))], {})
        lines = startup_warnings(args)
        assert len(lines) == 1 and lines[0].startswith("ignoring ") and spec.reason in lines[0], (name, lines)
        config_from_args(args)  # and the server configures as without it


@pytest.mark.parametrize("spec", [s for s in COMMON_IGNORED + SERVER_IGNORED if s.env], ids=lambda s: s.env[0])
def test_ignored_flags_variables_warn_too(spec):
    lines = startup_warnings(parse_args(MODEL, {spec.env[0]: "1"}))
    assert len(lines) == 1 and spec.reason in lines[0]


def test_optional_values_as_older_and_newer_llama_servers_take_them():
    assert startup_warnings(parse_args(MODEL + ["-fa", "-c", "512"], {})) == [
        "ignoring -fa on: flash attention is a GPU kernel choice; llama.cpp picks the CPU kernels"]
    assert "ignoring -fa off:" in startup_warnings(parse_args(MODEL + ["-fa", "off"], {}))[0]


def test_draft_model_flags_configure_the_draft_model():
    argv = ["-md", "d.gguf", "--spec-draft-model", "d.gguf", "-ngld", "99", "-td", "2", "-cd", "512"]
    args = parse_args(MODEL + argv, {})
    assert startup_warnings(args) == ["ignoring -ngld 99: the draft model runs on the CPU, as the target"]
    spec = config_from_args(args).spec
    assert spec.types == ("ngram-mod", "draft-simple")  # -md without --spec-type adds draft-simple
    assert (spec.draft.path, spec.draft.n_threads, spec.draft.n_ctx, spec.draft.n_max) == ("d.gguf", 2, 512, 16)
    env = parse_args(MODEL + ["--spec-type", "draft-simple"], {"LLAMA_ARG_MODEL_DRAFT": "e.gguf"})
    assert config_from_args(env).spec.draft.path == "e.gguf"
    for spec in SPEC_IGNORED:
        assert len(startup_warnings(parse_args(MODEL + [spec.names[-1], *value_for(spec)], {}))) == 1


def test_a_draft_model_the_spec_types_leave_out_is_not_loaded_and_draft_simple_needs_one():
    args = parse_args(MODEL + ["-md", "d.gguf", "--spec-type", "ngram-mod"], {})
    assert startup_warnings(args) == ["-md d.gguf is not loaded: --spec-type does not name draft-simple"]
    assert config_from_args(args).spec.draft.path == ""
    with pytest.raises(ValueError, match="needs a draft model"):
        config_from_args(parse_args(MODEL + ["--spec-type", "draft-simple"], {}))
    assert config_from_args(parse_args(MODEL + ["-md", "d", "--spec-draft-n-max", "8"], {})).spec.draft.n_max == 8


def test_a_suffix_file_without_the_suffix_drafter_is_named_in_a_warning():
    args = parse_args(MODEL + ["--spec-suffix-file", "g.sssuffix"], {})
    assert startup_warnings(args) == ["--spec-suffix-file g.sssuffix is neither loaded nor saved: "
                                      "--spec-type does not name suffix"]
    assert startup_warnings(parse_args(MODEL + ["--spec-suffix-file", "g", "--spec-type", "ngram-mod,suffix"], {})) == []


def test_help_has_llama_servers_sections_and_says_why_flags_are_ignored():
    text = build_parser().format_help()
    positions = [text.index(f"\n{title}:") for title in
                 ("common params", "sampling params", "speculative params", "server params")]
    assert positions == sorted(positions)
    help_of = {a.option_strings[0]: a.help for a in build_parser()._actions if a.option_strings}
    for spec in COMMON_IGNORED + SERVER_IGNORED + SPEC_IGNORED:
        assert help_of[spec.names[0]].startswith("accepted and ignored: " + spec.reason)
    assert "(env: LLAMA_ARG_CTX_SIZE)" in help_of["-c"]


def test_sampling_defaults_reach_parsed_requests():
    cfg = config(["--temp", "0.7", "--top-k", "20", "--repeat-last-n", "-1", "--ignore-eos",
                  "--samplers", "penalties;top_k;temperature"])
    parse = lambda body: parse_completion({"prompt": "x", **body}, bounds=RequestBounds(n_ctx=512),  # noqa: E731
                                          sampling_defaults=cfg.sampling).sampling
    left_out = parse({})
    assert (left_out.temperature, left_out.top_k, left_out.ignore_eos) == (0.7, 20, True)
    assert left_out.repeat_last_n == 512  # -1: the request's context
    assert left_out.samplers == ("penalties", "top_k", "temperature")
    assert left_out.top_p == SamplingParams().top_p  # not given: llama.cpp's
    sent = parse({"temperature": 0.1, "top_k": 3, "ignore_eos": False, "samplers": "kt"})
    assert (sent.temperature, sent.top_k, sent.ignore_eos, sent.samplers) == (0.1, 3, False, ("top_k", "temperature"))
    assert parse_completion({"prompt": "x"}).sampling == SamplingParams(repeat_last_n=64)  # callers without defaults


def test_speculative_defaults_reach_parsed_requests():
    cfg = config(["--draft-max", "16", "--draft-min", "2"])
    req = parse_completion({"prompt": "x", "speculative.p_min": 0.5}, spec_defaults=cfg.draft_limits)
    assert (req.spec.n_max, req.spec.n_min, req.spec.p_min) == (16, 2, 0.5)
    assert cfg.draft_limits is not cfg.draft_limits  # each job gets its own
    assert config([]).draft_limits.n_max == config([]).spec.n_max  # not given: the drafters' longest


@pytest.mark.parametrize("argv", [["--top-p", "2"], ["--temp", "nan"], ["--samplers", "bogus"],
                                  ["--sampling-seq", "q"], ["--draft-max", "5000"], ["--draft-p-min", "2"],
                                  ["--metrics-series", "vllm"], ["--spec-ngram-mod-n-match-cold", "-1"],
                                  ["--spec-suffix-depth", "0"], ["--spec-suffix-min-prob", "1.5"],
                                  ["--spec-suffix-max-mb", "0"]])
def test_out_of_range_defaults_stop_the_start(argv):
    with pytest.raises(ValueError):
        config(argv)


def test_temperature_below_zero_counts_as_zero():
    assert config(["--temp", "-1"]).sampling.temperature == 0.0


def test_metrics_series():
    assert config(["--metrics"]).metrics_series == ("slotserver", "llamacpp")
    assert config(["--metrics", "--metrics-series", "llamacpp"]).metrics_series == ("llamacpp",)
    compat = config(["--metrics-series", "slotserver", "--metrics-compat", "llamacpp"])
    assert compat.metrics and compat.metrics_series == ("slotserver", "llamacpp")
    assert not config(["--metrics-series", "slotserver"]).metrics


# --- llama-server command lines never misparse (issue 34, "Command line") ---------------------------

def refusal(argv: list[str], environ: dict[str, str] | None = None, capsys=None) -> str:
    """The error message a command line stops with (argparse exits 2)."""
    with pytest.raises(SystemExit) as exc:
        parse_args(argv, environ or {})
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv,why", [
    (["-hf", "org/repo"], "slotserver downloads nothing: pass -m FILE"),
    (["-hfr", "org/repo"], "slotserver downloads nothing: pass -m FILE"),
    (["--hf-repo", "org/repo"], "slotserver downloads nothing: pass -m FILE"),
    (["-hff", "f.gguf"], "slotserver downloads nothing: pass -m FILE"),
    (["-hfd", "org/draft"], "slotserver downloads nothing: pass -md FILE"),
    (["-mu", "https://x/m.gguf"], "slotserver downloads nothing: pass -m FILE"),
    (["--model-url", "https://x/m.gguf"], "slotserver downloads nothing: pass -m FILE"),
    (["-dr", "gemma3"], "slotserver downloads nothing: pass -m FILE"),
    (["-mm", "proj.gguf"], "multimodal projectors are not supported"),
    (["-mmu", "https://x/proj.gguf"], "multimodal projectors are not supported"),
    (["--embeddings"], "embedding models are not served here"),
    (["--gpt-oss-20b-default"], "slotserver downloads nothing: pass -m FILE"),
])
def test_download_and_multimodal_flags_are_refused_by_name_never_misread(argv, why, capsys):
    err = refusal(MODEL + argv, capsys=capsys)
    assert f"error: {argv[0]}: " in err and why in err, err


def test_short_flags_are_matched_whole_never_split_as_argparse_would(capsys):
    """Undeclared, -mu URL was -m u (the model "u"); llama.cpp matches whole spellings only."""
    for token in ("-mx", "-c512", "-npx", "-hx"):
        err = refusal(MODEL + [token, "1"], capsys=capsys)
        assert f"unrecognized argument: {token} " in err, err
    assert config(["-n", "-1", "--keep", "-1", "--temp", "-0.5"]).n_keep == -1  # negative numbers are values


def test_every_refused_flag_names_itself(capsys):
    from slotserver.flags.refused import REFUSED
    for spec in REFUSED:
        for name in spec.names:
            value = [] if spec.metavar is None else ["v"] * len(spec.metavar.split())
            err = refusal(MODEL + [name, *value], capsys=capsys)
            assert f"error: {name}: {spec.reason}" in err, (name, err)


@pytest.mark.parametrize("name", ["LLAMA_ARG_HF_REPO", "LLAMA_ARG_MODEL_URL", "LLAMA_ARG_MMPROJ", "LLAMA_ARG_DOCKER_REPO"])
def test_refused_flags_variables_are_refused_too(name, capsys):
    """A service environment naming a repository must not start the embedded model instead."""
    err = refusal([], {name: "x"}, capsys=capsys)
    assert f"error: {name} (" in err and ("downloads nothing" in err or "multimodal" in err), err


def test_version_prints_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--version"], {})
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("slotserver ")


def test_host_lists_listen_on_each_address():
    from slotserver.flags.command_line import listen_hosts
    c = config(["--host", "127.0.0.1,::1"])
    assert listen_hosts(c.host) == ["127.0.0.1", "::1"]
    assert listen_hosts(config(["--host", "0.0.0.0"]).host) == ["0.0.0.0"]
    # names in a list are the server's own names: their Host headers are allowed
    assert "box.lan" in config(["--host", "127.0.0.1,box.lan", "--api-key", "k"]).allowed_hosts
    with pytest.raises(ValueError, match="--host"):
        config(["--host", "127.0.0.1,"])


def test_log_moe_and_download_hints_are_accepted_with_one_warning_each():
    argv = ["--log-colors", "off", "--log-timestamps", "--log-prefix", "-lv", "3", "--n-cpu-moe", "4", "--cpu-moe",
            "--log-colors", "--offline", "-hft", "tok", "--no-mmproj", "-ncmoed", "2"]
    lines = startup_warnings(parse_args(MODEL + argv, {}))
    assert len(lines) == 10 and all(line.startswith("ignoring ") for line in lines), lines
    assert any("--log-colors on:" in line for line in lines)  # -fa-like: the value may be left out
    for name in ("LLAMA_LOG_COLORS", "LLAMA_LOG_TIMESTAMPS", "LLAMA_ARG_N_CPU_MOE", "LLAMA_ARG_CPU_MOE"):
        assert len(startup_warnings(parse_args(MODEL, {name: "1"}))) == 1, name


def test_no_repack_turns_weight_repacking_off(monkeypatch):
    from slotserver.engine.cpu_kernels import ENV
    from slotserver.flags.common import apply_repack
    monkeypatch.setenv(ENV, "1")
    for argv, environ, expected in ((["--no-repack"], {}, "0"), (["-nr"], {}, "0"), (["--repack"], {}, "1"),
                                    ([], {"LLAMA_ARG_REPACK": "false"}, "0"), ([], {"LLAMA_ARG_NO_REPACK": "1"}, "0")):
        args = parse_args(MODEL + argv, environ)
        assert startup_warnings(args) == []
        apply_repack(args)
        assert os.environ[ENV] == expected, (argv, environ)
    monkeypatch.setenv(ENV, "1")
    apply_repack(parse_args(MODEL, {}))  # not given: SLOTSERVER_EXTRA_BUFTS (or the AMX check) decides
    assert os.environ[ENV] == "1"


def test_fim_presets_are_hints_for_a_local_model(capsys):
    err = refusal(["--fim-qwen-7b-default"], capsys=capsys)
    assert "error: --fim-qwen-7b-default: slotserver downloads nothing: pass -m FILE" in err
    assert "qwen2.5-coder-7b-q8_0.gguf" in err
    c = config(["--fim-qwen-1.5b-default"])
    assert (c.port, c.engine.n_batch, c.engine.n_ubatch, c.engine.n_ctx, c.cache_reuse) == (8012, 1024, 1024, 0, 256)
    c = config(["--fim-qwen-3b-default", "--port", "9000", "-c", "4096"], {"LLAMA_ARG_CACHE_REUSE": "64"})
    assert (c.port, c.engine.n_ctx, c.cache_reuse, c.engine.n_batch) == (9000, 4096, 64, 1024)  # given ones win
    lines = startup_warnings(parse_args(MODEL + ["--fim-qwen-7b-spec"], {}))
    assert len(lines) == 1 and "--fim-qwen-7b-spec: no draft model is loaded" in lines[0] and "-md FILE" in lines[0]
    assert startup_warnings(parse_args(MODEL + ["--fim-qwen-7b-spec", "-md", "d.gguf"], {})) == []
