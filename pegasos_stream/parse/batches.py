"""Batches of records of a binary stream parsed at once, for the learner's compiled loop.

The compiled parsers take the plain grammar (svmlight, JSON feature events) straight to CSR rows, and
JSON text events to their texts, which the compiled features turn into rows a batch at a time; every
other record (every record, when the compiled module is not in use) goes through `EventParser`, one at
a time, which gives the same event or the same error.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeAlias, cast

import numpy as np

from ..features import DictHasher, EmailFeatures, feature_hash
from ..features.email import TextRows
from ..io.records import Record, RecordBatch
from ..io.threads import helper_thread
from ..learners.rows import Rows
from ..learners.validation import binary_sign
from .fastparse import (
    COMPILED,
    NameTable,
    ParsedLines,
    parse_json_events,
    parse_json_texts,
    parse_svmlight,
    svmlight_parts,
)
from .parsing import BadRecord, Event, EventParser

__all__ = ["BatchParser", "Parsed", "ParsedBatch", "parse_record"]

#: What a record parses to: an event, the error that makes it a bad record, or nothing (a comment).
Parsed: TypeAlias = Event | BadRecord | None
#: The svmlight feature names whose hashed columns a run keeps at most; past this many, it starts again from none,
#: so that months of new names take bounded memory (the compiled JSON parser keeps no hashed name).
MAX_HASHED_NAMES = 1 << 20
#: A batch of JSON text events is read in pieces of about equal bytes, of this many bytes at least and at most
#: `MAX_TEXT_PIECES` of them, when the process may run on more than one core: each piece but the first is parsed
#: and read on a helper thread (the compiled parser and reader run without the GIL) while the runner learns the
#: piece before.
TEXT_PIECE_BYTES = 1 << 17
MAX_TEXT_PIECES = 4


def parse_record(parser: EventParser, record: Record) -> Parsed:
    """``parser.parse(record)``, with a bad record's error returned instead of raised (whatever the
    record made the parser raise: see `EventParser.parse`)."""
    try:
        return parser.parse(record)
    except BadRecord as error:
        return error


class HashedNames:
    """The hashed column of each svmlight feature name a run met, by the name's entry (names numbered in the order
    first met), and whether it shares its column with another name met."""

    def __init__(self) -> None:
        self.column = np.zeros(0, dtype=np.int64)  # by entry (-1: not met yet)
        self.shared = np.zeros(0, dtype=bool)  # by entry
        self.names = 0  # the entries numbered so far (the highest met, plus one)
        self._first: dict[int, int] = {}  # the entry of the first name met in each column
        self._entries: dict[str, int] = {}  # the entries numbered here (names without the table's)

    def full(self) -> bool:
        """Whether it holds more than ``MAX_HASHED_NAMES`` names."""
        return self.names > MAX_HASHED_NAMES

    def of_names(self, keys: list[str], n_columns: int) -> tuple[np.ndarray, np.ndarray]:
        """(hashed column, shares its column with another name met) of each of the names ``keys``."""
        numbered = self._entries
        entries = np.array([numbered.setdefault(key, len(numbered)) for key in keys], dtype=np.int64)
        size = int(entries.max(initial=-1)) + 1
        self.names = max(self.names, size)
        if size > len(self.column):  # room for twice as many names: each is copied once on average
            more = max(size, 2 * len(self.column)) - len(self.column)
            self.column = np.concatenate([self.column, np.full(more, -1, dtype=np.int64)])
            self.shared = np.concatenate([self.shared, np.zeros(more, dtype=bool)])
        new = np.flatnonzero(self.column[entries] < 0).tolist()
        if new:
            mask, first = n_columns - 1, self._first
            columns = [feature_hash(keys[j]) & mask for j in new]
            new_entries = entries[new]
            self.column[new_entries] = columns
            for entry, column in zip(new_entries.tolist(), columns, strict=True):
                if (owner := first.setdefault(column, entry)) != entry:
                    self.shared[[owner, entry]] = True
        return self.column[entries], self.shared[entries]


@dataclass
class ParsedBatch:
    """A batch of records parsed: its labelled feature events as CSR ``rows`` with their label
    ``signs``, the index of each row's record, each row's event id (None: the record's position;
    ``ids`` None: not asked for), and every other record's parse ({index: Event, BadRecord or None})."""

    records: RecordBatch
    rows: Rows
    signs: np.ndarray
    indices: list[int]
    ids: list[Hashable | None] | None
    others: dict[int, Parsed]


@dataclass
class _TextEvents:
    """The labelled text events of a batch, in record order (each event's index in the batch, text, id and label
    sign), and the parse of every other record, by index."""

    indices: list[int]
    texts: list[bytes]
    ids: list[Hashable | None]
    signs: np.ndarray
    others: dict[int, Parsed]

    def batch(self, records: RecordBatch, parsed: TextRows) -> ParsedBatch:
        """The ``records`` these events were parsed from, parsed, their texts' rows ``parsed``."""
        return ParsedBatch(records, Rows(*parsed, distinct=True), self.signs, self.indices, self.ids, self.others)


