"""Prometheus adapter: the plain statistics of ``stats.py`` as metric families, read at scrape time.

Each application owns one ``CollectorRegistry`` (``setup_metrics``). ``StatsCollector`` reads
``ServerStats``, the draft chain's ``DrafterStats``, the slots, the waiting queue and the ngram-mod
pool only when Prometheus scrapes; nothing is mirrored into gauges. A scrape runs on the event loop
and reads plain attributes, so it never waits for the engine thread (which releases the GIL inside
``llama_decode``). HTTP requests are counted by ``count_requests``, the only place with a regular
prometheus ``Counter``: it is HTTP-level and has no engine stats to read.

Raw counters only; ratios (acceptance rate, mean acceptance length, ...) are PromQL in
``dashboards/`` and ``docs/metrics.md``. Names: prefix ``slotserver_``, base units, ``_total`` on
counters, no ``_created`` series.
"""

from __future__ import annotations

import time
from typing import Iterable, Iterator

import prometheus_client
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from slotserver.api.metrics_llamacpp import LlamaCppCollector
from slotserver.api.state import METRICS, STATE, Metrics, State
from slotserver.engine.verify_costs import VerifyProfile
from slotserver.serving.runner import Runner
from slotserver.speculation.chain import DraftChain
from slotserver.speculation.draft_model import DraftModelStats
from slotserver.stats import FileStats, Histogram

P = "slotserver_"


def histogram(name: str, doc: str, labels: Iterable[str], items: Iterable[tuple[list[str], Histogram]]) -> Metric:
    fam = HistogramMetricFamily(name, doc, labels=list(labels))
    for values, h in items:
        # _count is taken from the +Inf bucket, so a scrape racing an observe() stays self-consistent.
        fam.add_metric(values, [(floatToGoString(b), c) for b, c in h.cumulative()], sum_value=h.total)
    return fam


def server_families(runner: Runner) -> Iterator[Metric]:
    st = runner.stats
    n_busy = runner.n_busy
    yield GaugeMetricFamily(P + "requests_processing", "Requests holding a slot (prompt or generation).", n_busy)
    yield GaugeMetricFamily(P + "requests_waiting", "Requests queued for a free slot.", len(runner.waiting))
    yield GaugeMetricFamily(P + "slots", "Slots (concurrent sequences) configured.", len(runner.slots))
    yield GaugeMetricFamily(P + "slots_busy", "Slots not idle.", n_busy)
    yield CounterMetricFamily(P + "requests_finished_total", "Completion requests finished by the engine.",
                              st.n_requests_finished)
    yield CounterMetricFamily(P + "prompt_tokens_total", "Prompt tokens decoded (not reused from the KV cache).",
                              st.n_prompt_tokens)
    yield CounterMetricFamily(P + "prompt_tokens_cached_total", "Prompt tokens reused from a slot's KV cache.",
                              st.n_prompt_tokens_cached)
    yield CounterMetricFamily(P + "prompt_cache_hits_total", "Requests that reused at least one cached prompt token.",
                              st.n_prompt_cache_hits)
    yield CounterMetricFamily(P + "prompt_seconds_total", "Time from slot start to the end of prompt processing.",
                              st.t_prompt_s)
    yield CounterMetricFamily(P + "generated_tokens_total", "Tokens generated, counted when a request finishes.",
                              st.n_gen_tokens)
    yield CounterMetricFamily(P + "generation_seconds_total", "Time from the end of the prompt to the last token.",
                              st.t_gen_s)
    yield histogram(P + "time_to_first_token_seconds", "Time from arrival to the first generated token.",
                    [], [([], st.ttft_s)])
    yield histogram(P + "inter_token_latency_seconds",
                    "Time between consecutive output tokens (0 for tokens of the same verified draft).",
                    [], [([], st.inter_token_s)])
    yield histogram(P + "request_duration_seconds", "Time from arrival to the end of a completion request.",
                    [], [([], st.request_s)])
    yield CounterMetricFamily(P + "decode_calls_total", "llama_decode calls of the target model.", st.n_decode_calls)
    yield CounterMetricFamily(P + "decode_seconds_total", "Time spent in llama_decode.", st.t_decode_s)
    yield CounterMetricFamily(P + "step_seconds_total", "Time of engine steps that decoded, llama_decode included.",
                              st.t_step_s)
    yield CounterMetricFamily(P + "decode_slots_total", "Slots in each decode batch, summed over decode calls.",
                              st.n_decode_slots)
    yield histogram(P + "decode_batch_tokens", "Tokens per llama_decode call (prompt chunks, sampled and drafts).",
                    [], [([], st.tokens_per_decode)])
    yield GaugeMetricFamily(P + "sequence_tokens_max", "Longest sequence a slot held when a request finished.",
                            st.n_tokens_max)
    yield GaugeMetricFamily(P + "kv_cache_used_cells", "KV cache cells held by the slots (tokens cached).",
                            sum(len(s.cache) for s in runner.slots))
    yield GaugeMetricFamily(P + "kv_cache_size_cells", "KV cache cells in the context (shared by all slots).",
                            runner.engine.n_ctx)
    yield GaugeMetricFamily(P + "engine_stalled", "1 while one engine step has run past --step-timeout "
                            "(/health and new requests answer 503), else 0.", 1 if runner.watchdog.stall() else 0)
    yield CounterMetricFamily(P + "engine_stalls_total", "Engine steps that ran past --step-timeout (incidents).",
                              runner.watchdog.n_stalls)


