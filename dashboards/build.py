"""Write the Grafana dashboards (JSON) for slotserver's Prometheus metrics.

    python dashboards/build.py        # rewrites dashboards/slotserver-*.json

Plain dicts, no SDK: each panel is a title, a unit and a few PromQL targets. Every expression
filters on ``instance=~"$instance"`` and uses ``$__rate_interval`` windows; ratios guard their
denominator with ``> 0`` so an idle server shows "No data" instead of NaN. The panels and their
PromQL are explained in ``docs/metrics.md``; tests/metrics/test_prometheus.py evaluates every
expression against a real Prometheus scraping a real server.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEL = 'instance=~"$instance"'
W = "[$__rate_interval]"
DS = {"type": "prometheus", "uid": "${datasource}"}
DRAFT_CALL = '"draft"'


def rate(metric: str, by: str = "", extra: str = "") -> str:
    """``sum [by (...)] (rate(metric{instance, extra}[$__rate_interval]))``."""
    labels = SEL + (f", {extra}" if extra else "")
    group = f" by ({by})" if by else ""
    return f"sum{group} (rate({metric}{{{labels}}}{W}))"


def ratio(num: str, den: str) -> str:
    return f"{num} / ({den} > 0)"


def quantiles(histogram: str, extra: str = "") -> list[tuple[str, str]]:
    out = [(f"histogram_quantile({q}, {rate(histogram + '_bucket', 'le', extra)})", f"p{round(q * 100)}")
           for q in (0.5, 0.9, 0.99)]
    out.append((ratio(rate(histogram + "_sum", extra=extra), rate(histogram + "_count", extra=extra)), "mean"))
    return out


def gauge(metric: str, by: str = "") -> str:
    group = f" by ({by})" if by else ""
    return f"sum{group} ({metric}{{{SEL}}})"


class Board:
    """Lays panels out left to right on Grafana's 24-column grid."""

    def __init__(self) -> None:
        self.panels: list[dict] = []
        self.x = self.y = self.row_h = 0

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append({"type": "row", "title": title, "collapsed": False, "panels": [], "id": self._id(),
                            "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1}})
        self.y += 1

    def add(self, kind: str, title: str, targets: list[tuple[str, str]], unit: str = "short", w: int = 12,
            h: int = 8, description: str = "", **options) -> None:
        if self.x + w > 24:
            self._newline()
        panel = {
            "type": kind, "title": title, "description": description, "id": self._id(), "datasource": DS,
            "gridPos": {"x": self.x, "y": self.y, "w": w, "h": h},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": options or {"legend": {"displayMode": "list", "placement": "bottom"}},
            "targets": [{"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(65 + i)}
                        for i, (expr, legend) in enumerate(targets)],
        }
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)

    def _newline(self) -> None:
        self.y += self.row_h
        self.x = self.row_h = 0

    def _id(self) -> int:
        return len(self.panels) + 1


def variables(extra: list[dict] = ()) -> dict:
    return {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0},
        {"name": "instance", "label": "Instance", "type": "query", "datasource": DS,
         "query": {"query": "label_values(slotserver_slots, instance)", "refId": "instance"},
         "definition": "label_values(slotserver_slots, instance)", "refresh": 2, "multi": True,
         "includeAll": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"}, "hide": 0},
        *extra,
    ]}


def dashboard(uid: str, title: str, board: Board, templating: dict, description: str) -> dict:
    return {
        "uid": uid, "title": title, "description": description, "tags": ["slotserver", "llm"],
        "timezone": "browser", "schemaVersion": 39, "version": 1, "editable": True, "refresh": "10s",
        "time": {"from": "now-30m", "to": "now"}, "graphTooltip": 1, "panels": board.panels,
        "templating": templating, "annotations": {"list": []},
        "links": [{"type": "dashboards", "tags": ["slotserver"], "title": "slotserver", "asDropdown": True}],
    }


def overview() -> dict:
    b = Board()
    stat = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value", "graphMode": "area"}
    b.add("stat", "Generated tokens/s", [(rate("slotserver_generated_tokens_total"), "")], "short", 6, 4, **stat)
    b.add("stat", "Requests processing", [(gauge("slotserver_requests_processing"), "")], "short", 6, 4, **stat)
    b.add("stat", "Requests waiting", [(gauge("slotserver_requests_waiting"), "")], "short", 6, 4, **stat)
    b.add("stat", "KV cache used", [(ratio(gauge("slotserver_kv_cache_used_cells"),
                                           gauge("slotserver_kv_cache_size_cells")), "")], "percentunit", 6, 4, **stat)
    b.row("Throughput")
    b.add("timeseries", "Token throughput", [
        (rate("slotserver_prompt_tokens_total"), "prompt (decoded)"),
        (rate("slotserver_prompt_tokens_cached_total"), "prompt (from cache)"),
        (rate("slotserver_generated_tokens_total"), "generated"),
    ], "suffix: tok/s", description="Tokens per second; generated tokens count when a request ends.")
    b.add("timeseries", "HTTP requests by endpoint and outcome",
          [(rate("slotserver_http_requests_total", "endpoint, outcome"), "{{endpoint}} {{outcome}}")], "reqps")
    b.row("Latency")
    b.add("timeseries", "Request latency", quantiles("slotserver_request_duration_seconds"), "s", 8)
    b.add("timeseries", "Time to first token", quantiles("slotserver_time_to_first_token_seconds"), "s", 8)
    b.add("timeseries", "Inter-token latency", quantiles("slotserver_inter_token_latency_seconds"), "s", 8,
          description="Tokens of one verified draft arrive together (latency 0), so the median falls as "
                      "acceptance rises; compare with the mean acceptance length.")
    b.row("Queue and slots")
    b.add("timeseries", "Requests", [(gauge("slotserver_requests_processing"), "processing"),
                                     (gauge("slotserver_requests_waiting"), "waiting")], "short", 8)
    b.add("timeseries", "Slots", [(gauge("slotserver_slots_busy"), "busy"), (gauge("slotserver_slots"), "total"),
                                  (ratio(rate("slotserver_decode_slots_total"), rate("slotserver_decode_calls_total")),
                                   "mean slots per decode")], "short", 8)
    b.add("timeseries", "Prompt cache", [
        (ratio(rate("slotserver_prompt_cache_hits_total"), rate("slotserver_requests_finished_total")),
         "requests with a cache hit"),
        (ratio(rate("slotserver_prompt_tokens_cached_total"),
               f'{rate("slotserver_prompt_tokens_cached_total")} + {rate("slotserver_prompt_tokens_total")}'),
         "prompt tokens from cache"),
    ], "percentunit", 8)
    b.row("Engine")
    b.add("timeseries", "Decode", [
        (rate("slotserver_decode_calls_total"), "decode calls/s"),
        (ratio(rate("slotserver_decode_batch_tokens_sum"), rate("slotserver_decode_batch_tokens_count")),
         "tokens per decode"),
        (rate("slotserver_decode_seconds_total"), "busy share (s/s)"),
    ], "short", 8)
    b.add("timeseries", "KV cache and ngram-mod pool", [
        (ratio(gauge("slotserver_kv_cache_used_cells"), gauge("slotserver_kv_cache_size_cells")), "KV cells used"),
        (ratio(gauge("slotserver_ngram_mod_pool_used_entries"), gauge("slotserver_ngram_mod_pool_size_entries")),
         "ngram-mod pool used"),
    ], "percentunit", 8)
    b.add("timeseries", "Cache files", [
        (rate("slotserver_cache_file_saves_total", "kind"), "saves/s {{kind}}"),
        (rate("slotserver_cache_file_save_errors_total", "kind"), "errors/s {{kind}}"),
        (gauge("slotserver_cache_file_size_bytes", "kind"), "last size {{kind}} (bytes)"),
    ], "short", 8, description="Persistent cache files (ngram cache, ngram-mod pool, slots) by kind.")
    return dashboard("slotserver-overview", "slotserver / Overview", b, variables(),
                     "Throughput, latency quantiles, queue, slots and KV cache of slotserver.")


def speculative() -> dict:
    b = Board()
    impl = 'impl=~"$impl"'
    acc, drafted = "slotserver_spec_accepted_tokens_total", "slotserver_spec_draft_tokens_total"
    drafts = "slotserver_spec_drafts_total"
    stat = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value", "graphMode": "area"}
    b.add("stat", "Acceptance rate", [(ratio(rate(acc, extra=impl), rate(drafted, extra=impl)), "")],
          "percentunit", 6, 4, **stat)
    b.add("stat", "Mean acceptance length", [(f"1 + {ratio(rate(acc, extra=impl), rate(drafts, extra=impl))}", "")],
          "short", 6, 4, description="Tokens emitted per verification step: 1 sampled + the accepted draft tokens.",
          **stat)
    b.add("stat", "Output tokens from drafts", [(ratio(rate(acc, extra=impl), rate("slotserver_generated_tokens_total")),
                                                 "")], "percentunit", 6, 4, **stat)
    b.add("stat", "Accepted tokens/s", [(rate(acc, extra=impl), "")], "short", 6, 4, **stat)
    b.row("Acceptance per implementation")
    b.add("timeseries", "Acceptance rate by impl", [(ratio(rate(acc, "impl", impl), rate(drafted, "impl", impl)),
                                                     "{{impl}}")], "percentunit", 8)
    b.add("timeseries", "Mean acceptance length by impl",
          [(f"1 + {ratio(rate(acc, 'impl', impl), rate(drafts, 'impl', impl))}", "{{impl}}")], "short", 8)
    b.add("timeseries", "Drafted / accepted / rejected tokens per second", [
        (rate(drafted, "impl", impl), "drafted {{impl}}"),
        (rate(acc, "impl", impl), "accepted {{impl}}"),
        (f"{rate(drafted, 'impl', impl)} - {rate(acc, 'impl', impl)}", "rejected {{impl}}"),
    ], "short", 8)
    b.add("timeseries", "Acceptance by draft position",
          [(f"{rate('slotserver_spec_accepted_tokens_per_position_total', 'impl, position', impl)}"
            f" / on (impl) group_left () ({rate(drafts, 'impl', impl)} > 0)", "{{impl}} pos {{position}}")],
          "percentunit", 12, description="Share of drafts whose token at this position was accepted.")
    b.add("bargauge", "Acceptance by draft position (now)",
          [(f"{rate('slotserver_spec_accepted_tokens_per_position_total', 'position', impl)}"
            f" / on () group_left () ({rate(drafts, extra=impl)} > 0)", "{{position}}")],
          "percentunit", 12, displayMode="gradient", orientation="vertical",
          reduceOptions={"calcs": ["lastNotNull"]})
    b.row("Draft cost")
    dur = "slotserver_spec_call_duration_seconds"
    b.add("timeseries", "Mean drafter call duration", [
        (ratio(rate(dur + "_sum", "impl, call", impl), rate(dur + "_count", "impl, call", impl)),
         "{{impl}} {{call}}")], "s", 8)
    b.add("timeseries", "Draft call p99", [
        (f"histogram_quantile(0.99, {rate(dur + '_bucket', 'impl, le', impl + ', call=' + DRAFT_CALL)})",
         "{{impl}}")], "s", 8)
    b.add("timeseries", "Drafting time vs decode time", [
        (f"{rate(dur + '_sum', 'impl', impl)} / on () group_left () ({rate('slotserver_decode_seconds_total')} > 0)",
         "{{impl}}")], "percentunit", 8,
          description="Seconds spent in drafter calls per second of llama_decode.")
    b.add("timeseries", "Draft hit rate", [
        (ratio(rate(drafts, "impl", impl), rate("slotserver_spec_calls_total", "impl", impl + ", call=" + DRAFT_CALL)),
         "{{impl}}")], "percentunit", 8, description="Share of draft calls that returned a draft.")
    b.add("timeseries", "Inter-token latency", quantiles("slotserver_inter_token_latency_seconds"), "s", 8)
    b.add("timeseries", "ngram-mod pool", [
        (ratio(gauge("slotserver_ngram_mod_pool_used_entries"), gauge("slotserver_ngram_mod_pool_size_entries")),
         "occupancy"),
        (rate("slotserver_ngram_mod_pool_resets_total"), "resets/s"),
    ], "short", 8)
    impl_var = {"name": "impl", "label": "Drafter", "type": "query", "datasource": DS,
                "query": {"query": "label_values(slotserver_spec_drafts_total, impl)", "refId": "impl"},
                "definition": "label_values(slotserver_spec_drafts_total, impl)", "refresh": 2, "multi": True,
                "includeAll": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"}, "hide": 0}
    return dashboard("slotserver-speculative", "slotserver / Speculative decoding", b, variables([impl_var]),
                     "Draft acceptance, per-position acceptance and draft cost per drafter implementation.")


def main() -> None:
    for name, board in (("slotserver-overview.json", overview()), ("slotserver-speculative.json", speculative())):
        (HERE / name).write_text(json.dumps(board, indent=2) + "\n")
        print(f"wrote dashboards/{name}")


if __name__ == "__main__":
    main()
