"""Prometheus metrics with TGI's names, in a registry per app (several apps in one process do not clash).

TGI's counters carry no `_total` suffix (its Rust exporter adds none), and dashboards query those names, so
the counters here are exposed under exactly those names. Gauges are read from `engine.stats()` at scrape time.
Extensions: `tgi_kv_free_blocks` / `tgi_kv_total_blocks` (the KV pool), `tgi_request_in_flight` (the
concurrency slots taken: one per engine sequence), `tgi_prefill_tokens_total`,
`tgi_prefix_cache_hit_tokens_total` / `tgi_prefix_cache_miss_tokens_total` (tokens of admitted sequences
read from the prefix cache / computed).

Beside them, the gauges routers read from a vLLM worker, under vLLM's names and its `model_name` label:
`vllm:num_requests_running`, `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` (the fraction of KV
blocks held, 0 to 1; blocks kept only for the prefix cache count as free, as vLLM counts them) and its older
name `vllm:gpu_cache_usage_perc`, which the Gateway API Inference Extension's vLLM profile reads.

On a server of several models (`tgi.server.served_models`), every engine gauge and counter has one sample per
model loaded, labelled `model_name` (TGI's names too, unlabelled on a server of one); a model not loaded has
none. A model's counters start again from 0 when it is loaded again (Prometheus reads it as a reset).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tgi.core.request import TokenEvent
from tgi.server.service.protocol import EngineStatsLike

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


class _Counters:
    """Monotonic counters exposed without the `_total` suffix, as TGI names them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = defaultdict(float)
        self._help = {
            "tgi_request_count": "Requests received by the generation routes",
            "tgi_request_success": "Requests that completed",
            "tgi_request_failure": "Requests that failed, by error type",
        }
        self._values[("tgi_request_count", ())] = 0.0
        self._values[("tgi_request_success", ())] = 0.0

    def inc(self, name: str, **labels: str) -> None:
        with self._lock:
            self._values[(name, tuple(sorted(labels.items())))] += 1

    def value(self, name: str, **labels: str) -> float:
        return self._values.get((name, tuple(sorted(labels.items()))), 0.0)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            items = list(self._values.items())
        for name, doc in self._help.items():
            metric = Metric(name, doc, "unknown")  # exposed as `untyped`: the name stays TGI's
            for (n, labels), value in items:
                if n == name:
                    metric.add_sample(name, dict(labels), value)
            yield metric


#: (model name, its engine's stats) of each model loaded; None on a server of one model
PerModelStats = Callable[[], "list[tuple[str, EngineStatsLike]] | None"]


