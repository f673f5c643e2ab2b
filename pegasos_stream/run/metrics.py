"""The figures of a run for Prometheus: its text format, served over HTTP by ``prometheus_client`` (the
``metrics`` extra).

Counts are read from the runner when a scrape asks for them, so the loop pays nothing for them. The
figures that take work (the rate, the recent ROC AUC and error ratio, the Kafka lag per partition) are
worked out in the runner's thread by ``tick``, every ``REFRESH_SECONDS`` and when the stream falls
idle, and a scrape reads the last ones. Each run has a registry of its own, so that several runs in
one process do not collide.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

from .evaluation import BinaryReport, roc_auc

if TYPE_CHECKING:
    from ..io.sources import Source
    from ..persist.checkpoint import Checkpoints
    from .runner import Runner

__all__ = ["PREFIX", "RATE_WINDOW_SECONDS", "REFRESH_SECONDS", "RunMetrics"]

#: The prefix of every metric of a run (the process's own, ``process_*``, come without it).
PREFIX = "pegasos_stream_"
#: How often the figures that take work are worked out again, besides when the stream falls idle.
REFRESH_SECONDS = 5.0
#: The seconds ``events_per_second`` covers.
RATE_WINDOW_SECONDS = 60.0
#: Why a record is rejected (see `RunMonitor.rejected`).
REJECTION_REASONS = ("malformed", "refused")

_log = logging.getLogger(__name__)


class RunMetrics:
    """The metrics of one run: the runner's `RunMonitor`, and the collector of a registry of its own.

    The counters count from the moment the metrics are made: a resumed run starts them at 0 again,
    as Prometheus expects of a new process, whatever its checkpoint counted.

    Parameters
    ----------
    runner
        The run to watch; set its ``monitor`` to this object.
    source
        Its source, for the Kafka lag per partition (`Source.partition_lags`).
    checkpoints
        Its checkpoints, if it writes any: their age and the pause of the last one.
    recent
        The recent ROC AUC and error ratio cover the last ``recent`` scores of a binary report (the
        window of the statistics line).
    clock
        Seconds, for the rate and the refreshes.

    """

    def __init__(
        self,
        runner: Runner,
        source: Source,
        checkpoints: Checkpoints | None = None,
        recent: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._runner = runner
        self._source = source
        self._checkpoints = checkpoints
        self._recent_window = recent
        self._clock = clock
        stats = runner.stats
        self._counted_before = (stats.events, stats.predicted, stats.learned)
        self._empty_bodies_before = runner.empty_bodies
        self._rejected = dict.fromkeys(REJECTION_REASONS, 0)
        now = clock()
        self._samples: deque[tuple[float, int]] = deque([(now, stats.events)])  # (time, events) at refreshes
        self._next_refresh = now
        self._refreshed_events = stats.events
        # worked out by _refresh; a scrape reads them from another thread, and they are replaced, never changed
        self._rate = math.nan
        self._recent: tuple[int, float, float] | None = None  # (examples, ROC AUC, error ratio)
        self._lags: dict[tuple[str, int], int] = {}
        self._members: dict[str, float] | None = None
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.registry.register(self)
        ProcessCollector(registry=self.registry)

    # -- serving -----------------------------------------------------------------------------

    def start(self, host: str, port: int) -> None:
        """Serve ``http://host:port/metrics`` from a daemon thread until ``close``; an OSError when
        the address cannot be listened on."""
        self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        _log.info("metrics on http://%s:%d/metrics", f"[{host}]" if ":" in host else host, port)

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is None or self._thread is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self._server = self._thread = None

    # -- the runner's calls (RunMonitor) -----------------------------------------------------

    def tick(self, idle: bool) -> None:
        """Work the figures out again when they are due, or when the stream fell idle after records."""
        now = self._clock()
        if now >= self._next_refresh or (idle and self._runner.stats.events != self._refreshed_events):
            self._refresh(now)

    def rejected(self, reason: str) -> None:
        """Count a rejection under its reason."""
        self._rejected[reason] += 1

    def _refresh(self, now: float) -> None:
        events = self._runner.stats.events
        samples = self._samples
        samples.append((now, events))
        while len(samples) > 1 and samples[1][0] <= now - RATE_WINDOW_SECONDS:
            samples.popleft()
        since, counted = samples[0]
        self._rate = (events - counted) / (now - since) if now > since else math.nan
        report = self._runner.report
        if isinstance(report, BinaryReport):
            self._recent = _recent_figures(report, self._recent_window)
        self._lags = self._source.partition_lags()
        self._members = getattr(self._runner.model, "member_weights", None)
        self._refreshed_events = events
        self._next_refresh = now + REFRESH_SECONDS

    # -- the collector (called by a scrape, in the server's thread) --------------------------

    def collect(self) -> Iterator[Metric]:
        """The metrics as a scrape finds them."""
        stats = self._runner.stats
        events, predicted, learned = self._counted_before
        yield CounterMetricFamily(
            PREFIX + "events",
            "Records processed: events, label-only events and rejected records",
            stats.events - events,
        )
        yield CounterMetricFamily(PREFIX + "predictions", "Events predicted", stats.predicted - predicted)
        yield CounterMetricFamily(PREFIX + "learned", "Labelled examples learned", stats.learned - learned)
        rejected = CounterMetricFamily(
            PREFIX + "rejected",
            "Records rejected: malformed (not an event) or refused (the learner refused a label or a value)",
            labels=["reason"],
        )
        for reason, count in self._rejected.items():
            rejected.add_metric([reason], count)
        yield rejected
        yield CounterMetricFamily(
            PREFIX + "empty_bodies",
            "Messages that kept no body text: headers only, attachments only, or empty",
            self._runner.empty_bodies - self._empty_bodies_before,
        )
        yield GaugeMetricFamily(
            PREFIX + "pending_labels", "Predicted examples waiting for their label", len(self._runner.pending)
        )
        yield GaugeMetricFamily(
            PREFIX + "events_per_second",
            f"Records processed per second over the last {RATE_WINDOW_SECONDS:g} s",
            self._rate,
        )
        if self._recent is not None:
            examples, auc, error_ratio = self._recent
            window = f"the last {self._recent_window} examples learned"
            yield GaugeMetricFamily(
                PREFIX + "recent_examples", f"Examples the recent figures cover ({window})", examples
            )
            yield GaugeMetricFamily(PREFIX + "recent_roc_auc", f"Prequential ROC AUC over {window}", auc)
            yield GaugeMetricFamily(PREFIX + "recent_error_ratio", f"Prequential error rate over {window}", error_ratio)
        members = self._members
        if members:
            family = GaugeMetricFamily(
                PREFIX + "member_weight",
                "Each member's weight in a mixture's next prediction (from its prequential log loss)",
                labels=["member"],
            )
            for name, weight in members.items():
                family.add_metric([name], weight)
            yield family
        lags = self._lags
        if lags:
            family = GaugeMetricFamily(
                PREFIX + "kafka_lag_records",
                "Records after the last one processed, by partition (the high watermark less the next offset)",
                labels=["topic", "partition"],
            )
            for (topic, partition), lag in sorted(lags.items()):
                family.add_metric([topic, str(partition)], lag)
            yield family
        if self._checkpoints is not None:
            yield GaugeMetricFamily(
                PREFIX + "checkpoint_age_seconds",
                "Seconds since the last checkpoint was written (since the run started, before the first)",
                self._checkpoints.age,
            )
            pauses = self._checkpoints.pauses
            yield GaugeMetricFamily(
                PREFIX + "checkpoint_pause_seconds",
                "Seconds the last checkpoint held the run (writing it)",
                pauses[-1] if pauses else math.nan,
            )


def _recent_figures(report: BinaryReport, last: int) -> tuple[int, float, float]:
    """(examples, ROC AUC, error ratio) of the last ``last`` scores ``report`` keeps (nan without examples)."""
    scores, positives = report.scores[-last:], report.positives[-last:]
    if not len(scores):
        return 0, math.nan, math.nan
    errors = int(np.count_nonzero((scores > 0.0) != positives))
    return len(scores), roc_auc(scores, positives), errors / len(scores)