def structure_families(chain: DraftChain) -> Iterator[Metric]:
    """The size of the drafters' learned structures: the ngram-mod pool and the suffix store."""
    for name, drafter in chain.drafters:
        if name == "ngram-mod":
            pool = drafter.pool
            yield GaugeMetricFamily(P + "ngram_mod_pool_used_entries", "Occupied entries of the ngram-mod hash pool.",
                                    pool.n_used)
            yield GaugeMetricFamily(P + "ngram_mod_pool_size_entries", "Entries of the ngram-mod hash pool.", pool.size)
            yield CounterMetricFamily(P + "ngram_mod_pool_resets_total", "Resets of the ngram-mod hash pool.",
                                      drafter.n_resets)
        elif name == "suffix":
            store = drafter.store
            yield GaugeMetricFamily(P + "suffix_store_requests", "Finished requests held by the suffix drafter's "
                                    "global structure.", len(store.lengths))
            yield GaugeMetricFamily(P + "suffix_store_tokens", "Tokens held by the suffix drafter's global structure.",
                                    store.n_tokens)
            yield GaugeMetricFamily(P + "suffix_store_bytes", "Memory of the suffix drafter's global structure "
                                    "(bounded by --spec-suffix-max-mb).", store.memory_bytes)


def profile_families(profile: VerifyProfile) -> Iterator[Metric]:
    """The verify-cost profile the server selects drafts under (calibrate.py), as measured."""
    fam = GaugeMetricFamily(P + "verify_cost_seconds", "Measured llama_decode time of one sequence with this many "
                            "output rows (the verify-cost profile).", labels=["rows"])
    for n, t in zip(profile.rows, profile.t_rows_s):
        fam.add_metric([str(n)], t)
    yield fam
    yield GaugeMetricFamily(P + "verify_cost_sequence_seconds", "Measured cost of each further sequence in a decode.",
                            profile.t_seq_s)


def drafter_families(chain: DraftChain) -> Iterator[Metric]:
    """Per drafter implementation (label ``impl``), llama.cpp's ``common_speculative_impl`` counters."""
    stats = list(chain.stats.items())
    calls = CounterMetricFamily(P + "spec_calls_total", "Drafter calls by kind (begin, draft, accept).",
                                labels=["impl", "call"])
    plain = {
        "spec_drafts_total": ("Non-empty drafts handed to verification.", "n_gen_drafts"),
        "spec_drafts_accepted_total": ("Drafts with at least one accepted token.", "n_acc_drafts"),
        "spec_draft_tokens_total": ("Draft tokens handed to verification.", "n_gen_tokens"),
        "spec_accepted_tokens_total": ("Draft tokens accepted by verification.", "n_acc_tokens"),
        "spec_skipped_calls_total": ("Drafts not verified at all: not one token was expected to pay.", "n_skipped"),
    }
    families = {name: CounterMetricFamily(P + name, doc, labels=["impl"]) for name, (doc, _) in plain.items()}
    per_pos = CounterMetricFamily(P + "spec_accepted_tokens_per_position_total",
                                  "Drafts whose token at this position (0-based) was accepted.",
                                  labels=["impl", "position"])
    for impl, st in stats:
        for call, n in (("begin", st.n_call_begin), ("draft", st.n_call_draft), ("accept", st.n_call_accept)):
            calls.add_metric([impl, call], n)
        for name, (_, attr) in plain.items():
            families[name].add_metric([impl], getattr(st, attr))
        for pos, n in enumerate(list(st.n_acc_per_pos)):
            per_pos.add_metric([impl, str(pos)], n)
    yield calls
    yield from families.values()
    yield per_pos
    yield histogram(P + "spec_call_duration_seconds", "Duration of drafter calls by kind.", ["impl", "call"], [
        ([impl, call], h) for impl, st in stats
        for call, h in (("begin", st.t_begin_s), ("draft", st.t_draft_s), ("accept", st.t_accept_s))])


