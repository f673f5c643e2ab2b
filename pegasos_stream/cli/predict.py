"""``pegasos-stream predict``: score messages or events with a trained model, which is left unchanged.

The model and its configuration come from a checkpoint of ``run`` (the features are rebuilt from the
configuration). An input is one RFC 822 message (a file, or ``-`` for standard input), or a file of
events as ``run`` reads them (the configuration's ``source`` settings: format, field names, labels);
by default a name ending in one of ``EVENT_SUFFIXES`` (each also with ``.gz``) holds events and any
other name one message, ``--format`` decides for every input. Each prediction is one JSON line on
standard output, as ``run`` writes it (`run.predictions`), with the message's name, or the event's
id, as its id.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from ..features import EmailFeatures
from ..io.records import Record
from ..io.sinks import JsonLinesSink
from ..io.sources import FileSource, Source, SourceError, StdinSource
from ..parse.parsing import Event, EventParser
from ..persist.checkpoint import CheckpointError, latest_valid, read_checkpoint
from ..run.predictions import Predictor, prediction_output, record_features
from ..run.rejections import rejection_reason
from . import options
from .assemble import build_parser, build_predictor
from .checks import StartupError
from .config import validate, without_paths
from .settings import JobSettings

__all__ = ["EVENT_SUFFIXES", "command_predict", "input_format", "load_model", "stored_config"]

#: Names of files of events (each also with ``.gz``); any other name is one message.
EVENT_SUFFIXES = (".jsonl", ".ndjson", ".json", ".svm", ".svmlight", ".libsvm")

#: The id and the position of a message read from standard input.
STDIN_NAME = "<stdin>"

_log = logging.getLogger(__name__)


def load_model(path: str | Path, key: bytes | None = None) -> tuple[Any, JobSettings]:
    """The learner and the settings of the validated configuration of a checkpoint of ``run`` (``path`` a file, or
    a directory for its newest valid checkpoint; with ``key``, signed with it), less the paths it names
    (`without_paths`: a checkpoint's paths are never opened); a StartupError saying why there is none."""
    path = Path(path)
    try:
        if path.is_dir():
            found = latest_valid(path, key=key)
            if found is None:
                raise StartupError(f"--model {path}: no valid checkpoint in the directory")
            path, state, manifest = found
        else:
            state, manifest = read_checkpoint(path, key)
    except CheckpointError as error:
        raise StartupError(f"--model {error}") from None
    config = validate(without_paths(stored_config(path, manifest)), f"{path}: its configuration")
    return state["model"], JobSettings.from_config(config)


def stored_config(path: str | Path, manifest: dict) -> dict:
    """The configuration the manifest of checkpoint ``path`` holds; a StartupError when it holds none."""
    config = manifest.get("config")
    if not isinstance(config, dict):
        raise StartupError(
            f"--model {path}: holds no configuration (a learner saved on its own, not a checkpoint of a run)"
        )
    return config


def input_format(name: str, forced: str | None) -> str:
    """How the input ``name`` is read: "events" or "message" (``forced``, else by its name)."""
    if forced is not None:
        return forced
    stem = name.removesuffix(".gz")
    return "events" if name != "-" and stem.endswith(EVENT_SUFFIXES) else "message"


def _check_inputs(inputs: list[tuple[str, str]], features: object) -> None:
    """Refuse, before anything is scored, inputs that cannot be read and messages without text features."""
    if sum(name == "-" for name, _ in inputs) > 1:
        raise StartupError("- (standard input) is given more than once")
    for name, kind in inputs:
        if kind == "message" and not isinstance(features, EmailFeatures):
            raise StartupError(
                f"{name}: a message needs features.type: email, and the model's configuration has dict features "
                "(score a file of events, or give --format events)"
            )
        if name != "-":
            try:
                with open(name, "rb"):
                    pass
            except OSError as error:
                raise StartupError(f"{name}: cannot read: {error.strerror}") from None


class _Scoring:
    """Predictions of inputs to standard output; rejected records counted and said on stderr."""

    def __init__(self, predictor: Predictor, parser: EventParser, explain: int = 0) -> None:
        self.predictor = predictor
        self.parser = parser
        self.explain = explain  # the features each prediction names with their parts of its score (0: none)
        self.out = JsonLinesSink()
        self.rejected = 0
        self.scored = 0
        self.labels_alone = 0  # records that are a label without features (or a comment): nothing to score

    def message(self, name: str) -> None:
        """Score the message in file ``name`` ("-": standard input); a StartupError when it holds none."""
        event_id = STDIN_NAME if name == "-" else name
        message = Record(sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes(), event_id)
        if not message.value.strip():
            raise StartupError(f"{'standard input' if name == '-' else name}: empty: no message to score")
        event = Event(event_id, event_id, text=message.value)
        try:
            self._score(event, self.predictor.features_of(event))
        except (ValueError, TypeError, OverflowError) as error:
            self._reject(rejection_reason(message, error))

    def events(self, source: Source) -> None:
        """Score the events of ``source`` (label-only events and comments have nothing to score)."""
        try:
            for record in source:
                if record is None:  # standard input is idle: show what is scored
                    self.out.flush()
                    continue
                try:
                    found = record_features(self.parser, self.predictor, record)
                    if found is None:
                        self.labels_alone += 1
                    else:
                        self._score(*found)
                except (ValueError, TypeError, OverflowError) as error:
                    self._reject(rejection_reason(record, error))
        except SourceError as error:  # a damaged gzip file, its records before the damage scored
            self._reject(str(error))

    def _score(self, event: Event, x: dict) -> None:
        """Emit the prediction of ``event`` (its features ``x``), with its explanation when asked for."""
        score, proba, predicted, _ = self.predictor.predict(x, event.user)
        prediction = prediction_output(event.id, predicted, score, proba)
        if self.explain:
            explained = self.predictor.explain(event, x, self.explain)
            prediction["explain"] = [[name, round(part, 6)] for name, part in explained]
        self.out.emit(prediction)
        self.scored += 1

    def _reject(self, reason: str) -> None:
        _log.warning("rejected %s", reason)
        self.rejected += 1


def command_predict(args: argparse.Namespace) -> int:
    """Score every input; 0, or 1 when a record or message was rejected (a StartupError, status 2, when every record
    read was a label alone: nothing was scored)."""
    model, settings = load_model(args.model, options.key_of(args))
    predictor = build_predictor(settings, model)
    inputs = [(name, input_format(name, args.format)) for name in args.inputs or ["-"]]
    _check_inputs(inputs, predictor.features)
    scoring = _Scoring(predictor, build_parser(settings, model), args.explain)
    max_bytes = settings.source.max_bytes
    try:
        for name, kind in inputs:
            if kind == "message":
                scoring.message(name)
            else:
                source = StdinSource(max_bytes=max_bytes) if name == "-" else FileSource(name, max_bytes=max_bytes)
                try:
                    scoring.events(source)
                finally:
                    source.close()
            scoring.out.flush()
    finally:
        scoring.out.close()
    if scoring.labels_alone and not scoring.scored:
        fields = scoring.parser.fields
        raise StartupError(
            f"nothing to score: each of the {scoring.labels_alone:,} records read is a label alone or a comment, and"
            f" the model's configuration reads an event's features from the field {fields['x']!r} or"
            f" {fields['text']!r} (source.fields)"
        )
    return 1 if scoring.rejected else 0
