"""The multi-turn benchmark's numbers and tables. Pure.

A cell is one configuration replaying one conversation: every turn's request summed. Tokens/s is
the server's own: each turn contributes ``timings.predicted_per_second`` x ``timings.predicted_ms``
tokens over ``predicted_ms`` (so the sum keeps each server's own way of counting, as the single-turn
tables do); wall tokens/s is generated tokens over request time, the prompt included. A ratio
divides by ``none`` of the same server: ours by our ``none``, ``NAME:TYPE`` compare servers by
``NAME:none``. ``FOCUS`` and ``RIVAL`` name the comparison issue 13 asks for (the suffix drafter
against ngram-mod and against the best compare server).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from benchmarks.bench.plan import COMPARE, NONE, Config
from benchmarks.bench.report import DASH, Run, acceptance, fmt, pct, ratio, ratio_columns, ratios, table

FOCUS, RIVAL = "suffix", "ngram-mod"
ALL = "all"  # the row summing every conversation
LEGEND = ("Tokens/s: the server's generation time summed over all turns (wall: request time, prompt "
          "included). best spec: our fastest speculative configuration; × none: it / our none; best compare: "
          "the fastest compare server; × compare: best spec / it; suffix × ngram-mod and suffix × compare: "
          "the suffix drafter alone against ngram-mod and against the best compare server.")


@dataclass(frozen=True)
class TurnRun:
    """One turn's request: ``run`` holds its numbers as the single-turn bench keeps them (its
    ``workload`` is the conversation)."""

    phase: str  # multiturn_plan.PHASES
    turn: int  # 1-based
    run: Run
    predicted_s: float  # the server's generation time (timings.predicted_ms)

    @classmethod
    def from_response(cls, phase: str, round_: int, conversation: str, turn: int, config: str, out: dict,
                      wall_s: float) -> TurnRun:
        run = Run.from_response(round_, conversation, config, out, wall_s)
        predicted_ms = out["timings"].get("predicted_ms")
        if predicted_ms is None:  # a server without it: its tokens over its rate
            predicted_ms = 1e3 * run.tokens / run.tps if run.tps else 0.0
        return cls(phase, turn, run, predicted_ms / 1e3)


@dataclass(frozen=True)
class Cell:
    """Every turn of one configuration on one conversation (or all of them), summed."""

    n_turns: int
    n_tokens: int
    steps: float  # tokens as each server counts them for its rate
    predicted_s: float
    wall_s: float
    draft_n: int
    draft_accepted: int

    @classmethod
    def of(cls, turns: list[TurnRun]) -> Cell | None:
        if not turns:
            return None
        return cls(len(turns), sum(t.run.tokens for t in turns), sum(t.run.tps * t.predicted_s for t in turns),
                   sum(t.predicted_s for t in turns), sum(t.run.wall_s for t in turns),
                   sum(t.run.draft_n for t in turns), sum(t.run.draft_accepted for t in turns))

    @property
    def tps(self) -> float | None:
        return self.steps / self.predicted_s if self.predicted_s else None

    @property
    def wall_tps(self) -> float | None:
        return self.n_tokens / self.wall_s if self.wall_s else None

    @property
    def acceptance(self) -> float | None:
        return self.draft_accepted / self.draft_n if self.draft_n else None


def baseline(config: Config) -> str:
    """The ``none`` of the same server: ours for ours, ``NAME:none`` for a ``NAME:TYPE`` compare server."""
    if config.kind != COMPARE:
        return NONE
    family, sep, _ = config.name.rpartition(":")
    return f"{family}:none" if sep else config.name


def cells(turns: list[TurnRun], phase: str, round_: int, conversations: list[str],
          configs: list[Config]) -> dict[str, dict[str, Cell | None]]:
    """Cells by conversation (then ``ALL``), then configuration name, for one round of one phase."""
    mine = [t for t in turns if t.phase == phase and t.run.round == round_]
    rows = {conv: {c.name: Cell.of([t for t in mine if t.run.workload == conv and t.run.config == c.name])
                   for c in configs} for conv in conversations}
    rows[ALL] = {c.name: Cell.of([t for t in mine if t.run.config == c.name and t.run.workload in conversations])
                 for c in configs}
    return rows


def focus_columns(configs: list[Config]) -> list[tuple[str, Callable[[dict], str]]]:
    """``FOCUS`` over ``RIVAL`` and over the fastest compare server, when the run has them."""
    names = {c.name for c in configs}
    if FOCUS not in names:
        return []
    compares = [c.name for c in configs if c.kind == COMPARE]
    columns = []
    if RIVAL in names:
        columns.append((f"{FOCUS} × {RIVAL}", lambda row: fmt(ratio(row[FOCUS], row[RIVAL]), ".2f")))
    if compares:
        def vs_compare(row: dict) -> str:
            best = max((row[n] for n in compares if row[n] is not None), default=None)
            return fmt(ratio(row[FOCUS], best), ".2f")
        columns.append((f"{FOCUS} × compare", vs_compare))
    return columns


def tps_table(rows: dict[str, dict[str, Cell | None]], configs: list[Config]) -> list[str]:
    """Tokens/s (server time) per conversation and configuration, with the ratio columns."""
    columns = ratio_columns(configs)
    extra = focus_columns(configs)
    out = []
    for conv, row in rows.items():
        tps = {name: c.tps if c else None for name, c in row.items()}
        r = ratios(tps, configs)
        out.append([conv, turns_of(row)] + [fmt(tps[c.name]) for c in configs] + [v(r) for _, v in columns]
                   + [v(tps) for _, v in extra])
    header = ["conversation", "turns"] + [c.name for c in configs] + [n for n, _ in columns] + [n for n, _ in extra]
    return table(header, out)


def turns_of(row: dict[str, Cell | None]) -> str:
    counts = sorted({c.n_turns for c in row.values() if c is not None})
    return "/".join(map(str, counts)) or DASH


def value_table(rows: dict[str, dict[str, Cell | None]], configs: list[Config],
                value: Callable[[Cell, dict[str, Cell | None], Config], str]) -> list[str]:
    """A conversation x configuration table of ``value(cell, its row, its configuration)``."""
    out = [[conv] + [value(row[c.name], row, c) if row[c.name] else DASH for c in configs]
           for conv, row in rows.items()]
    return table(["conversation"] + [c.name for c in configs], out)


def vs_none(cell: Cell, row: dict[str, Cell | None], config: Config) -> str:
    base = row.get(baseline(config))
    return fmt(ratio(cell.tps, base.tps if base else None), ".2f")


def drafts(cell: Cell, row: dict, config: Config) -> str:
    return f"{cell.draft_n} / {cell.draft_accepted} ({pct(cell.acceptance)}%)" if cell.draft_n else DASH


def wall(cell: Cell, row: dict, config: Config) -> str:
    return fmt(cell.wall_tps)


def section_title(phase: str, round_: int) -> str:
    return phase if round_ == 1 else f"{phase}, round {round_} (warm: the servers saw round {round_ - 1})"


def markdown(label: str, command: str, conversations: list[dict], configs: list[Config],
             turns: list[TurnRun]) -> str:
    names = [c["name"] for c in conversations]
    lines = [f"## {label}" if label else "## Multi-turn benchmark", "", "```sh", command, "```", "",
             "Greedy, `cache_prompt` off, every configuration of ours on its own server. " + LEGEND, ""]
    lines += ["| conversation | kind |", "|---|---|"] + [f"| {c['name']} | {c.get('kind', '')} |"
                                                          for c in conversations] + [""]
    for phase, round_ in dict.fromkeys((t.phase, t.run.round) for t in turns):
        rows = cells(turns, phase, round_, names, configs)
        title = section_title(phase, round_)
        lines += [f"### Tokens/s, {title}", ""] + tps_table(rows, configs) + [""]
        lines += [f"### × none of the same server, {title}", ""] + value_table(rows, configs, vs_none) + [""]
        lines += [f"### Wall tokens/s (prompt included), {title}", ""] + value_table(rows, configs, wall) + [""]
        lines += [f"### Drafted / accepted tokens, {title}", ""] + value_table(rows, configs, drafts) + [""]
    return "\n".join(lines) + "\n"


PROGRESS_HEADER = f"{'phase':<8} {'round':>5} {'conversation':<14} {'turn':>4} {'configuration':<28} " \
                  f"{'t/s':>7} {'tokens':>6} {'drafted':>7} {'acc%':>5}"


def progress_line(t: TurnRun) -> str:
    r = t.run
    acc = pct(acceptance([r]))
    return (f"{t.phase:<8} {r.round:>5} {r.workload:<14} {t.turn:>4} {r.config:<28} {r.tps:>7.1f} {r.tokens:>6} "
            f"{r.draft_n:>7} {acc:>5}")
