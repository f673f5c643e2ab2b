"""The statistics line comes at its interval, whether events trickle in or arrive in long batches,
and says which of its figures are cumulative and which are recent."""

from __future__ import annotations

import gzip
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pegasos_stream import cli
from pegasos_stream.cli.assemble import build_runner
from pegasos_stream.cli.config import load_config
from pegasos_stream.io.records import Record, RecordBatch
from pegasos_stream.io.sources import Source
from pegasos_stream.run import runner as runner_module
from pegasos_stream.run.runner import Runner, RunStats

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
STATS = re.compile(
    r"cumulative: events=(\d+) learned=\d+ rejected=\d+( empty_bodies=\d+)? accuracy=\S+ t=\d+; "
    r"last ([\d.]+) s: events=(\d+) rate=\d+/s; last \d+ scores: roc_auc=\S+; now: pending=\d+"
    r"( members=(?:[^ :,]+:[\d.]+,?)+)?( norm=\S+)?"
)


def _stats_lines(stderr: str) -> list[tuple[int, float, int]]:
    """(cumulative events, seconds since the previous line, events in them) of each statistics line."""
    found = [STATS.fullmatch(line) for line in stderr.splitlines() if line.startswith("cumulative: ")]
    assert all(found), stderr
    return [(int(m[1]), float(m[3]), int(m[4])) for m in found if m]


def _check_intervals(lines: list[tuple[int, float, int]], interval: float, total: int) -> None:
    """At least two lines came while the events did, each ``interval`` seconds (and a little) after
    the one before, with the events processed between them."""
    cumulative = [events for events, _, _ in lines]
    assert cumulative == sorted(set(cumulative)) and len([n for n in cumulative if n < total]) >= 2, lines
    assert [events for _, _, events in lines] == [b - a for a, b in zip([0, *cumulative], cumulative)]
    for _, seconds, _ in lines:
        assert interval <= seconds < interval + 1.0, lines


class _TrickleSource(Source):
    """``count`` binary events, one a read, each read ``pause`` seconds of ``clock`` after the one before."""

    name = "trickle"

    def __init__(self, count: int, pause: float, clock: list[float]) -> None:
        self._count, self._pause, self._clock, self._read = count, pause, clock, 0

    def read(self, n: int) -> RecordBatch | None:
        if self._read == self._count:
            return None
        self._clock[0] += self._pause
        i = self._read
        self._read += 1
        event = {"id": i, "x": {"a": (i % 3) - 1.0, "b": 1.0}, "label": i % 3 == 2}
        return RecordBatch([json.dumps(event).encode()], [i], lambda cursor: f"trickle:{cursor}")


class _QuietSource(Source):
    """``count`` binary events in one read, then empty reads (an open pipe with nothing more), each ``pause``
    seconds of ``clock`` after the one before; ``reads`` counts them."""

    name = "quiet"

    def __init__(self, count: int, pause: float, clock: list[float]) -> None:
        self._count, self._pause, self._clock, self.reads = count, pause, clock, 0

    def read(self, n: int) -> RecordBatch:
        self.reads += 1
        self._clock[0] += self._pause
        if self.reads > 1:
            return RecordBatch([], [], lambda cursor: f"quiet:{cursor}")
        events = [{"id": i, "x": {"a": (i % 3) - 1.0}, "label": i % 2 == 0} for i in range(self._count)]
        return RecordBatch([json.dumps(e).encode() for e in events], list(range(self._count)), lambda c: f"quiet:{c}")


def test_a_run_stops_once_idle_for_stop_when_idle_and_not_before(caplog):
    """Reads 0.25 s of a driven clock apart: with --stop-when-idle 1, the run stops at the fourth empty read
    after the last events (1.0 s idle), not at the third (0.75 s)."""
    config = load_config(None, ["model.lambda_=0.01", "output.type=none", "evaluation.stats_every_seconds=60"])
    runner = build_runner(config)
    clock = [1000.0]
    runner.clock = lambda: clock[0]
    source = _QuietSource(5, 0.25, clock)
    with caplog.at_level(logging.INFO, logger="pegasos_stream"):
        stats = runner.run(source, stop_when_idle=1.0)
    assert (stats.events, source.reads) == (5, 1 + 4)
    assert "no event for 1 s: stopping" in [record.getMessage() for record in caplog.records]


