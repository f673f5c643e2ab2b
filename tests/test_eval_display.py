"""What ``eval`` shows besides its metrics: the progress bar on a terminal, with the log lines above it, and the
learning curve of ``--plot`` at any length of run."""

from __future__ import annotations

import gzip
import io
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from pegasos_stream import cli
from pegasos_stream.cli.plot import error_curves, learning_curve
from pegasos_stream.run.evaluation import BinaryReport

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "pegasos_stream" / "data" / "spam-sample.jsonl.gz"
PNG = b"\x89PNG\r\n\x1a\n"

#: A statistics line written from the start of a terminal line, and the bar tqdm redraws right below it.
LINE_THEN_BAR = re.compile(r"(?:^|[\r\n])cumulative: events=(\d+) [^\r\n]*\n\r([^\r\n]*)")
BAR = re.compile(r" *(\d+)%\|[^|]*\| (\d+) events, [\d.,]+/[\d.,]+ MiB \[")


class _Terminal(io.StringIO):
    """Standard error as a terminal: what is written to it, kept."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def mail(tmp_path: Path) -> Path:
    """The bundled sample three times over: 1,212 messages as JSON text events."""
    path = tmp_path / "mail.jsonl"
    path.write_bytes(gzip.decompress(SAMPLE.read_bytes()) * 3)
    return path


# -- the progress bar ------------------------------------------------------------------------------------


def test_on_a_terminal_each_statistics_line_goes_above_the_bar_which_counts_its_events(mail, monkeypatch, capsys):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    args = ["eval", "--json", "--input", str(mail), "--set", "evaluation.stats_every_seconds=0"]  # a line a batch
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out)["events"] == 1212
    shown = terminal.getvalue()
    pairs = [(int(events), BAR.match(bar)) for events, bar in LINE_THEN_BAR.findall(shown)]
    assert len(pairs) >= 2 and len(pairs) == shown.count("cumulative: "), shown[-2000:]
    assert all(bar is not None and int(bar[2]) == events for events, bar in pairs), shown[-2000:]
    last_bar = BAR.match(shown.rstrip("\n").rsplit("\r", 1)[-1])
    assert last_bar is not None and (last_bar[1], last_bar[2]) == ("100", "1212") and shown.endswith("\n")


def test_off_a_terminal_there_is_no_bar(mail, capsys):
    assert cli.main(["eval", "--json", "--input", str(mail), "--set", "evaluation.stats_every_seconds=0"]) == 0
    err = capsys.readouterr().err
    assert "cumulative: events=" in err and "\r" not in err and "%|" not in err


# -- the learning curve ----------------------------------------------------------------------------------


def _report(n: int, seed: int = 0) -> BinaryReport:
    """A report of ``n`` predictions that grow more often right."""
    rng = np.random.default_rng(seed)
    positives = rng.random(n) < 0.4
    right = rng.random(n) < np.linspace(0.5, 0.99, n)
    report = BinaryReport()
    report.update_many(positives, np.where(positives == right, 1.0, -1.0))
    return report


@pytest.mark.parametrize("n, window", [(1000, 100), (404, 40), (25, 2), (3, 1), (0, 1)])
def test_the_recent_window_follows_the_length_of_the_run(n, window):
    report = _report(n)
    errors = (report.scores > 0) != report.positives
    curves = error_curves(report.scores, report.positives)
    assert curves.window == window and len(curves.cumulative) == n and len(curves.recent) == max(0, n - window + 1)
    assert np.allclose(curves.cumulative, [errors[: i + 1].mean() for i in range(n)])
    assert np.allclose(curves.recent, [errors[i + 1 - window : i + 1].mean() for i in range(window - 1, n)])


def test_the_learning_curve_has_a_title_labelled_axes_and_two_curves():
    figure = learning_curve(_report(1000), "spam")
    [axes] = figure.axes
    assert axes.get_title() == "spam: prequential error rate, 1,000 examples"
    assert axes.get_xlabel().startswith("examples") and axes.get_ylabel() == "error rate"
    cumulative, recent = axes.get_lines()
    assert (cumulative.get_label(), recent.get_label()) == ("cumulative", "last 100 examples")
    assert len(cumulative.get_xdata()) == 1000 and recent.get_xdata()[0] == 100
    assert not np.allclose(cumulative.get_ydata()[99:], recent.get_ydata())


@pytest.mark.parametrize("events, name", [(1000, "curve.png"), (30, "curve")])
def test_eval_plot_writes_the_curve_of_a_long_or_a_short_run(mail, tmp_path, capsys, events, name):
    """At the path given, a PNG even without the name saying so."""
    curve = tmp_path / name
    assert cli.main(["eval", "--json", "--input", str(mail), "--max-events", str(events), "--plot", str(curve)]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == events
    assert curve.read_bytes()[:8] == PNG


@pytest.mark.parametrize(
    "config, plot, refusal",
    [
        ({"model": {"kind": "multiclass"}}, "curve.png", "--plot draws a binary learner's error rate"),
        ({}, "curve.docx", "--plot {plot}: not an image format matplotlib writes (avif, eps,"),
    ],
    ids=["multiclass", "format"],
)
def test_a_plot_that_cannot_be_drawn_is_refused_before_the_replay(tmp_path, capsys, config, plot, refusal):
    job = tmp_path / "job.yaml"
    job.write_text(json.dumps({"features": {"type": "dict"}, **config}), encoding="utf-8")
    events = tmp_path / "events.jsonl"
    events.write_text('{"id": 1, "x": {"a": 1.0}, "label": true}\n', encoding="utf-8")
    path = tmp_path / plot
    assert cli.main(["eval", "--config", str(job), "--input", str(events), "--plot", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: " + refusal.format(plot=path)) and captured.out == ""
    assert not path.exists()
