"""The benchmark harness without a model: configurations and visit order, request bodies, cold and
warm medians, ratio columns, /metrics parsing, the markdown layout, the PNG, and one run of the
orchestration against two fake servers (milliseconds: the numbers are made up, the plumbing is real)."""

from __future__ import annotations

from argparse import Namespace
from types import SimpleNamespace

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from benchmarks.bench.chart import LABEL_WIDTH, wrap, write_png
from benchmarks.bench.plan import (
    COMPARE,
    ORACLE,
    OURS,
    OWN,
    Config,
    Visit,
    parse_configs,
    request_body,
    stream_mix,
    visit_order,
)
from benchmarks.bench.report import (
    NA,
    Run,
    StreamRun,
    acceptance,
    cell,
    chart_rows,
    command_line,
    counters,
    markdown,
    median_tps,
    outside_decode,
    ratios,
    same_share,
    serial_tps,
    stream_tps,
)
from benchmarks.bench.run import measure, write_reports

URL, LS = "http://ours", "http://ls"
WORKLOADS = [{"name": "repeat", "draftability": "high", "prompt": "Repeat: a b c\n", "n_predict": 16},
             {"name": "free", "draftability": "low", "prompt": "Once upon", "n_predict": 8}]


def configs() -> list[Config]:
    return parse_configs(URL, "ngram-mod,oracle,none,ngram-mod+draft-simple",
                         [f"llama-server:none={LS}", f"llama-server:ngram-mod={LS}"])


def run(round_: int, workload: str, config: str, tps: float, drafted: int = 0, accepted: int = 0,
        outside: float | None = None) -> Run:
    return Run(round_, workload, config, tps, drafted, accepted, tokens=100, wall_s=100 / tps, outside=outside)


# -- plan ----------------------------------------------------------------------------------------
def test_configs_put_none_first_and_compare_servers_last():
    cs = configs()
    assert [c.name for c in cs] == ["none", "ngram-mod", "oracle", "ngram-mod+draft-simple",
                                    "llama-server:none", "llama-server:ngram-mod"]
    assert [c.kind for c in cs] == [OURS, OURS, ORACLE, OURS, COMPARE, COMPARE]
    assert [c.url for c in cs] == [URL] * 4 + [LS] * 2
    assert [c.name for c in cs if c.is_spec] == ["ngram-mod", "ngram-mod+draft-simple"]


def test_our_servers_of_their_own_count_as_ours_and_get_no_speculative_fields():
    """``--ours NAME=URL``: each configuration on a server of its own, so its round 1 is cold."""
    cs = parse_configs(URL, "none,oracle", [f"llama-server:ngram-mod={LS}"],
                       ["ngram-mod=http://mod", "suffix@expected=http://suffix"])
    assert [(c.name, c.kind, c.url) for c in cs] == [
        ("none", OURS, URL), ("oracle", ORACLE, URL), ("ngram-mod", OWN, "http://mod"),
        ("suffix@expected", OWN, "http://suffix"), ("llama-server:ngram-mod", COMPARE, LS)]
    assert [c.name for c in cs if c.is_spec] == ["ngram-mod", "suffix@expected"]
    assert all(c.is_ours for c in cs[:4]) and not cs[4].is_ours
    control = parse_configs(URL, "none", [], ["none-2=http://none2"])[1]
    assert control.kind == OWN and not control.is_spec  # a second server without speculation: noise
    body = request_body(cs[3], WORKLOADS[0])
    assert not [k for k in body if k.startswith("speculative.")] and body["prompt"] == WORKLOADS[0]["prompt"]
    with pytest.raises(ValueError, match="must differ"):
        parse_configs(URL, "none,ngram-mod", [], ["ngram-mod=http://mod"])


@pytest.mark.parametrize("types, compares, message", [
    ("ngram-mod,oracle", [], "add 'none'"),
    ("none", ["llama-server"], "NAME=URL"),
    ("none", ["none=http://x"], "must differ"),
])
def test_configs_refuse(types, compares, message):
    with pytest.raises(ValueError, match=message):
        parse_configs(URL, types, compares)


