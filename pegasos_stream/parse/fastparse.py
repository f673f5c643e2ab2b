"""Event parsing at C speed: svmlight lines and JSON feature events straight to CSR rows, and JSON text
events to their texts.

Each parser takes what it can in its plain grammar and marks the rest for the Python parser
(`pegasos_stream.parse.parsing`), which gives the same event or the same error. Without the compiled
module (`COMPILED` false; see `pegasos_stream._compiled`), the Python parser takes every record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

import numpy as np

from .._compiled import PARSE as _parse
from ..io.records import Lines
from ..io.threads import helper_thread
from ..learners.rows import Rows, int64_array

__all__ = [
    "COMPILED",
    "NameTable",
    "ParsedLines",
    "parse_json_events",
    "parse_json_texts",
    "parse_svmlight",
    "svmlight_parts",
]

#: Whether the parsers of this module can run (the compiled module is in use).
COMPILED = _parse is not None
#: Lines of svmlight with int columns that a call parses on two threads at once, half each, when the process
#: may run on more than one core (that parse runs without the GIL).
SPLIT_LINES = 256

#: What parse_svmlight gives: the status of each line, the rows, their labels as ±1.0.
ParsedLines: TypeAlias = tuple[np.ndarray, Rows, np.ndarray]


def parse_svmlight(
    values: list[bytes] | Lines, max_bytes: int, names: list | None = None, columns: int | None = None
) -> ParsedLines:
    """svmlight lines (bytes, or `Lines` left in the block they were read in) at C speed: (status of each line,
    the rows, their labels as ±1.0).

    Status 0: the line is the next row; 1: nothing to learn (blank or comment); 2: the line is outside
    the plain ASCII grammar (or too long) and the Python parser must take it, to give the same event
    (e.g. ``1_0`` as a number, a repeated name) or the same error. ``names``, a list passed to every
    call of a run, keeps the str of each numbered name (``"17"``) from call to call, so each is made
    and hashed once and the learner's weight lookups match it by identity. With ``columns``, the names are
    the int columns below it that they write in decimal (the rows' keys ``range(columns)``); a line with
    another name, or whose names do not increase, is for the Python parser (status 2); that parse runs without
    the GIL, a long batch in two halves on two threads.
    """
    if columns is not None:
        parts = svmlight_parts(values, max_bytes, columns)
        if len(parts) == 1:
            return parts[0][2]
        (_, _, (first_status, rows, first_labels)), (_, _, (more_status, more_rows, more_labels)) = parts
        joined_indptr = np.concatenate([rows.indptr, more_rows.indptr[1:] + rows.indptr[-1]])
        joined = Rows(
            joined_indptr,
            np.concatenate([rows.indices, more_rows.indices]),
            np.concatenate([rows.data, more_rows.data]),
            range(columns),
            True,
        )
        return np.concatenate([first_status, more_status]), joined, np.concatenate([first_labels, more_labels])
    keys: list = []
    lines = values.spans() if isinstance(values, Lines) else values
    status, indptr, indices, data, labels = _parse.parse_svmlight(
        lines, {}, keys, max_bytes, [] if names is None else names
    )
    rows = Rows(int64_array(indptr), int64_array(indices), np.frombuffer(data, dtype=np.float64), keys, True)
    return np.frombuffer(status, dtype=np.uint8), rows, np.frombuffer(labels, dtype=np.float64)


def svmlight_parts(values: list[bytes] | Lines, max_bytes: int, columns: int) -> list[tuple[int, int, ParsedLines]]:
    """``parse_svmlight(values, max_bytes, None, columns)`` in consecutive parts, each left as it was parsed: (start,
    stop, the parse of ``values[start:stop]``). A long batch comes in two halves, the second parsed on the helper
    thread while this one parses the first."""
    helper = helper_thread("svmlight-parse") if len(values) >= SPLIT_LINES else None
    if helper is None:
        return [
            (0, len(values), _parsed(_parse.parse_svmlight(_lines(values), {}, [], max_bytes, [], columns), columns))
        ]
    half = len(values) // 2
    second = helper.submit(_parse.parse_svmlight, _lines(values[half:]), {}, [], max_bytes, [], columns)
    first = _parse.parse_svmlight(_lines(values[:half]), {}, [], max_bytes, [], columns)
    return [(0, half, _parsed(first, columns)), (half, len(values), _parsed(second.result(), columns))]


def _lines(values: list[bytes] | Lines) -> list[bytes] | tuple[bytes, np.ndarray, np.ndarray]:
    """The lines as the compiled parser takes them."""
    return values.spans() if isinstance(values, Lines) else values


def _parsed(part: tuple, columns: int) -> ParsedLines:
    """The parse of lines from what the compiled parser gives."""
    status, indptr, indices, data, labels = (
        np.frombuffer(part[k], dtype=dtype)
        for k, dtype in enumerate((np.uint8, np.int64, np.int64, np.float64, np.float64))
    )
    return status, Rows(indptr, indices, data, range(columns), True), labels


class NameTable:
    """The JSON feature names a run met, kept from one ``parse_json_events`` call to the next (so each str is
    made and hashed once, and the learner's weight lookups match it by identity); with ``hash_bits``, the
    names are hashed instead (``feature_hash(name) mod 2^hash_bits``, computed from the name's bytes where it
    appears): the table keeps no name, and no str is made."""

    def __init__(self, hash_bits: int = 0) -> None:
        self.hash_bits = hash_bits
        self.table = _parse.name_table(hash_bits)

    def __len__(self) -> int:
        """The names it holds (none when it hashes)."""
        return int(_parse.name_count(self.table))


def parse_json_events(
    values: list[bytes], fields: Mapping[str, str], max_bytes: int, names: NameTable | None = None, ids: bool = True
) -> tuple[np.ndarray, Rows, list | None, list]:
    """Labelled JSON feature events at C speed: (status of each value, the rows, their ids (None without
    ``ids``: none is made), their labels).

    ``fields`` names the members, as ``EventParser.fields``. Status 0: the value is an object of the id
    (optional: None stands for the record's position), the features and the label in the plain ASCII
    grammar, and is the next row, with the id and label json gives; 2: anything else (text, unlabelled,
    escapes, repeated names, huge integers, too long...), for the Python parser to give the same event
    or the same error. ``names`` is the run's `NameTable` (None: a fresh one). With a table that hashes,
    the rows' columns are the hashed columns (keys ``range(2^hash_bits)``), as ``DictHasher.transform_one``
    gives them, and a value whose names share a column (whose values the hasher sums) has status 2 too.
    """
    names = NameTable() if names is None else names
    keys: list | None = None if names.hash_bits else []
    status, indptr, indices, data, id_list, labels = _parse.parse_json_events(
        values, fields["id"], fields["x"], fields["label"], fields["text"], max_bytes, names.table, keys, ids
    )
    columns = range(1 << names.hash_bits) if keys is None else keys
    rows = Rows(int64_array(indptr), int64_array(indices), np.frombuffer(data, dtype=np.float64), columns, True)
    return np.frombuffer(status, dtype=np.uint8), rows, id_list, labels


def parse_json_texts(
    values: list[bytes], fields: Mapping[str, str], max_bytes: int
) -> tuple[np.ndarray, list[bytes], list, list]:
    """Labelled JSON text events at C speed: (status of each value, the texts, their ids, their labels).

    ``fields`` names the members, as ``EventParser.fields``. Status 0: the value is an object of the id
    (optional: None stands for the record's position), the text and the label, and other members that
    hold a string, a number, true, false or null; its text comes as the UTF-8 bytes of the string json
    gives, with the id and label json gives. 2: anything else (a feature event, no label, nested values,
    a surrogate escape, invalid UTF-8, too long...), for the Python parser to give the same event or the
    same error.
    """
    status, texts, ids, labels = _parse.parse_json_texts(
        values, fields["id"], fields["x"], fields["label"], fields["text"], max_bytes
    )
    return np.frombuffer(status, dtype=np.uint8), texts, ids, labels
