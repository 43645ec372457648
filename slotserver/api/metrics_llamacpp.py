"""llama-server's ``llamacpp:*`` series (exported by default), so its dashboards work unchanged.

Same names, help texts and meanings as llama.cpp's ``server_task_result_metrics::to_metrics``
(digest §5.11), computed from the same plain stats as ``metrics.py``. The colon breaks Prometheus'
naming rule for exporters; it is kept on purpose, for parity. prometheus_client writes colon names
verbatim in the text format 0.0.4 that ``metrics_handler`` always serves, so ordinary metric
families do; nothing is rendered by hand.

Deviations: ``n_tokens_max`` is a high-water mark, typed gauge here (llama.cpp says counter, which
would make prometheus_client append ``_total`` to its name). As in llama.cpp, the two throughput
gauges cover the interval since the previous scrape, so two scrapers see different values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from slotserver.api.state import State
from slotserver.stats import ServerStats

P = "llamacpp:"


@dataclass(slots=True)
class Bucket:
    """What the per-scrape throughput gauges are computed against (llama.cpp resets it each scrape)."""

    n_prompt_tokens: int = 0
    t_prompt_s: float = 0.0
    n_gen_steps: int = 0
    t_gen_s: float = 0.0


def gen_steps(st: ServerStats) -> int:
    """Generated tokens less the first of each request (it comes with the prompt), as llama.cpp counts."""
    return max(st.n_gen_tokens - st.n_requests_finished, 0)


class LlamaCppCollector(Collector):
    def __init__(self, state: State) -> None:
        self.state = state
        self.last = Bucket()

    def collect(self) -> Iterator[Metric]:
        runner = self.state.runner
        if runner is None:
            return
        st = runner.stats
        now = Bucket(st.n_prompt_tokens, st.t_prompt_s, gen_steps(st), st.t_gen_s)
        prev, self.last = self.last, now
        d_prompt_s, d_gen_s = now.t_prompt_s - prev.t_prompt_s, now.t_gen_s - prev.t_gen_s
        counters = (
            ("prompt_tokens_total", "Number of prompt tokens processed.", st.n_prompt_tokens),
            ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache.", st.n_prompt_tokens_cached),
            ("prompt_seconds_total", "Prompt process time", st.t_prompt_s),
            ("tokens_predicted_total", "Number of generation tokens processed.", st.n_gen_tokens),
            ("tokens_predicted_seconds_total", "Predict process time", st.t_gen_s),
            ("n_decode_total", "Total number of llama_decode() calls", st.n_decode_calls),
            ("spec_decode_num_draft_tokens_total", "Total number of speculative draft tokens generated.",
             st.n_draft_tokens),
            ("spec_decode_num_accepted_tokens_total", "Total number of speculative draft tokens accepted.",
             st.n_draft_accepted),
            ("spec_decode_num_drafts_total", "Total number of speculative decoding drafts.", st.n_verify_steps),
        )
        for name, doc, value in counters:
            yield CounterMetricFamily(P + name, doc, value)
        n_busy = runner.n_busy
        gauges = (
            ("n_tokens_max", "Largest observed n_tokens.", st.n_tokens_max),
            ("prompt_tokens_seconds", "Average prompt throughput in tokens/s.",
             (now.n_prompt_tokens - prev.n_prompt_tokens) / d_prompt_s if d_prompt_s > 0 else 0.0),
            ("predicted_tokens_seconds", "Average generation throughput in tokens/s.",
             (now.n_gen_steps - prev.n_gen_steps) / d_gen_s if d_gen_s > 0 else 0.0),
            ("requests_processing", "Number of requests processing.", n_busy),
            ("requests_deferred", "Number of requests deferred.", len(runner.waiting)),
            ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
             st.n_decode_slots / max(st.n_decode_calls, 1)),
        )
        for name, doc, value in gauges:
            yield GaugeMetricFamily(P + name, doc, value)
        per_pos: list[int] = []
        for ds in list(runner.chain.stats.values()):
            for i, n in enumerate(list(ds.n_acc_per_pos)):
                if i == len(per_pos):
                    per_pos.append(0)
                per_pos[i] += n
        if per_pos:  # llama.cpp omits the block until a draft token was accepted
            fam = CounterMetricFamily(P + "spec_decode_num_accepted_tokens_per_pos_total",
                                      "Total number of accepted tokens per draft position.", labels=["position"])
            for i, n in enumerate(per_pos):
                fam.add_metric([str(i)], n)
            yield fam