def test_visit_order_alternates_configurations_per_workload_then_batches_per_round():
    order = visit_order(2, ["a", "b"], ["none", "oracle", "ls"], [1, 4])
    one_round = [(1, "a", "none"), (1, "a", "oracle"), (1, "a", "ls"), (1, "b", "none"), (1, "b", "oracle"),
                 (1, "b", "ls"), (4, None, "none"), (4, None, "oracle"), (4, None, "ls")]
    assert order == [Visit(r, *v) for r in (1, 2) for v in one_round]
    assert visit_order(1, ["a"], ["none"], [1]) == [Visit(1, 1, "a", "none")]


def test_stream_mix_is_two_requests_per_stream_workloads_in_turn():
    assert [w["name"] for w in stream_mix(WORKLOADS, 3)] == ["repeat", "free"] * 3


def test_request_bodies_send_speculative_fields_to_our_server_only():
    none, mod, oracle, joined, ls_none, ls_mod = configs()
    wl = WORKLOADS[0] | {"json_schema": {"type": "array"}}
    base = {"prompt": wl["prompt"], "n_predict": 16, "temperature": 0.0, "cache_prompt": False,
            "return_tokens": True, "json_schema": {"type": "array"}}
    assert request_body(none, wl) == base | {"speculative.type": "none"}
    assert request_body(joined, wl)["speculative.type"] == "ngram-mod,draft-simple"
    assert request_body(oracle, wl, [5, 6]) == base | {"speculative.oracle": [5, 6]}
    assert request_body(ls_mod, wl) == request_body(ls_none, wl, [5, 6]) == base
    with pytest.raises(ValueError, match="oracle needs"):
        request_body(oracle, wl)


# -- numbers -------------------------------------------------------------------------------------
def test_cold_is_round_one_and_warm_the_median_of_the_others():
    runs = [run(1, "repeat", "none", 10.0), run(2, "repeat", "none", 20.0), run(3, "repeat", "none", 40.0),
            run(4, "repeat", "none", 30.0), run(2, "free", "none", 99.0)]
    assert median_tps(cell(runs, "repeat", "none", "cold")) == 10.0
    assert median_tps(cell(runs, "repeat", "none", "warm")) == 30.0
    assert median_tps(cell(runs, "repeat", "ngram-mod", "warm")) is None


def test_a_run_that_generated_nothing_has_no_speed():
    # SmolLM2 ends 'goldcoin' at once: 0 tokens, predicted_per_second 0.0 from both servers. A
    # median of 0.0 would make the best spec "ngram-mod" at 0.0 t/s and every ratio meaningless.
    empty = Run(1, "free", "ngram-mod", 0.0, 0, 0, tokens=0, wall_s=0.1)
    assert median_tps([empty]) is None
    assert median_tps([Run(1, "free", "ngram-mod", 0.0, 0, 0, tokens=1, wall_s=0.1)]) is None  # EOS counted
    assert median_tps([empty, run(1, "free", "ngram-mod", 50.0)]) == 50.0


def test_ratio_columns_pick_the_fastest_spec_type_and_the_fastest_compare_server():
    row = {"none": 50.0, "ngram-mod": 100.0, "oracle": 200.0, "ngram-mod+draft-simple": 120.0,
           "llama-server:none": 60.0, "llama-server:ngram-mod": 150.0}
    r = ratios(row, configs())
    assert r.best_spec == "ngram-mod+draft-simple" and r.vs_none == pytest.approx(2.4)
    assert r.of_ceiling == pytest.approx(0.6)
    assert r.best_compare == "llama-server:ngram-mod" and r.vs_compare == pytest.approx(0.8)
    empty = ratios({"none": 50.0} | dict.fromkeys(["ngram-mod", "oracle", "ngram-mod+draft-simple",
                                                    "llama-server:none", "llama-server:ngram-mod"]), configs())
    assert empty == type(r)(None, None, None, None, None)


def test_acceptance_sums_tokens_and_says_none_without_drafts():
    assert acceptance([run(1, "a", "x", 1.0, 10, 9), run(2, "a", "x", 1.0, 30, 11)]) == pytest.approx(0.5)
    assert acceptance([run(1, "a", "x", 1.0)]) is None


