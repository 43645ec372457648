"""Benchmark results as numbers and tables: cold and warm medians, ratios, markdown. Pure.

Round 1 is cold (the server meets the workload's prompt for the first time in this process), rounds
2..R are warm (the n-gram pool has seen it): a warm cell is the median of its warm rounds, so one
disturbed run does not move it. Ratios compare cells of the same round phase, which ran back to back;
``LEGEND`` says what each ratio column divides.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from statistics import median
from typing import Callable, Iterable

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.bench.plan import COMPARE, NONE, ORACLE, OURS, Config
from slotserver.engine.batch import common_prefix

COLD, WARM = "cold", "warm"
STEP_COUNTER = "slotserver_step_seconds_total"  # engine step time
DECODE_COUNTER = "slotserver_decode_seconds_total"  # the part of it inside llama_decode
DASH = "–"  # a cell without a value (not measured, nothing drafted)
NA = "n/a"  # time outside llama_decode when the server has no step counter
LEGEND = ("best spec: the fastest of our speculative types on the workload (not none, not the oracle); "
          "× none: best spec / ours without speculation; % of ceiling: best spec / oracle (a perfect drafter "
          "on our server); best compare: the fastest compare server on the workload; × compare: best spec / it.")


@dataclass(frozen=True)
class Run:
    """One request of one workload with one configuration."""

    round: int
    workload: str
    config: str
    tps: float  # the server's timings.predicted_per_second
    draft_n: int
    draft_accepted: int
    tokens: int  # tokens_predicted
    wall_s: float  # client-side request time, prompt included
    outside: float | None = None  # share of engine step time outside llama_decode (ours only)
    same: float | None = None  # share of our no-speculation output this run reproduced (``same_share``)

    @classmethod
    def from_response(cls, round_: int, workload: str, config: str, out: dict, wall_s: float,
                      outside: float | None = None, same: float | None = None) -> Run:
        t = out["timings"]  # llama-server reports the draft counters too; a server without them drafts nothing
        return cls(round_, workload, config, t["predicted_per_second"], t.get("draft_n", 0),
                   t.get("draft_n_accepted", 0), out["tokens_predicted"], wall_s, outside, same)

    @property
    def phase(self) -> str:
        return COLD if self.round == 1 else WARM


@dataclass(frozen=True)
class StreamRun:
    """One configuration's batch of mixed requests with ``streams`` in flight."""

    round: int
    streams: int
    config: str
    tokens: int
    wall_s: float

    @property
    def tps(self) -> float:
        return self.tokens / self.wall_s


# -- /metrics ------------------------------------------------------------------------------------
def counters(text: str) -> dict[str, float]:
    """Unlabelled samples of a Prometheus text exposition, by sample name (``..._total`` kept)."""
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples if not s.labels}


def outside_decode(before: dict[str, float], after: dict[str, float]) -> float | None:
    """Share of the engine's step time spent outside llama_decode between two scrapes (None: the
    server has no step counter, or no step ran)."""
    if STEP_COUNTER not in before or STEP_COUNTER not in after:
        return None
    d_step = after[STEP_COUNTER] - before[STEP_COUNTER]
    if d_step <= 0:
        return None
    return 1.0 - (after.get(DECODE_COUNTER, 0.0) - before.get(DECODE_COUNTER, 0.0)) / d_step


def same_share(tokens: list[int] | None, reference: list[int] | None) -> float | None:
    """How much of ``reference`` (our no-speculation output of the round) ``tokens`` reproduce: their
    common prefix over its length (None when either is unknown). Below 1 the two runs decoded
    different text from that token on (a near-tie flipped, or another server's kernels chose
    otherwise), so their speeds are not of the same work."""
    if not tokens or not reference:
        return None
    return common_prefix(tokens, reference) / len(reference)


# -- cells and ratios ----------------------------------------------------------------------------
def cell(runs: Iterable[Run], workload: str, config: str, phase: str) -> list[Run]:
    return [r for r in runs if r.workload == workload and r.config == config and r.phase == phase]


def median_tps(runs: list[Run]) -> float | None:
    """None when no run generated a token or timed one (the model ended at once: the servers count
    the end-of-generation token but report 0.0 t/s; no speed to compare)."""
    values = [r.tps for r in runs if r.tokens > 0 and r.tps > 0]
    return median(values) if values else None


