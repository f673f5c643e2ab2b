"""The figures of ``serve`` for Prometheus (the ``metrics`` extra; this is the one module of serving that imports
``prometheus_client``): the requests answered by protocol and outcome and the time they took (from the access
log, `serve.access`), and, read at each scrape, the model served (its version and age), the predictions served
and the records refused, and the process's own figures."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

from ..run.metrics import PREFIX
from .serving import Serving

__all__ = ["ServeMetrics"]

#: The bounds of the request-time histogram (seconds): a message is answered in milliseconds.
BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


class ServeMetrics:
    """The metrics of ``serving``, in a registry of their own; `observe` is the access log's `RequestObserver`."""

    def __init__(self, serving: Serving) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._serving = serving
        self._requests = Counter(
            PREFIX + "serve_requests", "Requests answered", ("protocol", "outcome"), registry=self.registry
        )
        self._seconds = Histogram(
            PREFIX + "serve_request_seconds", "Time to answer a request", ("protocol",), buckets=BUCKETS,
            registry=self.registry,
        )  # fmt: skip
        self.registry.register(_ServingCollector(serving))
        ProcessCollector(registry=self.registry)

    def observe(self, protocol: str, outcome: str, seconds: float) -> None:
        self._requests.labels(protocol, outcome).inc()
        self._seconds.labels(protocol).observe(seconds)

    def start(self, host: str, port: int) -> None:
        """Serve ``/metrics`` on ``host:port`` from a daemon thread; an OSError when it cannot listen."""
        start_http_server(port, host, registry=self.registry)


class _ServingCollector:
    """The figures read from the service at each scrape."""

    def __init__(self, serving: Serving) -> None:
        self._serving = serving

    def collect(self) -> Iterator[Metric]:
        health = self._serving.health()
        yield CounterMetricFamily(PREFIX + "serve_predictions", "Predictions served", health["served"])
        yield CounterMetricFamily(PREFIX + "serve_errors", "Records and requests refused", health["errors"])
        version = health["model_version"]
        yield GaugeMetricFamily(
            PREFIX + "serve_model_version",
            "Version of the model served (-1: none yet)",
            -1 if version is None else version,
        )
        age = health.get("model_age_s")
        if age is not None:
            yield GaugeMetricFamily(
                PREFIX + "serve_model_age_seconds", "Seconds since the model served was written", age
            )
