"""The multi-turn benchmark without a model: prompts built on each server's own outputs, one server
per configuration, the alternation order, the summed cells and ratios, the markdown, and one replay
against fake servers (milliseconds: made-up numbers, real plumbing)."""

from __future__ import annotations

from argparse import Namespace

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from benchmarks.bench.multiturn import measure, select, write_report
from benchmarks.bench.multiturn_plan import (
    Visit,
    load_conversations,
    parse_servers,
    turn_body,
    turn_prompt,
    visit_order,
)
from benchmarks.bench.multiturn_report import ALL, Cell, TurnRun, baseline, cells, markdown
from benchmarks.bench.plan import COMPARE, OURS, Config
from benchmarks.bench.report import Run

CONV = {"name": "edits", "kind": "edits of one file", "n_predict": 16, "stop": ["```"],
        "turns": ["File:\n```\nx = 1\n```\nAgain:\n```\n", "```\nAgain:\n```\n", "```\nOnce more:\n```\n"]}


def servers() -> list[Config]:
    return parse_servers(["suffix=http://s", "none=http://n", "ngram-mod=http://m"],
                         ["llama-server:none=http://ln", "llama-server:ngram-mod=http://lm"])


# -- plan ----------------------------------------------------------------------------------------
def test_turn_prompt_is_the_conversation_so_far_with_the_servers_own_outputs():
    u = CONV["turns"]
    assert turn_prompt(u, []) == u[0]
    assert turn_prompt(u, ["x = 1\n"]) == u[0] + "x = 1\n" + u[1]
    assert turn_prompt(u, ["x = 1\n", "x = 2\n"]) == u[0] + "x = 1\n" + u[1] + "x = 2\n" + u[2]
    with pytest.raises(ValueError, match="3 turns"):
        turn_prompt(u, ["a", "b", "c"])


def test_turn_body_is_greedy_uncached_with_stop_and_speculative_fields_for_ours_only():
    none, suffix, _, ls_none, _ = servers()
    body = turn_body(suffix, CONV, ["x = 1\n"])
    assert body == {"prompt": CONV["turns"][0] + "x = 1\n" + CONV["turns"][1], "n_predict": 16,
                    "temperature": 0.0, "cache_prompt": False, "return_tokens": True, "stop": ["```"],
                    "speculative.type": "suffix"}
    assert turn_body(none, CONV, [])["speculative.type"] == "none"
    assert not any(k.startswith("speculative.") for k in turn_body(ls_none, CONV, []))
    assert "stop" not in turn_body(none, CONV | {"stop": []}, [])


def test_every_configuration_has_its_own_server_none_first_compare_servers_last():
    cs = servers()
    assert [(c.name, c.kind, c.url) for c in cs] == [
        ("none", OURS, "http://n"), ("suffix", OURS, "http://s"), ("ngram-mod", OURS, "http://m"),
        ("llama-server:none", COMPARE, "http://ln"), ("llama-server:ngram-mod", COMPARE, "http://lm")]


@pytest.mark.parametrize("ours, compares, message", [
    (["none=http://a", "suffix=http://a"], [], "its own server"),  # suffix would learn none's outputs
    (["none=http://a"], ["none=http://b"], "must differ"),
    (["suffix"], [], "--ours takes NAME=URL"),
    (["none=http://a"], ["llama-server"], "--compare takes NAME=URL"),
])
def test_servers_refuse(ours, compares, message):
    with pytest.raises(ValueError, match=message):
        parse_servers(ours, compares)


def test_visit_order_replays_each_conversation_with_every_configuration_first_one_moving_on():
    order = visit_order(2, ["a", "b"], ["x", "y", "z"])
    assert order == [Visit(1, "a", c) for c in "xyz"] + [Visit(1, "b", c) for c in "yzx"] + \
                    [Visit(2, "a", c) for c in "zxy"] + [Visit(2, "b", c) for c in "xyz"]


def test_select_cuts_turns_and_n_predict_without_touching_the_source():
    convs = [CONV, CONV | {"name": "other"}]
    out = select(convs, "edits", 2, 8)
    assert [(c["name"], len(c["turns"]), c["n_predict"]) for c in out] == [("edits", 2, 8)]
    assert len(CONV["turns"]) == 3 and CONV["n_predict"] == 16
    assert select(convs, "", 0, 0) == convs