def acceptance(runs: list[Run]) -> float | None:
    """Accepted / drafted tokens over the runs (None: nothing drafted)."""
    drafted = sum(r.draft_n for r in runs)
    return sum(r.draft_accepted for r in runs) / drafted if drafted else None


def median_outside(runs: list[Run]) -> float | None:
    values = [r.outside for r in runs if r.outside is not None]
    return median(values) if values else None


def lowest_same(runs: list[Run]) -> float | None:
    values = [r.same for r in runs if r.same is not None]
    return min(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def fastest(row: dict[str, float | None], names: Iterable[str]) -> str | None:
    measured = [n for n in names if row.get(n) is not None]
    return max(measured, key=lambda n: row[n]) if measured else None


@dataclass(frozen=True)
class Ratios:
    best_spec: str | None
    vs_none: float | None
    of_ceiling: float | None
    best_compare: str | None
    vs_compare: float | None


def ratios(row: dict[str, float | None], configs: list[Config]) -> Ratios:
    """The ratio columns of one workload's row (tokens/s by configuration name)."""
    spec = fastest(row, [c.name for c in configs if c.is_spec])
    compare = fastest(row, [c.name for c in configs if c.kind == COMPARE])
    best = row[spec] if spec else None
    return Ratios(spec, ratio(best, row.get(NONE)), ratio(best, row.get(ORACLE)),
                  compare, ratio(best, row[compare] if compare else None))


def tps_rows(runs: list[Run], workloads: list[str], configs: list[Config], phase: str) -> dict[str, dict]:
    """Tokens/s by workload, then configuration: the median of the phase's runs."""
    return {w: {c.name: median_tps(cell(runs, w, c.name, phase)) for c in configs} for w in workloads}


def chart_rows(runs: list[Run], workloads: list[str], configs: list[Config]) -> tuple[str, dict[str, dict]]:
    """What the chart shows: warm tokens/s, or cold when only one round ran."""
    phase = WARM if any(r.phase == WARM for r in runs) else COLD
    return phase, tps_rows(runs, workloads, configs, phase)


def serial_tps(runs: list[Run], config: str) -> float | None:
    """One stream's aggregate tokens/s, the baseline of the concurrency table: all workloads one
    after another (warm rounds, or round 1 when there is no other), generated tokens / wall time."""
    chosen = [r for r in runs if r.config == config and r.phase == WARM] or \
             [r for r in runs if r.config == config]
    wall = sum(r.wall_s for r in chosen)
    return sum(r.tokens for r in chosen) / wall if wall else None


def stream_tps(stream_runs: list[StreamRun], streams: int, config: str) -> float | None:
    """Median over rounds: the batches run after round 1's single requests, so every round is warm."""
    values = [s.tps for s in stream_runs if s.streams == streams and s.config == config]
    return median(values) if values else None


# -- text ----------------------------------------------------------------------------------------
def fmt(value: float | None, spec: str = ".1f", scale: float = 1.0, missing: str = DASH) -> str:
    return missing if value is None else format(value * scale, spec)


def pct(value: float | None, missing: str = DASH) -> str:
    return fmt(value, ".0f", 100.0, missing)


def command_line(argv: list[str], module: str = "benchmarks.bench.run") -> str:
    """The command that produced a report (``sys.argv`` of ``python -m MODULE``)."""
    return shlex.join(["python", "-m", module, *argv[1:]])


PROGRESS_HEADER = f"{'round':<8} {'workload':<12} {'configuration':<28} {'t/s':>7} {'drafted':>7} {'acc%':>5} " \
                  f"{'outside%':>8}"


def progress_line(run: Run) -> str:
    phase = f"{run.round} {run.phase}"
    return (f"{phase:<8} {run.workload:<12} {run.config:<28} {run.tps:>7.1f} {run.draft_n:>7} "
            f"{pct(acceptance([run])):>5} {pct(run.outside, NA):>8}")


def stream_line(run: StreamRun) -> str:
    return (f"{run.round:<8} {f'{run.streams} streams':<12} {run.config:<28} {run.tps:>7.1f} "
            f"({run.tokens} tokens in {run.wall_s:.1f} s, aggregate)")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def ratio_columns(configs: list[Config]) -> list[tuple[str, Callable[[Ratios], str]]]:
    """The ratio columns the configurations allow: each needs a speculative type of ours and its divisor."""
    if not any(c.is_spec for c in configs):
        return []
    columns = [("best spec", lambda r: r.best_spec or DASH)]
    if any(c.kind == OURS and c.name == NONE for c in configs):
        columns.append(("× none", lambda r: fmt(r.vs_none, ".2f")))
    if any(c.kind == ORACLE for c in configs):
        columns.append(("% of ceiling", lambda r: pct(r.of_ceiling)))
    if any(c.kind == COMPARE for c in configs):
        columns += [("best compare", lambda r: r.best_compare or DASH),
                    ("× compare", lambda r: fmt(r.vs_compare, ".2f"))]
    return columns


def tps_table(rows: dict[str, dict], draftability: dict[str, str], configs: list[Config]) -> list[str]:
    columns = ratio_columns(configs)
    out = []
    for w, row in rows.items():
        r = ratios(row, configs)
        out.append([w, draftability[w]] + [fmt(row[c.name]) for c in configs] + [value(r) for _, value in columns])
    return table(["workload", "draftability"] + [c.name for c in configs] + [name for name, _ in columns], out)


def per_phase_table(runs: list[Run], workloads: list[str], configs: list[Config],
                    value: Callable[[list[Run]], str], phases: list[str]) -> list[str]:
    """A workload x configuration table of ``value(cell runs)``, "cold / warm" when both ran."""
    rows = [[w] + [" / ".join(value(cell(runs, w, c.name, p)) for p in phases) for c in configs] for w in workloads]
    return table(["workload"] + [c.name for c in configs], rows)


def concurrency_table(runs: list[Run], stream_runs: list[StreamRun], configs: list[Config],
                      streams: list[int]) -> list[str]:
    header = ["configuration", "1 stream"]
    for n in streams:
        header += [f"{n} streams", f"{n} vs 1", f"{n}: × none"]
    rows = []
    for c in configs:
        serial = serial_tps(runs, c.name)
        row = [c.name, fmt(serial)]
        for n in streams:
            tps = stream_tps(stream_runs, n, c.name)
            row += [fmt(tps), fmt(ratio(tps, serial), ".2f"),
                    fmt(ratio(tps, stream_tps(stream_runs, n, NONE)), ".2f")]
        rows.append(row)
    return table(header, rows)


def markdown(label: str, command: str, workloads: list[dict], configs: list[Config], runs: list[Run],
             stream_runs: list[StreamRun], streams: list[int]) -> str:
    names = [w["name"] for w in workloads]
    draftability = {w["name"]: w.get("draftability", "") for w in workloads}
    rounds = max((r.round for r in runs), default=1)
    phases = [COLD] + ([WARM] if rounds > 1 else [])
    ours = [c for c in configs if c.is_ours]
    lines = [f"## {label}" if label else "## Benchmark", "", "```sh", command, "```", "",
             "Greedy, `cache_prompt` off; tokens/s is the server's `timings.predicted_per_second`. " + LEGEND, ""]
    for phase in phases:
        title = "round 1" if phase == COLD else "round 2" if rounds == 2 else f"median of rounds 2–{rounds}"
        lines += [f"### Tokens/s, {phase} ({title})", ""]
        lines += tps_table(tps_rows(runs, names, configs, phase), draftability, configs) + [""]
    lines += [f"### Acceptance % ({' / '.join(phases)}): accepted / drafted tokens", ""]
    lines += per_phase_table(runs, names, configs, lambda rs: pct(acceptance(rs)), phases) + [""]
    if ours:
        lines += [f"### Time outside llama_decode, % of engine step time ({' / '.join(phases)})", ""]
        lines += per_phase_table(runs, names, ours, lambda rs: pct(median_outside(rs), NA), phases) + [""]
    others = [c for c in configs if not (c.kind == OURS and c.name == NONE)]
    if any(r.same is not None for r in runs):
        lines += [(f"### Same output as ours without speculation, % ({' / '.join(phases)}; the lowest run): "
                   "its common prefix with that round's `none` output"), "",
                  ("Below 100 the configuration decoded other text from some token on, so its tokens/s is of "
                   "other work: a near-tie flipped (ours), or llama-server's kernels chose otherwise."), ""]
        lines += per_phase_table(runs, names, others, lambda rs: pct(lowest_same(rs)), phases) + [""]
    concurrent = [n for n in streams if n > 1]
    if concurrent:
        lines += [f"### Concurrency: aggregate tokens/s, 2N mixed requests with at most N in flight "
                  f"(median of {rounds} rounds; 1 stream: the workloads one after another)", ""]
        lines += concurrency_table(runs, stream_runs, configs, concurrent) + [""]
    return "\n".join(lines) + "\n"