class _EngineGauges:
    def __init__(
        self,
        stats: Callable[[], EngineStatsLike],
        in_flight: Callable[[], int],
        model_name: Callable[[], str],
        per_model: PerModelStats,
    ) -> None:
        self._stats = stats
        self._in_flight = in_flight
        self._model_name = model_name
        self._per_model = per_model

    def collect(self) -> Iterator[Metric]:
        models = self._per_model()
        yield from self._vllm_gauges(models if models is not None else [(self._model_name(), self._stats())])
        yield GaugeMetricFamily(
            "tgi_request_in_flight",
            "Concurrency slots taken (one per engine sequence)",
            value=self._in_flight(),
        )
        if models is None:
            yield from _families(self._engine_values(self._stats()))
            return
        labelled: dict[tuple[str, str, str], list[tuple[str, float]]] = defaultdict(list)
        for model, s in models:
            for kind, name, doc, value in self._engine_values(s):
                labelled[(kind, name, doc)].append((model, value))
        for (kind, name, doc), samples in labelled.items():
            family = (GaugeMetricFamily if kind == "gauge" else CounterMetricFamily)(
                name, doc, labels=["model_name"]
            )
            for model, value in samples:
                family.add_metric([model], value)
            yield family

    @staticmethod
    def _engine_values(s: EngineStatsLike) -> Iterator[tuple[str, str, str, float]]:
        """(kind, name, help, value) of one engine's gauges and counters."""
        for name, doc, value in (
            ("tgi_batch_current_size", "Sequences in the current batch", s.num_running),
            ("tgi_batch_current_max_tokens", "Tokens in the current batch", s.num_batch_tokens),
            ("tgi_queue_size", "Requests waiting to be scheduled", s.num_waiting),
            ("tgi_kv_free_blocks", "Free KV-cache blocks", s.num_free_blocks),
            ("tgi_kv_total_blocks", "KV-cache blocks in the pool", s.num_total_blocks),
        ):
            yield "gauge", name, doc, value
        yield "counter", "tgi_prefill_tokens", "Prompt tokens run through the model", s.num_prefill_tokens
        for name, doc, value in (
            ("hit", "read from the prefix cache", s.num_prefix_cache_hit_tokens),
            ("miss", "not in the prefix cache, computed", s.num_prefix_cache_miss_tokens),
        ):
            yield "counter", f"tgi_prefix_cache_{name}_tokens", f"Tokens of admitted sequences {doc}", value
        for name, doc, value in (
            ("draft", "Draft tokens proposed and verified (--speculate)", s.num_draft_tokens),
            ("accepted", "Draft tokens accepted (each skips a decode step)", s.num_accepted_draft_tokens),
        ):
            yield "counter", f"tgi_speculative_{name}_tokens", doc, value
        for name, doc, value in (
            ("step", "Time in the model's steps (forward and sampling), s", s.step_seconds),
            ("encoder", "Time in the vision encoder, part of the steps' (images), s", s.encoder_seconds),
        ):
            yield "counter", f"tgi_{name}_seconds", doc, value

    @staticmethod
    def _vllm_gauges(models: list[tuple[str, EngineStatsLike]]) -> Iterator[Metric]:
        for name, doc, read in (
            ("vllm:num_requests_running", "Sequences in the running batch (vLLM's name)", _running),
            ("vllm:num_requests_waiting", "Requests waiting to be scheduled (vLLM's name)", _waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage, 1 is all blocks held (vLLM's name)", _usage),
            ("vllm:gpu_cache_usage_perc", "KV-cache usage, vLLM's older name", _usage),
        ):
            gauge = GaugeMetricFamily(name, doc, labels=["model_name"])
            for model, s in models:
                gauge.add_metric([model], read(s))
            yield gauge


def _running(s: EngineStatsLike) -> float:
    return s.num_running


def _waiting(s: EngineStatsLike) -> float:
    return s.num_waiting


def _usage(s: EngineStatsLike) -> float:
    return 1.0 - s.num_free_blocks / s.num_total_blocks if s.num_total_blocks else 0.0


def _families(values: Iterator[tuple[str, str, str, float]]) -> Iterator[Metric]:
    """One engine's values as unlabelled families (a server of one model)."""
    for kind, name, doc, value in values:
        yield (GaugeMetricFamily if kind == "gauge" else CounterMetricFamily)(name, doc, value=value)


class ServerMetrics:
    def __init__(
        self,
        stats: Callable[[], EngineStatsLike],
        in_flight: Callable[[], int],
        model_name: Callable[[], str] = lambda: "",
        per_model: PerModelStats = lambda: None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.counters = _Counters()
        self.registry.register(self.counters)
        self.registry.register(_EngineGauges(stats, in_flight, model_name, per_model))

        def hist(name: str, doc: str, buckets: tuple) -> Histogram:
            return Histogram(name, doc, buckets=buckets, registry=self.registry)

        self.duration = hist("tgi_request_duration", "End-to-end request time (s)", _DURATION_BUCKETS)
        self.queue = hist("tgi_request_queue_duration", "Time waiting to be scheduled (s)", _DURATION_BUCKETS)
        self.inference = hist(
            "tgi_request_inference_duration", "Time from scheduled to done (s)", _DURATION_BUCKETS
        )
        self.per_token = hist(
            "tgi_request_mean_time_per_token_duration",
            "Inference time per generated token (s)",
            _DURATION_BUCKETS,
        )
        self.input_length = hist("tgi_request_input_length", "Prompt tokens per request", _TOKEN_BUCKETS)
        self.generated = hist("tgi_request_generated_tokens", "Generated tokens per request", _TOKEN_BUCKETS)
        self.skipped = hist(
            "tgi_request_skipped_tokens", "Tokens per request accepted from speculation", _TOKEN_BUCKETS
        )

    def request_received(self) -> None:
        self.counters.inc("tgi_request_count")

    def request_failed(self, error_type: str) -> None:
        self.counters.inc("tgi_request_failure", err=error_type)

    def request_succeeded(self, duration: float) -> None:
        self.counters.inc("tgi_request_success")
        self.duration.observe(duration)

    def sequence_finished(self, final: TokenEvent) -> None:
        """One generated sequence ended (a request with `n`/`best_of` > 1 has several)."""
        generated = final.index + 1
        self.queue.observe(final.queue_time)
        self.inference.observe(final.inference_time)
        self.per_token.observe(final.inference_time / max(generated, 1))
        self.input_length.observe(final.num_prompt_tokens)
        self.generated.observe(generated)
        self.skipped.observe(final.num_skipped_tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)