def test_shipped_conversations_have_four_to_six_turns_a_stop_and_a_design_note():
    convs = load_conversations()
    assert 4 <= len(convs) <= 5 and len({c["name"] for c in convs}) == len(convs)
    for c in convs:
        assert 4 <= len(c["turns"]) <= 6 and 128 <= c["n_predict"] <= 192
        assert c["stop"] and c["kind"] and c["design"]


# -- numbers -------------------------------------------------------------------------------------
def turn(config: str, tps: float, predicted_s: float, tokens: int = 10, conv: str = "edits", phase: str = "cold",
         round_: int = 1, drafted: int = 0, accepted: int = 0, wall_s: float = 1.0) -> TurnRun:
    return TurnRun(phase, 1, Run(round_, conv, config, tps, drafted, accepted, tokens, wall_s), predicted_s)


def test_a_cell_sums_turns_with_each_servers_own_rate():
    c = Cell.of([turn("x", 100.0, 1.0, drafted=10, accepted=9), turn("x", 50.0, 3.0, drafted=30, accepted=11)])
    assert c.tps == pytest.approx((100.0 + 150.0) / 4.0)  # tokens as the server counts them / its time
    assert c.wall_tps == pytest.approx(10.0) and c.acceptance == pytest.approx(0.5)
    assert Cell.of([]) is None


def test_turn_run_reads_predicted_ms_or_derives_it():
    out = {"tokens_predicted": 11, "timings": {"predicted_per_second": 50.0, "predicted_ms": 400.0}}
    assert TurnRun.from_response("cold", 1, "edits", 2, "x", out, 0.5).predicted_s == pytest.approx(0.4)
    del out["timings"]["predicted_ms"]
    assert TurnRun.from_response("cold", 1, "edits", 2, "x", out, 0.5).predicted_s == pytest.approx(0.22)


def test_ratios_divide_by_none_of_the_same_server():
    none, suffix, _, ls_none, ls_mod = servers()
    assert [baseline(c) for c in (none, suffix, ls_none, ls_mod)] == ["none", "none"] + ["llama-server:none"] * 2
    assert baseline(Config("other", COMPARE, "u")) == "other"


def test_cells_keep_phases_rounds_and_conversations_apart_and_sum_them_in_all():
    turns = [turn("none", 10.0, 1.0), turn("none", 30.0, 1.0, conv="qa"), turn("none", 99.0, 1.0, phase="restart"),
             turn("none", 99.0, 1.0, round_=2)]
    rows = cells(turns, "cold", 1, ["edits", "qa"], servers()[:1])
    assert rows["edits"]["none"].tps == 10.0 and rows["qa"]["none"].tps == 30.0
    assert rows[ALL]["none"].tps == pytest.approx(20.0) and rows[ALL]["none"].n_turns == 2


def report_turns() -> list[TurnRun]:
    tps = {"none": 50.0, "suffix": 150.0, "ngram-mod": 100.0, "llama-server:none": 40.0,
           "llama-server:ngram-mod": 120.0}
    return [turn(c, t * (2 if phase == "restart" else 1), 1.0, conv=conv, phase=phase,
                 drafted=0 if c.endswith("none") else 10, accepted=0 if c.endswith("none") else 8)
            for phase in ("cold", "restart") for conv in ("edits", "qa") for c, t in tps.items()]