def draft_model_families(stats: DraftModelStats) -> Iterator[Metric]:
    """The draft model's own decodes (its drafts are counted under ``impl="draft-simple"`` above)."""
    yield CounterMetricFamily(P + "draft_model_decode_calls_total", "llama_decode calls of the draft model.",
                              stats.n_decodes)
    yield CounterMetricFamily(P + "draft_model_decode_seconds_total", "Time spent in the draft model's llama_decode.",
                              stats.t_decode_s)
    yield CounterMetricFamily(P + "draft_model_decode_tokens_total",
                              "Tokens the draft model decoded (mirrored prompts, catch-up, drafted).", stats.n_tokens)
    yield CounterMetricFamily(P + "draft_model_failures_total",
                              "Draft-model decodes that failed (that step had no draft-model drafts).", stats.n_failures)
    yield histogram(P + "draft_model_batch_slots", "Slots in each draft-model llama_decode (drafting slots batched).",
                    [], [([], stats.batch_slots)])


def file_families(files: dict[str, FileStats]) -> Iterator[Metric]:
    """Persistent cache files by kind (label ``kind``); a kind appears after its first save attempt."""
    items = list(files.items())
    specs = (
        (CounterMetricFamily, "cache_file_saves_total", "Cache files saved.", "n_saves"),
        (CounterMetricFamily, "cache_file_save_errors_total", "Cache file saves that failed.", "n_save_errors"),
        (GaugeMetricFamily, "cache_file_size_bytes", "Size of the last cache file saved.", "n_bytes_last"),
        (CounterMetricFamily, "cache_file_written_bytes_total", "Bytes of cache files saved.", "n_bytes_written"),
        (CounterMetricFamily, "cache_file_save_seconds_total", "Time spent saving cache files.", "t_save_s"),
    )
    for family, name, doc, attr in specs:
        fam = family(P + name, doc, labels=["kind"])
        for kind, fs in items:
            fam.add_metric([kind], getattr(fs, attr))
        yield fam


class StatsCollector(Collector):
    """Reads the live stats when scraped; yields nothing while the model is loading."""

    def __init__(self, state: State) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        runner = self.state.runner
        if runner is None:
            return
        yield from server_families(runner)
        yield from drafter_families(runner.chain)
        yield from structure_families(runner.chain)
        if runner.chain.profile is not None:
            yield from profile_families(runner.chain.profile)
        if runner.model_drafter is not None:
            yield from draft_model_families(runner.model_drafter.stats)
        yield from file_families(runner.stats.files)


def outcome(status: int) -> str:
    return "success" if status < 400 else "client_error" if status < 500 else "server_error"


def count_requests(counter: Counter):
    """Middleware counting HTTP requests by route (``endpoint``) and ``outcome``.

    Installed outermost, so it sees the status after the error middleware's translation; a
    request whose handler was cancelled (client gone) counts as ``cancelled``.
    """

    @web.middleware
    async def middleware(request: web.Request, handler):
        result = "cancelled"
        try:
            response = await handler(request)
            result = outcome(response.status)
            return response
        except web.HTTPException as exc:
            result = outcome(exc.status)
            raise
        except Exception:
            result = "server_error"
            raise
        finally:
            resource = request.match_info.route.resource
            counter.labels(resource.canonical if resource is not None else "other", result).inc()

    return middleware


async def metrics_handler(request: web.Request) -> web.Response:
    """GET /metrics in the Prometheus text format 0.0.4, as llama-server serves it.

    Not ``make_aiohttp_handler``: its content negotiation answers Prometheus (which asks for
    OpenMetrics first) with prometheus_client's OpenMetrics encoder, and that encoder (0.26)
    rewrites ``:`` to ``_`` in sample names but not in ``# HELP``/``# TYPE``, which breaks the
    ``llamacpp:*`` names. The classic text format keeps them.
    """
    metrics = request.app[METRICS]
    response = web.Response(body=generate_latest(metrics.registry), headers={
        "Content-Type": CONTENT_TYPE_PLAIN_0_0_4, "Process-Start-Time-Unix": str(int(metrics.t_start))})
    response.enable_compression()
    return response


def setup_metrics(app: web.Application):
    """One registry for this application with the families of ``--metrics-series``: slotserver's
    (stats collector and HTTP counter) and llama-server's ``llamacpp:*`` (both by default).

    Returns the GET /metrics handler, which ``setup_routes`` registers with the other routes.
    """
    state = app[STATE]
    series = state.config.metrics_series
    prometheus_client.disable_created_metrics()
    registry = CollectorRegistry(auto_describe=False)
    if "slotserver" in series:
        registry.register(StatsCollector(state))
        http = Counter(P + "http_requests", "HTTP requests by route and outcome.", ["endpoint", "outcome"],
                       registry=registry)
        app.middlewares.insert(0, count_requests(http))
    if "llamacpp" in series:
        registry.register(LlamaCppCollector(state))
    app[METRICS] = Metrics(registry, time.time())
    return metrics_handler