def test_concurrency_numbers_are_aggregate_tokens_over_wall_time():
    runs = [run(1, "a", "none", 10.0), run(2, "a", "none", 50.0), run(2, "b", "none", 25.0)]
    assert serial_tps(runs, "none") == pytest.approx(200 / 6)  # warm rounds only: 100 tokens in 2 s and 4 s
    streams = [StreamRun(1, 4, "none", 400, 4.0), StreamRun(2, 4, "none", 400, 2.0), StreamRun(3, 4, "none", 300, 1.0)]
    assert stream_tps(streams, 4, "none") == 200.0
    assert stream_tps(streams, 2, "none") is None


METRICS_TEXT = """\
# HELP slotserver_decode_seconds_total Time spent in llama_decode.
# TYPE slotserver_decode_seconds_total counter
slotserver_decode_seconds_total {decode}
# HELP slotserver_step_seconds_total Engine step time.
# TYPE slotserver_step_seconds_total counter
slotserver_step_seconds_total {step}
# HELP slotserver_drafter_tokens_total Drafted tokens.
# TYPE slotserver_drafter_tokens_total counter
slotserver_drafter_tokens_total{{drafter="ngram-mod"}} 7.0
"""


def test_outside_decode_from_two_scrapes():
    before = counters(METRICS_TEXT.format(decode=1.5, step=2.0))
    after = counters(METRICS_TEXT.format(decode=2.3, step=3.0))
    assert before == {"slotserver_decode_seconds_total": 1.5, "slotserver_step_seconds_total": 2.0}
    assert outside_decode(before, after) == pytest.approx(0.2)
    assert outside_decode(before, before) is None  # no step ran
    no_step = {"slotserver_decode_seconds_total": 1.5}
    assert outside_decode(no_step, no_step | {"slotserver_decode_seconds_total": 2.0}) is None


# -- text and chart ------------------------------------------------------------------------------
def report_runs() -> tuple[list[Run], list[StreamRun]]:
    tps = {"none": 50.0, "ngram-mod": 100.0, "oracle": 200.0, "ngram-mod+draft-simple": 90.0,
           "llama-server:none": 55.0, "llama-server:ngram-mod": 110.0}
    drafts = {c: (0, 0) if c.endswith("none") else (10, 8) for c in tps}  # (drafted, accepted)
    runs = [run(r, w["name"], c, t * r, *drafts[c], outside=0.07)
            for r in (1, 2, 3) for w in WORKLOADS for c, t in tps.items()]
    return runs, [StreamRun(r, 4, c, 800, 4.0) for r in (1, 2, 3) for c in tps]


def test_markdown_has_a_header_row_per_table_and_a_row_per_workload():
    runs, streams = report_runs()
    text = markdown("Gemma 3 270M", command_line(["/x/bench.py", "--label", "Gemma 3 270M", "--rounds", "3"]),
                    WORKLOADS, configs(), runs, streams, [1, 4])
    lines = text.splitlines()
    assert lines[0] == "## Gemma 3 270M"
    assert lines[2:5] == ["```sh", "python -m benchmarks.bench.run --label 'Gemma 3 270M' --rounds 3", "```"]
    headings = [line for line in lines if line.startswith("### ")]
    assert [h.split(" (")[0] for h in headings] == [
        "### Tokens/s, cold", "### Tokens/s, warm", "### Acceptance %",
        "### Time outside llama_decode, % of engine step time",
        "### Concurrency: aggregate tokens/s, 2N mixed requests with at most N in flight"]
    tables = [[line for line in block.splitlines() if line.startswith("|")] for block in text.split("### ")[1:]]
    for rows in tables[:4]:
        assert rows[1].startswith("|---") and [r.split(" | ")[0] for r in rows[2:]] == ["| repeat", "| free"]
    assert len(tables[4]) == 2 + len(configs())
    cold_header = tables[0][0]
    assert "| none | ngram-mod | oracle |" in cold_header
    assert cold_header.endswith("| best spec | × none | % of ceiling | best compare | × compare |")
    # cold: ngram-mod 100 / none 50, 50% of the oracle's 200, 100 / llama-server:ngram-mod 110
    assert tables[0][2].endswith("| ngram-mod | 2.00 | 50 | llama-server:ngram-mod | 0.91 |")
    assert tables[1][2].split(" | ")[2] == "125.0"  # none warm: median of 100 and 150
    assert tables[2][2] == "| repeat | – / – | 80 / 80 | 80 / 80 | 80 / 80 | – / – | 80 / 80 |"
    assert tables[3][0] == "| workload | none | ngram-mod | oracle | ngram-mod+draft-simple |"
    assert tables[3][2] == "| repeat | 7 / 7 | 7 / 7 | 7 / 7 | 7 / 7 |"
    assert tables[4][0] == "| configuration | 1 stream | 4 streams | 4 vs 1 | 4: × none |"