#: A labelled event of a batch: its index in the batch, the event, the sign of its label.
_Labelled = tuple[int, Event, float]


class BatchParser:
    """Parses the batches of one run of a binary stream (the compiled parsers keep their tables of
    feature names from batch to batch)."""

    def __init__(
        self,
        parser: EventParser,
        features: EmailFeatures | DictHasher | None = None,
        hashed_columns: bool = False,
        ids: bool = True,
    ) -> None:
        self.parser = parser
        self.ids = ids  # the rows' event ids are asked for (the JSON feature parser makes none otherwise)
        self.features = features  # text events become rows of these (a batch's texts at once), or feature
        self.hashed_columns = hashed_columns  # ... events' rows are hashed; columns: a learner's weight arrays
        self._svmlight_names: list[str] = []  # the str of each numbered svmlight name, made once per run
        self._hash_bits = features.hash_bits if isinstance(features, DictHasher) else 0
        self._json_names = NameTable(self._hash_bits) if COMPILED else None  # the JSON feature names (or columns)
        self._hashed = HashedNames()  # the hashed column of each svmlight feature name met (with a DictHasher)
        self._label_signs = parser.label_signs()

    def pieces(self, records: RecordBatch) -> Iterable[tuple[int, ParsedBatch]]:
        """``parse`` of consecutive pieces of ``records`` (`RecordBatch.slice`), each with the index of its first
        record: svmlight lines with int columns come in the parts `svmlight_parts` parsed them in (not joined), JSON
        text events in the pieces `_text_pieces` reads them in (on more than one core), any other batch in one
        piece."""
        parser = self.parser
        if (helper := self._text_helper()) is not None:
            return self._text_pieces(records, cast(EmailFeatures, self.features), helper)
        plain = parser.format == "svmlight" and not (parser.labels or parser.classes)
        if not (COMPILED and plain and self.features is None and parser.columns is not None):
            return [(0, self.parse(records))]
        try:
            return [
                (start, self._svmlight(records if stop - start == len(records) else records.slice(start, stop), part))
                for start, stop, part in svmlight_parts(records.values, parser.max_bytes, parser.columns)
            ]
        except Exception:  # a C parse that failed (a MemoryError, say): each record in Python
            return [(0, self._events(records))]

    def _text_helper(self) -> ThreadPoolExecutor | None:
        """The thread that reads the texts of `_text_pieces`, when the C parsers take JSON text events and the
        process may run on more than one core; else None."""
        features, parser = self.features, self.parser
        compiled = COMPILED and isinstance(features, EmailFeatures) and features.compiled
        return helper_thread("text-read") if compiled and parser.format == "json" and not parser.users else None

    def parse(self, records: RecordBatch) -> ParsedBatch:
        """The rows of ``records``' labelled feature events with a binary label, and the rest."""
        if not COMPILED or self.parser.users:  # (the compiled parsers read no user)
            return self._events(records)
        if self._hash_bits and self._hashed.full():
            self._hashed = HashedNames()
        parsed = self._compiled(records)
        return self._events(records) if parsed is None else parsed

    def _compiled(self, records: RecordBatch) -> ParsedBatch | None:
        """``parse`` by the compiled parsers; None when none takes the batch, or when one failed on it (a
        MemoryError, say), for each record to be parsed in Python."""
        parser, features = self.parser, self.features
        try:
            if parser.format == "svmlight" and not (parser.labels or parser.classes):
                parsed: ParsedBatch | None = self._svmlight(records)
            elif parser.format != "json":
                parsed = None
            elif not isinstance(features, EmailFeatures):
                parsed = self._json(records)  # (hashed by the parser, with a DictHasher)
            else:
                parsed = self._texts(records, features) if features.compiled else None
            if parsed is not None and isinstance(features, DictHasher) and parser.format == "svmlight":
                parsed.rows = self._hash_rows(parsed.rows, features)
        except Exception:
            return None
        return parsed

    def _hash_rows(self, rows: Rows, hasher: DictHasher) -> Rows:
        """``rows`` of named features (distinct in a row) as ``hasher.transform_one`` hashes each: their columns
        hashed, and the values of names that share a column in a row summed in order (rare)."""
        n_columns = 1 << hasher.hash_bits
        keys = cast(list, rows.keys)
        columns_of_keys, shared = self._hashed.of_names(keys, n_columns)
        columns = columns_of_keys[rows.indices]
        suspect = np.flatnonzero(shared[rows.indices])  # only the cells of such names can meet another in a row
        row_of = np.searchsorted(rows.indptr, suspect, side="right") - 1
        ordered = np.sort(row_of * n_columns + columns[suspect])
        shared_rows = np.unique(ordered[1:][ordered[1:] == ordered[:-1]] // n_columns).tolist()
        if not shared_rows:
            return Rows(rows.indptr, columns, rows.data, range(n_columns), True)
        lengths = np.diff(rows.indptr)
        indices, data, starts = [], [], rows.indptr.tolist()
        last = 0  # rows before it taken as they are
        for row in shared_rows:  # through the hasher, as one at a time
            indices.append(columns[starts[last] : starts[row]])
            data.append(rows.data[starts[last] : starts[row]])
            a, b = starts[row], starts[row + 1]
            x = hasher.transform_one(dict(zip([keys[j] for j in rows.indices[a:b].tolist()], rows.data[a:b].tolist())))
            indices.append(np.fromiter(x, dtype=np.int64, count=len(x)))
            data.append(np.fromiter(x.values(), dtype=np.float64, count=len(x)))
            lengths[row] = len(x)
            last = row + 1
        indices.append(columns[starts[last] :])
        data.append(rows.data[starts[last] :])
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        return Rows(indptr, np.concatenate(indices), np.concatenate(data), range(n_columns), True)

    def _svmlight(self, records: RecordBatch, parsed: ParsedLines | None = None) -> ParsedBatch:
        """The batch through the C svmlight parser (with ``parser.columns``, its names as the int columns), or the
        parse of it given."""
        parser = self.parser
        if parsed is None:
            parsed = parse_svmlight(records.values, parser.max_bytes, self._svmlight_names, parser.columns)
        status, rows, signs = parsed
        others: dict[int, Parsed] = dict.fromkeys(np.flatnonzero(status == 1).tolist())
        others.update((i, parse_record(parser, records[i])) for i in np.flatnonzero(status == 2).tolist())
        indices = np.flatnonzero(status == 0).tolist()
        return ParsedBatch(records, rows, signs, indices, [None] * len(indices), others)

    def _json(self, records: RecordBatch) -> ParsedBatch | None:
        """The batch through the C JSON parser; None when a row's label is not a binary class (rare:
        the Python parser then takes the whole batch, to reject those records as one at a time)."""
        parser = self.parser
        status, rows, ids, labels = parse_json_events(
            list(records.values), parser.fields, parser.max_bytes, self._json_names, self.ids
        )
        table = self._label_signs
        try:
            signs = np.array([table[label] for label in labels], dtype=np.float64)
        except KeyError:
            return None
        others = {i: parse_record(parser, records[i]) for i in np.flatnonzero(status == 2).tolist()}
        return ParsedBatch(records, rows, signs, np.flatnonzero(status == 0).tolist(), ids, others)

    def _texts(self, records: RecordBatch, features: EmailFeatures) -> ParsedBatch | None:
        """The batch through the C JSON text parser and the compiled reader (its empty bodies counted), the other
        records through `EventParser`; None when a label is not a binary class or a record is a labelled feature
        event (rare: `_events` then takes the whole batch, as one record at a time would)."""
        read = self._read_piece(records, features)
        if read is None:
            return None
        parsed, empty_bodies = read
        features.empty_bodies += empty_bodies
        return parsed

    def _text_events(self, records: RecordBatch) -> _TextEvents | None:
        """The labelled text events of the batch by the C JSON text parser, the other records through `EventParser`;
        None as for `_texts`."""
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
        return _TextEvents(
            [indices[k] for k in order],
            [texts[k] for k in order],
            [ids[k] for k in order],
            np.array([signs[k] for k in order], dtype=np.float64),
            others,
        )

    def _text_pieces(
        self, records: RecordBatch, features: EmailFeatures, helper: ThreadPoolExecutor
    ) -> Iterator[tuple[int, ParsedBatch]]:
        """``pieces`` of a batch of JSON text events: its records cut into pieces of about equal bytes
        (`TEXT_PIECE_BYTES` at least, `MAX_TEXT_PIECES` at most), each parsed and its texts read on the ``helper``
        thread but the first, which this thread parses and reads meanwhile (the C parser and reader run without the
        GIL); a piece's empty bodies are counted as it is handed out. From a piece the C parsers do not take
        (`_text_events`), or whose parse or read failed (a MemoryError, say), on, the records are parsed one at a
        time, as ``parse`` would."""
        cuts = _text_cuts(records.sizes())
        pieces = [records if len(cuts) == 1 else records.slice(first, end) for first, end in cuts]
        reading = [helper.submit(self._read_piece, piece, features) for piece in pieces[1:]]
        try:
            for k, (first, _) in enumerate(cuts):
                try:
                    read = reading[k - 1].result() if k else self._read_piece(pieces[0], features)
                except Exception:
                    read = None
                if read is None:
                    yield first, self._events(records.slice(first, len(records)) if first else records)
                    return
                parsed, empty_bodies = read
                features.empty_bodies += empty_bodies
                yield first, parsed
        finally:
            for future in reading:
                future.cancel()

    def _read_piece(self, records: RecordBatch, features: EmailFeatures) -> tuple[ParsedBatch, int] | None:
        """The records by the C JSON text parser and the compiled reader (`EmailFeatures.read_texts`, not counted),
        the other records through `EventParser`, with how many of the texts kept no body text; None as for
        `_texts`."""
        events = self._text_events(records)
        if events is None:
            return None
        parsed, empty_bodies = features.read_texts(events.texts, self.hashed_columns)
        return events.batch(records, parsed), empty_bodies

    def _events(self, records: RecordBatch) -> ParsedBatch:
        """The batch through `EventParser`, one record at a time. The labelled feature events become
        rows, and so do the labelled text events when there are features for them and the batch has
        no feature event (a batch that has both takes its text events one at a time)."""
        labelled, others = self._parse_each(records)
        texts = isinstance(self.features, EmailFeatures) and all(event.x is None for _, event, _ in labelled)
        rows, hashed = self._take_rows(labelled, others, texts)
        indices, ids, signs = [i for i, _, _ in rows], [e.id for _, e, _ in rows], np.array([s for _, _, s in rows])
        return ParsedBatch(records, self._rows_of_events(rows, hashed, texts), signs, indices, ids, others)

    def _parse_each(self, records: RecordBatch) -> tuple[list[_Labelled], dict[int, Parsed]]:
        """Each record through `EventParser`: the events with input and a binary label, as (index, event, sign),
        and the rest by index."""
        labelled: list[_Labelled] = []
        others: dict[int, Parsed] = {}
        for index in range(len(records)):
            parsed = parse_record(self.parser, records[index])
            if isinstance(parsed, Event) and parsed.has_input and (sign := _sign(parsed.label)) is not None:
                labelled.append((index, parsed, sign))
            else:
                others[index] = parsed
        return labelled, others

    def _take_rows(
        self, labelled: list[_Labelled], others: dict[int, Parsed], texts: bool
    ) -> tuple[list[_Labelled], list[dict]]:
        """The ``labelled`` events that become rows: the feature events (with a `DictHasher`, those it hashes, their
        hashed features the second list), or each event of a batch of ``texts``; the others go to ``others``, to
        be taken one at a time."""
        features = self.features
        rows: list[_Labelled] = []
        hashed: list[dict] = []
        for entry in labelled:
            x = entry[1].x
            if isinstance(features, DictHasher) and x is not None:
                try:
                    hashed.append(features.transform_one(x))
                except ValueError:  # a name or value the hasher refuses: rejected as one at a time
                    x = None
            if x is not None or texts:
                rows.append(entry)
            else:
                others[entry[0]] = entry[1]
        return rows, hashed

    def _rows_of_events(self, rows: list[_Labelled], hashed: list[dict], texts: bool) -> Rows:
        """The features of the events taken as ``rows`` (`_take_rows`): their texts' (a batch of ``texts``), the
        ``hashed`` ones (a `DictHasher`), or their own."""
        features = self.features
        if texts and isinstance(features, EmailFeatures) and features.compiled:
            texts_of_rows = [event.text or "" for _, event, _ in rows]
            return Rows(*features.transform_texts(texts_of_rows, self.hashed_columns), distinct=True)
        if texts and isinstance(features, EmailFeatures):
            return Rows.from_dicts([features.transform_one(event.text) for _, event, _ in rows])
        if isinstance(features, DictHasher):
            return Rows.from_dicts(hashed)
        return Rows.from_dicts([event.x or {} for _, event, _ in rows])


def _text_cuts(lengths: list[int]) -> list[tuple[int, int]]:
    """The pieces (first, end) of records of these ``lengths`` (bytes) that `BatchParser._text_pieces` reads:
    consecutive, of about equal bytes, `TEXT_PIECE_BYTES` at least (one piece for a short batch), `MAX_TEXT_PIECES`
    at most."""
    ends = np.cumsum(lengths, dtype=np.int64)
    total = int(ends[-1]) if len(ends) else 0
    count = max(1, min(MAX_TEXT_PIECES, total // TEXT_PIECE_BYTES, len(lengths)))
    cuts = [0] + [int(np.searchsorted(ends, total * k // count, side="right")) for k in range(1, count)]
    cuts.append(len(lengths))
    return [(first, end) for first, end in zip(cuts, cuts[1:]) if end > first] or [(0, len(lengths))]


def _sign(label: object) -> float | None:
    """The sign of a binary label; None for no label or one that is not a binary class."""
    if label is None:
        return None
    try:
        return binary_sign(label)
    except ValueError:
        return None
