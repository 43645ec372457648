"""What one step of the target costs: the verify-cost profile, measured on this machine.

Verifying a draft of k tokens puts k+1 rows into the step's ``llama_decode``, each an output row,
and with a large vocabulary the output projection is most of a row's cost (figures:
docs/measurements.md). Whether a draft pays therefore depends on this
CPU, this model and these settings, not on a rule of thumb, so ``calibrate.py`` measures it:

- ``t_rows_s[i]``: one sequence, ``rows[i]`` output rows, after ``depth`` cached tokens. Not linear
  and not even monotonic: ggml's CPU kernels take the rows four at a time and a row left over costs
  almost a one-row decode (docs/measurements.md), so ``calibrate`` measures every
  row count up to 65 and the selection sees the saw-tooth. Between measured row counts (a table of
  an older format, or a test's) it is read by linear interpolation; beyond the last it repeats the
  last ``PERIOD`` rows' pattern, each period dearer by what the last period cost;
- ``t_seq_s``: each further sequence in the same decode, at the same total rows;
- ``t_input_row_s``: a row that is no output (a prompt chunk in the same step);
- ``t_depth_row_s``: attention: each output row costs this much more per cached token of its
  sequence beyond ``depth`` (less below it).

Pure data and arithmetic: the selection (``selection.py``) asks it what a step would cost. Owner:
the engine thread, which also refines it with what serving measures (``observe``); ``t_rows_s`` is
replaced whole, never changed in place, so /props and /metrics read a consistent tuple.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass

# A step never costs less than this share of the measured one-row step (the depth term may be
# negative for a short context; attention is never all of a step).
MIN_STEP_SHARE = 0.5
# Weight of a decode time measured while serving in the running average of its row count's time.
OBSERVE_WEIGHT = 0.05
# Beyond the table the cost repeats the pattern of the last this many rows (a multiple of the
# kernels' four rows), each period dearer by what the last one added.
PERIOD = 16


@dataclass(slots=True)
class VerifyProfile:
    rows: tuple[int, ...]  # output rows of one sequence, ascending, starting at 1
    t_rows_s: tuple[float, ...]  # llama_decode time at each
    t_seq_s: float  # each further sequence in the decode (same total rows)
    t_input_row_s: float  # each prompt row (no output) in the decode
    t_depth_row_s: float  # each output row, per cached token of its sequence beyond ``depth``
    depth: int  # cached tokens of the sequence when ``t_rows_s`` was measured

    def __post_init__(self) -> None:
        if not self.rows or self.rows[0] != 1 or list(self.rows) != sorted(set(self.rows)):
            raise ValueError("profile rows must be ascending, distinct and start at 1")
        if len(self.t_rows_s) != len(self.rows) or min(self.t_rows_s) <= 0:
            raise ValueError("profile times must be positive, one per row count")

    def observe(self, n_rows: int, seconds: float, depth_rows: float = 0.0) -> None:
        """Serving measured a decode of one sequence with ``n_rows`` output rows and nothing else:
        the table moves towards it (the start-up measurement is the fastest of a few runs on an
        idle context; serving shows what a step really costs). A measured row count's time moves by
        ``OBSERVE_WEIGHT`` of the difference; a row count between two measured ones moves both by
        their share of the interpolation, one beyond the table moves the last. Without that, a
        draft cap of 64 verifies 65 rows, which no measured row count matched: the 64-row time
        stayed at its idle start-up figure while the machine slowed, every 48-row time followed
        it, and 64 looked cheaper per token than it was: a run chose 65 rows over 48 although 65
        cost more per token (docs/measurements.md)."""
        t = seconds - self.t_depth_row_s * depth_rows
        predicted = self.t_out(n_rows)
        if t <= 0 or predicted <= 0:
            return
        rows, n_rows = self.rows, max(n_rows, 1)
        i = bisect.bisect_left(rows, n_rows)
        if i < len(rows) and rows[i] == n_rows:
            shares = [(i, 1.0)]
        elif i == len(rows):
            shares = [(i - 1, 1.0)]
        else:
            hi = (n_rows - rows[i - 1]) / (rows[i] - rows[i - 1])
            shares = [(i - 1, 1.0 - hi), (i, hi)]
        ts = list(self.t_rows_s)
        for j, share in shares:
            ts[j] *= 1.0 + OBSERVE_WEIGHT * share * (t / predicted - 1.0)
        self.t_rows_s = tuple(ts)

    def t_out(self, n_rows: int) -> float:
        """One sequence, ``n_rows`` output rows, at the measured depth."""
        rows, ts = self.rows, self.t_rows_s
        if n_rows <= 1:
            return ts[0]
        i = bisect.bisect_left(rows, n_rows)
        if i < len(rows) and rows[i] == n_rows:
            return ts[i]
        if len(rows) == 1:  # one measured row count: every further row as dear as the first
            return ts[0] * n_rows
        last = rows[-1]
        # rows ascend and are distinct: the last PERIOD + 1 are consecutive iff they span PERIOD
        if i == len(rows) and len(rows) > PERIOD and rows[-PERIOD - 1] == last - PERIOD:
            # beyond a dense table: the same row count modulo PERIOD in the last period, plus one
            # period's increase per period further out
            m = -(-(n_rows - last) // PERIOD)
            return self.t_out(n_rows - m * PERIOD) + m * (ts[-1] - ts[-PERIOD - 1])
        if i == len(rows):  # beyond a sparse table: the last measured slope
            i -= 1
        (r0, t0), (r1, t1) = (rows[i - 1], ts[i - 1]), (rows[i], ts[i])
        return t0 + (t1 - t0) * (n_rows - r0) / (r1 - r0)

    def step(self, n_out: int, n_seqs: int = 1, n_input: int = 0, depth_rows: float = 0.0) -> float:
        """Estimated seconds of a decode with ``n_out`` output rows over ``n_seqs`` sequences,
        ``n_input`` prompt rows, and ``depth_rows`` = sum over output rows of (their sequence's
        cached tokens - ``depth``)."""
        t = (self.t_out(n_out) + self.t_seq_s * max(n_seqs - 1, 0) + self.t_input_row_s * n_input
             + self.t_depth_row_s * depth_rows)
        return max(t, MIN_STEP_SHARE * self.t_rows_s[0])

    def ceiling(self) -> tuple[int, float]:
        """(rows, tokens/s) of a perfect drafter at one slot: every row an accepted token."""
        return max(((r, r / t) for r, t in zip(self.rows, self.t_rows_s)), key=lambda rt: rt[1])

    def to_dict(self) -> dict:
        return {**asdict(self), "rows": list(self.rows), "t_rows_s": list(self.t_rows_s)}

    @classmethod
    def from_dict(cls, d: dict) -> VerifyProfile:
        return cls(rows=tuple(int(r) for r in d["rows"]), t_rows_s=tuple(float(t) for t in d["t_rows_s"]),
                   t_seq_s=float(d["t_seq_s"]), t_input_row_s=float(d["t_input_row_s"]),
                   t_depth_row_s=float(d["t_depth_row_s"]), depth=int(d["depth"]))

    def as_props(self) -> dict:
        """For /props: milliseconds per row count, the per-sequence, prompt-row and depth terms."""
        r, tps = self.ceiling()
        return {
            "depth": self.depth,
            "rows_ms": {str(n): round(t * 1e3, 3) for n, t in zip(self.rows, self.t_rows_s)},
            "seq_ms": round(self.t_seq_s * 1e3, 3),
            "input_row_ms": round(self.t_input_row_s * 1e3, 4),
            "depth_row_us_per_1k": round(self.t_depth_row_s * 1e9, 3),
            "ceiling": {"rows": r, "tokens_per_second": round(tps, 1)},
        }