def test_markdown_of_one_round_has_no_warm_table_and_says_na_without_step_counter():
    runs = [run(1, w["name"], c, 10.0) for w in WORKLOADS for c in ("none", "ngram-mod")]
    text = markdown("", "cmd", WORKLOADS, parse_configs(URL, "none,ngram-mod", []), runs, [], [1])
    assert text.startswith("## Benchmark\n")
    assert "warm" not in text.split("### ", 1)[1] and "Concurrency" not in text
    assert f"| repeat | {NA} | {NA} |" in text


def test_same_output_is_the_common_prefix_share_of_the_none_output():
    assert same_share([1, 2, 3, 4], [1, 2, 3, 4]) == 1.0
    assert same_share([1, 2, 9, 4], [1, 2, 3, 4]) == 0.5  # equal again after a flip does not count
    assert same_share([1, 2], [1, 2, 3, 4]) == 0.5  # stopped early
    assert same_share([1, 2, 3, 4, 5], [1, 2, 3, 4]) == 1.0
    assert same_share(None, [1]) is None and same_share([1], []) is None


def test_markdown_says_where_a_configuration_decoded_other_text():
    cs = parse_configs(URL, "none,ngram-mod", [f"llama-server:none={LS}"])
    runs = [Run(r, w["name"], c, 10.0, 0, 0, 100, 10.0, None, None if c == "none" else same)
            for r in (1, 2) for w in WORKLOADS for c, same in (("none", None), ("ngram-mod", 1.0),
                                                             ("llama-server:none", 0.25 if r == 2 else 1.0))]
    text = markdown("", "cmd", WORKLOADS, cs, runs, [], [1])
    section = text.split("### Same output as ours without speculation")[1]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows[0] == "| workload | ngram-mod | llama-server:none |"
    assert rows[2] == "| repeat | 100 / 100 | 100 / 25 |"


def test_png_of_warm_tokens_per_second(tmp_path):
    runs, _ = report_runs()
    names = [w["name"] for w in WORKLOADS]
    phase, rows = chart_rows(runs, names, configs())
    assert phase == "warm" and rows["repeat"]["none"] == 125.0
    rows["free"]["oracle"] = None  # a workload without a ceiling still draws
    path = tmp_path / "perf.png"
    write_png(path, "Gemma 3 270M", names, [c.name for c in configs()], rows, "tokens/s (warm)")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000


def test_long_configuration_names_wrap_after_a_plus_in_the_legend():
    """The whole chain's name (six drafters joined by '+') ran off both edges of the chart."""
    name = "ngram-mod+ngram-simple+ngram-map-k+ngram-map-k4v+ngram-cache+suffix@expected"
    lines = wrap(name).splitlines()
    assert len(lines) == 2 and all(len(line) <= LABEL_WIDTH for line in lines)
    assert "".join(lines) == name and lines[0].endswith("+")
    assert wrap("ngram-mod") == "ngram-mod" and wrap("x" * 60) == "x" * 60  # nothing to break at


def test_reports_append_one_section_per_model_and_draw_the_chart(tmp_path, monkeypatch, capsys):
    runs, streams = report_runs()
    bench = SimpleNamespace(runs=runs, stream_runs=streams)
    md, png = tmp_path / "perf.md", tmp_path / "perf.png"
    monkeypatch.setattr("sys.argv", ["bench.py", "--append"])
    for label in ("Gemma", "SmolLM2"):
        args = Namespace(label=label, markdown=str(md), append=True, png=str(png))
        write_reports(args, WORKLOADS, configs(), [1, 4], bench)
    text = md.read_text()
    assert [line for line in text.splitlines() if line.startswith("## ")] == ["## Gemma", "## SmolLM2"]
    assert "\n\n## SmolLM2\n" in text and png.stat().st_size > 0
    assert "## SmolLM2" in capsys.readouterr().out
    write_reports(Namespace(label="Gemma", markdown=str(md), append=False, png=None), WORKLOADS, configs(), [1], bench)
    assert md.read_text().startswith("## Gemma\n") and "## SmolLM2" not in md.read_text()