def test_markdown_has_four_tables_per_phase_and_the_suffix_ratios():
    convs = [CONV, CONV | {"name": "qa", "kind": "quotes"}]
    text = markdown("Gemma", "python -m benchmarks.bench.multiturn --phase cold", convs, servers(), report_turns())
    lines = text.splitlines()
    assert lines[0] == "## Gemma" and lines[3] == "python -m benchmarks.bench.multiturn --phase cold"
    assert "| edits | edits of one file |" in lines and "| qa | quotes |" in lines
    headings = [line for line in lines if line.startswith("### ")]
    assert [h.rsplit(", ", 1) for h in headings] == [
        [t, p] for p in ("cold", "restart") for t in ("### Tokens/s", "### × none of the same server",
                                                      "### Wall tokens/s (prompt included)",
                                                      "### Drafted / accepted tokens")]
    tables = [[line for line in block.splitlines() if line.startswith("|")] for block in text.split("### ")[1:]]
    tps = tables[0]
    assert tps[0] == ("| conversation | turns | none | suffix | ngram-mod | llama-server:none | llama-server:ngram-mod "
                      "| best spec | × none | best compare | × compare | suffix × ngram-mod | suffix × compare |")
    assert [r.split(" | ")[0] for r in tps[2:]] == ["| edits", "| qa", f"| {ALL}"]
    assert tps[2] == ("| edits | 1 | 50.0 | 150.0 | 100.0 | 40.0 | 120.0 | suffix | 3.00 | llama-server:ngram-mod "
                      "| 1.25 | 1.50 | 1.25 |")
    assert tables[1][2] == "| edits | 1.00 | 3.00 | 2.00 | 1.00 | 3.00 |"  # llama-server:ngram-mod / its none
    assert tables[3][2] == "| edits | – | 10 / 8 (80%) | 10 / 8 (80%) | – | 10 / 8 (80%) |"
    assert tables[4][4].startswith(f"| {ALL} | 2 | 100.0 | 300.0 |")  # restart: both conversations


def test_markdown_without_suffix_or_compare_servers_has_no_such_columns():
    cs = parse_servers(["none=http://n", "ngram-mod=http://m"], [])
    text = markdown("", "cmd", [CONV], cs, [turn(c.name, 10.0, 1.0) for c in cs])
    assert text.startswith("## Multi-turn benchmark\n")
    header = next(line for line in text.splitlines() if line.startswith("| conversation | turns"))
    assert header.endswith("| best spec | × none |")


def test_report_is_printed_and_appended(tmp_path, monkeypatch, capsys):
    md = tmp_path / "mt.md"
    monkeypatch.setattr("sys.argv", ["bench_multiturn.py", "--phase", "cold"])
    for label in ("cold", "restart"):
        write_report(Namespace(label=label, markdown=str(md), append=True), [CONV], servers(), report_turns())
    assert [line for line in md.read_text().splitlines() if line.startswith("## ")] == ["## cold", "## restart"]
    assert "python -m benchmarks.bench.multiturn --phase cold" in capsys.readouterr().out


# -- a replay against fake servers ---------------------------------------------------------------
class FakeServer:
    """Answers each prompt with its own name and the turn number, so the next prompt shows whose
    outputs it was built on."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.bodies: list[dict] = []
        app = web.Application()
        app.router.add_post("/completion", self.completion)
        self.server = TestServer(app)

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    async def completion(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        timings = {"predicted_per_second": 100.0, "predicted_ms": 30.0, "draft_n": 4, "draft_n_accepted": 3}
        return web.json_response({"content": f"<{self.name} {len(self.bodies)}>", "tokens_predicted": 4,
                                  "timings": timings})


async def test_each_configuration_replays_on_its_own_outputs(capsys):
    fakes = [FakeServer("none"), FakeServer("suffix"), FakeServer("ls")]
    for f in fakes:
        await f.server.start_server()
    try:
        cs = parse_servers([f"none={fakes[0].url}", f"suffix={fakes[1].url}"], [f"llama-server={fakes[2].url}"])
        turns = await measure([CONV, CONV | {"name": "second"}], cs, "restart", rounds=1)
    finally:
        for f in fakes:
            await f.server.close()
    assert [(t.run.workload, t.run.config, t.turn) for t in turns] == \
        [("edits", c, k) for c in ("none", "suffix", "llama-server") for k in (1, 2, 3)] + \
        [("second", c, k) for c in ("suffix", "llama-server", "none") for k in (1, 2, 3)]
    assert all(t.phase == "restart" and t.predicted_s == pytest.approx(0.03) for t in turns)
    suffix = fakes[1].bodies
    assert suffix[0]["prompt"] == "Hello"  # the warm-up
    assert suffix[3]["prompt"] == turn_prompt(CONV["turns"], ["<suffix 2>", "<suffix 3>"])
    assert all(b["speculative.type"] == "suffix" for b in suffix[1:])
    assert not any(k.startswith("speculative.") for b in fakes[2].bodies for k in b)
    assert capsys.readouterr().out.count("\n") == 1 + len(turns)
