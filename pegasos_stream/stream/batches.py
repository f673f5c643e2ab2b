"""Batches of records of a binary stream parsed at once, for the learner's compiled loop.

The compiled parsers take the plain grammar (svmlight, JSON feature events) straight to CSR rows, and
JSON text events to their texts, which the compiled features turn into rows a batch at a time; every
other record (every record, when the compiled module is not in use) goes through `EventParser`, one at
a time, which gives the same event or the same error.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from ..features import EmailFeatures
from ..learners.rows import Rows
from ..learners.validation import binary_sign
from .fastparse import COMPILED, name_table, parse_json_events, parse_json_texts, parse_svmlight
from .parsing import BadRecord, Event, EventParser
from .records import Record, RecordBatch

__all__ = ["BatchParser", "Parsed", "ParsedBatch", "parse_record"]

#: What a record parses to: an event, the error that makes it a bad record, or nothing (a comment).
Parsed: TypeAlias = Event | BadRecord | None


def parse_record(parser: EventParser, record: Record) -> Parsed:
    """``parser.parse(record)``, with a bad record's error returned instead of raised (whatever the
    record made the parser raise: see `EventParser.parse`)."""
    try:
        return parser.parse(record)
    except BadRecord as error:
        return error


@dataclass
class ParsedBatch:
    """A batch of records parsed: its labelled feature events as CSR ``rows`` with their label
    ``signs``, the index of each row's record, each row's event id (None: the record's position),
    and every other record's parse ({index: Event, BadRecord or None})."""

    records: RecordBatch
    rows: Rows
    signs: np.ndarray
    indices: list[int]
    ids: list[Hashable | None]
    others: dict[int, Parsed]


class BatchParser:
    """Parses the batches of one run of a binary stream (the compiled parsers keep their tables of
    feature names from batch to batch)."""

    def __init__(
        self, parser: EventParser, features: EmailFeatures | None = None, hashed_columns: bool = False
    ) -> None:
        self.parser = parser
        self.features = features  # text events become rows of these (a batch's texts at once) ...
        self.hashed_columns = hashed_columns  # ... whose columns are the hashed features (a learner's weight arrays)
        self._svmlight_names: list[str] = []  # the str of each numbered svmlight name, made once per run
        self._json_names = name_table() if COMPILED else None  # the JSON feature names, likewise
        self._label_signs = parser.label_signs()

    def parse(self, records: RecordBatch) -> ParsedBatch:
        """The rows of ``records``' labelled feature events with a binary label, and the rest."""
        parser = self.parser
        if not COMPILED:
            return self._events(records)
        try:
            if parser.format == "svmlight" and not (parser.labels or parser.classes):
                return self._svmlight(records)
            features = self.features
            if parser.format != "json":
                parsed = None
            elif features is None:
                parsed = self._json(records)
            else:
                parsed = self._texts(records, features) if features.compiled else None
        except Exception:  # a C parser that failed on the batch (a MemoryError, say): each record in Python
            parsed = None
        return self._events(records) if parsed is None else parsed

    def _svmlight(self, records: RecordBatch) -> ParsedBatch:
        """The batch through the C svmlight parser (with ``parser.columns``, its names as the int columns)."""
        parser = self.parser
        status, rows, signs = parse_svmlight(records.values, parser.max_bytes, self._svmlight_names, parser.columns)
        others: dict[int, Parsed] = dict.fromkeys(np.flatnonzero(status == 1).tolist())
        others.update((i, parse_record(parser, records[i])) for i in np.flatnonzero(status == 2).tolist())
        indices = np.flatnonzero(status == 0).tolist()
        return ParsedBatch(records, rows, signs, indices, [None] * len(indices), others)

    def _json(self, records: RecordBatch) -> ParsedBatch | None:
        """The batch through the C JSON parser; None when a row's label is not a binary class (rare:
        the Python parser then takes the whole batch, to reject those records as one at a time)."""
        parser = self.parser
        status, rows, ids, labels = parse_json_events(
            list(records.values), parser.fields, parser.max_bytes, self._json_names
        )
        table = self._label_signs
        try:
            signs = np.array([table[label] for label in labels], dtype=np.float64)
        except KeyError:
            return None
        others = {i: parse_record(parser, records[i]) for i in np.flatnonzero(status == 2).tolist()}
        return ParsedBatch(records, rows, signs, np.flatnonzero(status == 0).tolist(), ids, others)

    def _texts(self, records: RecordBatch, features: EmailFeatures) -> ParsedBatch | None:
        """The batch through the C JSON text parser, the other records through `EventParser`; None when
        a label is not a binary class or a record is a labelled feature event (rare: `_events` then takes
        the whole batch, as one record at a time would)."""
        parser = self.parser
        status, texts, ids, labels = parse_json_texts(list(records.values), parser.fields, parser.max_bytes)
        table = self._label_signs
        try:
            signs = [table[label] for label in labels]
        except KeyError:
            return None
        indices = np.flatnonzero(status == 0).tolist()
        others: dict[int, Parsed] = {}
        for index in np.flatnonzero(status == 2).tolist():
            parsed = parse_record(parser, records[index])
            if isinstance(parsed, Event) and parsed.has_input and (sign := _sign(parsed.label)) is not None:
                if parsed.text is None:
                    return None
                indices.append(index)  # kept in record order below
                text = parsed.text
                texts.append(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
                ids.append(parsed.id)
                signs.append(sign)
            else:
                others[index] = parsed
        order = sorted(range(len(indices)), key=indices.__getitem__)
        rows = Rows(*features.transform_texts([texts[k] for k in order], self.hashed_columns), distinct=True)
        return ParsedBatch(
            records,
            rows,
            np.array([signs[k] for k in order], dtype=np.float64),
            [indices[k] for k in order],
            [ids[k] for k in order],
            others,
        )

    def _events(self, records: RecordBatch) -> ParsedBatch:
        """The batch through `EventParser`, one record at a time. The labelled feature events become
        rows, and so do the labelled text events when there are features for them and the batch has
        no feature event (a batch that has both takes its text events one at a time)."""
        labelled: list[tuple[int, Event, float]] = []
        others: dict[int, Parsed] = {}
        for index in range(len(records)):
            parsed = parse_record(self.parser, records[index])
            if isinstance(parsed, Event) and parsed.has_input and (sign := _sign(parsed.label)) is not None:
                labelled.append((index, parsed, sign))
            else:
                others[index] = parsed
        features = self.features
        texts = features is not None and all(event.x is None for _, event, _ in labelled)
        rows: list[tuple[int, Event, float]] = []
        for entry in labelled:
            if entry[1].x is not None or texts:
                rows.append(entry)
            else:
                others[entry[0]] = entry[1]
        indices, ids, signs = [i for i, _, _ in rows], [e.id for _, e, _ in rows], np.array([s for _, _, s in rows])
        if texts and features is not None and features.compiled:
            texts_of_rows = [event.text or "" for _, event, _ in rows]
            batch_rows = Rows(*features.transform_texts(texts_of_rows, self.hashed_columns), distinct=True)
        elif texts and features is not None:
            batch_rows = Rows.from_dicts([features.transform_one(event.text) for _, event, _ in rows])
        else:
            batch_rows = Rows.from_dicts([event.x or {} for _, event, _ in rows])
        return ParsedBatch(records, batch_rows, signs, indices, ids, others)


def _sign(label: object) -> float | None:
    """The sign of a binary label; None for no label or one that is not a binary class."""
    if label is None:
        return None
    try:
        return binary_sign(label)
    except ValueError:
        return None