def test_the_stats_line_comes_at_its_interval_while_events_trickle_in(caplog):
    """Events one every 0.15 s of a driven clock, a line every 0.5 s: each line comes at the first batch
    0.5 s or more after the one before, with the events processed between them."""
    config = load_config(None, ["model.lambda_=0.01", "output.type=none", "evaluation.stats_every_seconds=0.5"])
    runner = build_runner(config)
    clock = [1000.0]
    runner.clock = lambda: clock[0]
    with caplog.at_level(logging.INFO, logger="pegasos_stream"):
        stats = runner.run(_TrickleSource(16, 0.15, clock))
    assert stats.events == 16
    lines = _stats_lines("\n".join(record.getMessage() for record in caplog.records))
    assert [events for events, _, _ in lines] == [4, 8, 12, 16]  # at 0.6 s, 1.2 s, 1.8 s, 2.4 s of the clock
    _check_intervals(lines, 0.5, 16)
    assert all(seconds == pytest.approx(0.6) for _, seconds, _ in lines)


class _WorkClock:
    """A clock that only the work moves: each record the runner processes takes ``per_byte`` seconds a byte."""

    def __init__(self, per_byte: float) -> None:
        self.now, self.per_byte, self._depth = 1000.0, per_byte, 0

    def __call__(self) -> float:
        return self.now

    def charge(self, work: Callable[[Any], None]) -> Callable[[Any], None]:
        """``work`` (``process`` or ``process_many``), after which the clock moves on by the records' bytes (once
        for a record that ``process_many`` hands to ``process``)."""

        def timed(records: Record | RecordBatch) -> None:
            self._depth += 1
            try:
                work(records)
            finally:
                self._depth -= 1
            if not self._depth:
                size = len(records.value) if isinstance(records, Record) else records.nbytes()
                self.now += self.per_byte * size

        return timed


def test_the_stats_line_comes_at_its_interval_when_a_file_is_read_in_long_batches(monkeypatch, capsys, tmp_path):
    """Messages that take long to learn (here 1 ms of a driven clock for each 2 kB, about 2 ms a message: the
    Python email reader's pace): a file is read in batches, which must end in time for the line (before, one
    batch held the whole file, and no line came). The clock of the line and of the batches' pace is the work's."""
    events = tmp_path / "mail.jsonl"
    events.write_bytes(gzip.decompress(SAMPLE.read_bytes()) * 3)
    clock = _WorkClock(0.5e-6)
    run = Runner.run

    def driven_run(self: Runner, *args: Any, **kwargs: Any) -> RunStats:
        self.clock = clock
        self.process = clock.charge(self.process)  # type: ignore[method-assign]
        self.process_many = clock.charge(self.process_many)  # type: ignore[method-assign]
        return run(self, *args, **kwargs)

    monkeypatch.setattr(Runner, "run", driven_run)
    monkeypatch.setattr(runner_module, "time", SimpleNamespace(monotonic=clock, perf_counter=clock))
    args = ["eval", "--json", "--input", str(events), "--set", "features.reader=email"]
    assert cli.main([*args, "--set", "evaluation.stats_every_seconds=0.25"]) == 0
    done = capsys.readouterr()
    total = json.loads(done.out)["events"]
    assert total == 3 * 404
    assert clock.now - 1000.0 > 8 * 0.25  # (the file took 8 intervals and more)
    lines = _stats_lines(done.err)
    _check_intervals(lines, 0.25, total)
    mixture = [line for line in done.err.splitlines() if line.startswith("cumulative: ")][-1]
    assert re.search(r" empty_bodies=\d+ ", mixture) and " members=svm(1e-05)+logistic(0.7):" in mixture  # spam.yaml's
