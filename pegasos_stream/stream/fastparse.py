"""Event parsing at C speed: svmlight lines and JSON feature events straight to CSR rows, and JSON text
events to their texts.

Each parser takes what it can in its plain grammar and marks the rest for the Python parser
(`pegasos_stream.stream.parsing`), which gives the same event or the same error. Without the compiled
module (`COMPILED` false; see `pegasos_stream._compiled`), the Python parser takes every record.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .._compiled import FAST as _fast
from ..learners.rows import Rows, int64_array

__all__ = ["COMPILED", "name_table", "parse_json_events", "parse_json_texts", "parse_svmlight"]

#: Whether the parsers of this module can run (the compiled module is in use).
COMPILED = _fast is not None


def parse_svmlight(
    values: list[bytes], max_bytes: int, names: list | None = None, columns: int | None = None
) -> tuple[np.ndarray, Rows, np.ndarray]:
    """svmlight lines at C speed: (status of each line, the rows, their labels as ±1.0).

    Status 0: the line is the next row; 1: nothing to learn (blank or comment); 2: the line is outside
    the plain ASCII grammar (or too long) and the Python parser must take it, to give the same event
    (e.g. ``1_0`` as a number, a repeated name) or the same error. ``names``, a list passed to every
    call of a run, keeps the str of each numbered name (``"17"``) from call to call, so each is made
    and hashed once and the learner's weight lookups match it by identity. With ``columns``, the names are
    the int columns below it that they write in decimal (the rows' keys ``range(columns)``); a line with
    another name, or whose names do not increase, is for the Python parser (status 2).
    """
    vocabulary: dict = {}
    keys: list = []
    names = [] if names is None else names
    extra = () if columns is None else (columns,)
    status, indptr, indices, data, labels = _fast.parse_svmlight(values, vocabulary, keys, max_bytes, names, *extra)
    rows = Rows(
        int64_array(indptr),
        int64_array(indices),
        np.frombuffer(data, dtype=np.float64),
        keys if columns is None else range(columns),
        True,
    )
    return np.frombuffer(status, dtype=np.uint8), rows, np.frombuffer(labels, dtype=np.float64)


def parse_json_events(
    values: list[bytes], fields: Mapping[str, str], max_bytes: int, names: object = None
) -> tuple[np.ndarray, Rows, list, list]:
    """Labelled JSON feature events at C speed: (status of each value, the rows, their ids, their labels).

    ``fields`` names the members, as ``EventParser.fields``. Status 0: the value is an object of the id
    (optional: None stands for the record's position), the features and the label in the plain ASCII
    grammar, and is the next row, with the id and label json gives; 2: anything else (text, unlabelled,
    escapes, repeated names, huge integers, too long...), for the Python parser to give the same event
    or the same error. ``names``, a ``name_table()`` passed to every call of a run, keeps the feature
    names from call to call, so each str is made and hashed once and the learner's weight lookups
    match it by identity.
    """
    keys: list = []
    status, indptr, indices, data, ids, labels = _fast.parse_json_events(
        values, fields["id"], fields["x"], fields["label"], fields["text"], max_bytes, names or name_table(), keys
    )
    rows = Rows(int64_array(indptr), int64_array(indices), np.frombuffer(data, dtype=np.float64), keys, True)
    return np.frombuffer(status, dtype=np.uint8), rows, ids, labels


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
    status, texts, ids, labels = _fast.parse_json_texts(
        values, fields["id"], fields["x"], fields["label"], fields["text"], max_bytes
    )
    return np.frombuffer(status, dtype=np.uint8), texts, ids, labels


def name_table() -> object:
    """An empty table of feature names, for the calls of ``parse_json_events`` of one run."""
    return _fast.name_table()
