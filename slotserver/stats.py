"""Statistics as plain data. The engine and the draft chain update these; ``metrics.py`` reads them.

Nothing here knows about Prometheus. Durations are in seconds (base units), counts are ``n_*``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

# Bucket upper bounds (seconds) shared by the duration histograms.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# Up to 50 ms for n-gram drafters, beyond for a draft model's calls (several decodes each).
DRAFT_CALL_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.25, 0.5, 1.0)
TOKENS_PER_DECODE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


@dataclass(slots=True)
class Histogram:
    """Cumulative-at-read histogram: ``counts[i]`` holds observations <= ``bounds[i]`` (non-cumulative)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # len(bounds) + 1; the last is +Inf
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, cumulative count) pairs ending with +Inf, as Prometheus exposes them."""
        out, acc = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts):
            acc += count
            out.append((bound, acc))
        return out


@dataclass(slots=True)
class DrafterStats:
    """llama.cpp's per-implementation counters (``common_speculative_impl``), one per drafter."""

    n_call_begin: int = 0
    n_call_draft: int = 0
    n_call_accept: int = 0
    n_gen_drafts: int = 0  # non-empty drafts verified (as far as the batch had room for them)
    n_acc_drafts: int = 0  # drafts with at least one accepted token
    n_gen_tokens: int = 0  # draft tokens verified
    n_acc_tokens: int = 0
    n_acc_per_pos: list[int] = field(default_factory=list)  # [i]: drafts whose token i was accepted
    n_skipped: int = 0  # drafts not verified at all: not one of their tokens was expected to pay
    t_begin_s: Histogram = field(default_factory=lambda: Histogram(DRAFT_CALL_BUCKETS))
    t_draft_s: Histogram = field(default_factory=lambda: Histogram(DRAFT_CALL_BUCKETS))
    t_accept_s: Histogram = field(default_factory=lambda: Histogram(DRAFT_CALL_BUCKETS))

    def add_accepted(self, n_accepted: int) -> None:
        self.n_call_accept += 1
        if n_accepted > 0:
            self.n_acc_drafts += 1
            self.n_acc_tokens += n_accepted
        if len(self.n_acc_per_pos) < n_accepted:
            self.n_acc_per_pos.extend([0] * (n_accepted - len(self.n_acc_per_pos)))
        for i in range(n_accepted):
            self.n_acc_per_pos[i] += 1

    def line(self, name: str) -> str:
        """The statistics line in llama.cpp's format (``common_speculative_print_stats``)."""
        n_acc = max(self.n_call_accept, 1)
        mean_len = 1 + self.n_acc_tokens / n_acc
        rates = ", ".join(f"{c / n_acc:.3f}" for c in self.n_acc_per_pos)
        return (
            f"statistics {name}: #calls(b,g,a) = {self.n_call_begin} {self.n_call_draft} "
            f"{self.n_call_accept}, #gen drafts = {self.n_gen_drafts}, #acc drafts = {self.n_acc_drafts}, "
            f"#gen tokens = {self.n_gen_tokens}, #acc tokens = {self.n_acc_tokens}, "
            f"#mean acc len = {mean_len:.3f}, #acc rate/pos = ({rates}), "
            f"dur(b,g,a) = {self.t_begin_s.total * 1e3:.3f}, {self.t_draft_s.total * 1e3:.3f}, "
            f"{self.t_accept_s.total * 1e3:.3f} ms"
        )


@dataclass(slots=True)
class FileStats:
    """Saves of one kind of persistent cache file. Call ``saved`` after a write, ``failed`` when it raised."""

    n_saves: int = 0
    n_save_errors: int = 0
    n_bytes_last: int = 0  # size of the last file saved
    n_bytes_written: int = 0  # all bytes saved so far
    t_save_s: float = 0.0  # time spent saving, all saves

    def saved(self, n_bytes: int, seconds: float) -> None:
        self.n_saves += 1
        self.n_bytes_last = n_bytes
        self.n_bytes_written += n_bytes
        self.t_save_s += seconds

    def failed(self) -> None:
        self.n_save_errors += 1


@dataclass(slots=True)
class ServerStats:
    """Server-wide counters and histograms, updated by the engine loop as events happen."""

    n_decode_calls: int = 0
    n_decode_tokens: int = 0
    t_decode_s: float = 0.0
    t_step_s: float = 0.0  # engine steps that decoded, in all (t_step_s - t_decode_s: our own overhead)
    n_prompt_tokens: int = 0  # prompt tokens decoded (not reused from the cache)
    n_prompt_tokens_cached: int = 0  # prompt tokens reused from the KV cache
    n_prompt_cache_hits: int = 0  # requests that reused at least one cached token
    n_gen_tokens: int = 0  # draft tokens verified
    n_draft_tokens: int = 0
    n_draft_accepted: int = 0
    n_verify_steps: int = 0
    n_requests_finished: int = 0
    t_prompt_s: float = 0.0
    t_gen_s: float = 0.0
    n_tokens_max: int = 0  # largest per-slot sequence length seen
    n_decode_slots: int = 0  # sum over decode calls of the slots in the batch (mean = / n_decode_calls)
    tokens_per_decode: Histogram = field(default_factory=lambda: Histogram(TOKENS_PER_DECODE_BUCKETS))
    ttft_s: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    inter_token_s: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    request_s: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    files: dict[str, FileStats] = field(default_factory=dict)  # kind -> saves of that kind of file

    def file(self, kind: str) -> FileStats:
        """The counters of one kind of persistent file (e.g. "ngram_cache", "ngram_mod_pool", "slot")."""
        return self.files.setdefault(kind, FileStats())