# -- orchestration against fake servers ----------------------------------------------------------
class FakeServer:
    """Answers /completion like a server that generates [7, 8, 9]; counts engine time in /metrics."""

    def __init__(self, metrics: bool) -> None:
        self.bodies: list[dict] = []
        self.step = 0.0
        app = web.Application()
        app.router.add_post("/completion", self.completion)
        if metrics:
            app.router.add_get("/metrics", self.metrics)
        self.server = TestServer(app)

    async def completion(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        self.step += 1.0
        timings = {"predicted_per_second": 100.0, "draft_n": 4, "draft_n_accepted": 3}
        # Drafting flips a near-tie: with an oracle the output ends in 10, whatever it drafts.
        tokens = [7, 8, 10] if "speculative.oracle" in body else [7, 8, 9]
        return web.json_response({"tokens_predicted": 3, "tokens": tokens, "timings": timings})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=METRICS_TEXT.format(decode=0.75 * self.step, step=self.step))


async def test_orchestration_sends_oracle_tokens_and_nothing_speculative_to_compare_servers(capsys):
    ours, other = FakeServer(metrics=True), FakeServer(metrics=False)
    async with ours.server, other.server:
        cs = parse_configs(str(ours.server.make_url("")).rstrip("/"), "none,oracle,ngram-mod",
                           [f"llama-server={str(other.server.make_url('')).rstrip('/')}"])
        bench = await measure(WORKLOADS, cs, rounds=2, streams=[1, 2])
    assert [(r.round, r.workload, r.config) for r in bench.runs] == [
        (r, w["name"], c.name) for r in (1, 2) for w in WORKLOADS for c in cs]
    assert all(r.outside == pytest.approx(0.25) for r in bench.runs if r.config != "llama-server")
    assert all(r.outside is None for r in bench.runs if r.config == "llama-server")
    # what each run reproduced of its round's none output [7, 8, 9]; the oracle decoded [7, 8, 10]
    assert {(r.config, None if r.same is None else round(r.same, 3)) for r in bench.runs} == {
        ("none", None), ("ngram-mod", 1.0), ("llama-server", 1.0), ("oracle", 0.667)}
    assert [(s.round, s.streams, s.config, s.tokens) for s in bench.stream_runs] == [
        (r, 2, c.name, 12) for r in (1, 2) for c in cs]
    oracle_bodies = [b["speculative.oracle"] for b in ours.bodies if "speculative.oracle" in b]
    # Settling, per workload: the none run's output flips to [7, 8, 10], which its own run reproduces;
    # every later run, single or concurrent, drafts that (one settling run before each measured one).
    settle_1 = [[7, 8, 9], [7, 8, 10], [7, 8, 10]]
    assert oracle_bodies == (settle_1 * 2 + [[7, 8, 10]] * 4) + [[7, 8, 10]] * (2 * 2 + 4)
    assert not any("speculative.type" in b for b in oracle_bodies)
    assert other.bodies and not any(k.startswith("speculative.") for b in other.bodies for k in b)
    assert ours.bodies[0]["prompt"] not in [w["prompt"] for w in WORKLOADS]  # the warm-up
    out = capsys.readouterr().out
    assert out.count("\n") == 1 + len(bench.runs) + len(bench.stream_runs)


def test_a_select_suffix_sets_speculative_select():
    from benchmarks.bench.plan import Config, request_body

    body = request_body(Config("ngram-mod+ngram-simple@precedence", "ours", "u"), {"prompt": "p", "n_predict": 4})
    assert body["speculative.type"] == "ngram-mod,ngram-simple" and body["speculative.select"] == "precedence"
    assert "speculative.select" not in request_body(Config("ngram-mod", "ours", "u"), {"prompt": "p", "n_predict": 4})
