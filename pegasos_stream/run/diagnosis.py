"""A run that rejects everything stops, and says why: what the records look like against what the parser expects.

`LeadingRejections` watches the first records of a run. Once each of its first ``limit`` records (each record of
an input that ends before) came to nothing, it raises `AllRejected` with a hint: the format the records look like
(an mbox, one raw RFC 822 message, svmlight lines, JSON objects) when they are read as another; the fields of
JSON objects that have none of those the parser reads; gzip data read as it is; or the label values seen against
those expected. A record comes to nothing when it is rejected, or when it is a label alone for an id that no event
before it had: JSON objects whose features are under another name than ``source.fields`` says are read so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import NamedTuple

from ..io.records import Record
from ..parse.parsing import EventParser

__all__ = ["AllRejected", "LeadingRejections"]

#: The lines of a rejected record looked at (a message read as one record has many).
LINES_LOOKED_AT = 20
#: The most field names and label values a hint names.
NAMED_AT_MOST = 8

#: An mbox envelope line: "From ", the sender, then the date, which starts with the day of the week.
_ENVELOPE = re.compile(rb"From \S+\s+(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\b")
#: A header field of an RFC 822 message: a name of printable characters but ":", then ":".
_HEADER = re.compile(rb"[!-9;-~]+:")
#: A svmlight line with at least one pair: a number, then name:value pairs, then an optional comment.
_SVMLIGHT = re.compile(rb"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?:[ \t]+[^\s:#]+:\S+)+[ \t]*(?:#.*)?")

#: The first bytes of gzip data.
_GZIP_MAGIC = b"\x1f\x8b"

#: What each format looks like, in a hint; the first that any line looks like is the records' (an mbox's
#: envelope line is rare among its lines, a JSON or svmlight line rare in a message).
_FORMATS = {
    "mbox": "an mbox",
    "json": "JSON objects",
    "svmlight": "svmlight lines",
    "raw": "a raw RFC 822 message",
}


class AllRejected(RuntimeError):
    """Each of the first records of a run was rejected (or a label for no event); the message says what they look
    like."""


class _Look(NamedTuple):
    """What a line looks like: its format (None: none of them), a JSON object's fields, and its label."""

    format: str | None
    fields: tuple[str, ...] = ()
    label: object = None


def _look(line: bytes, label_field: str) -> _Look:
    if line.startswith(_GZIP_MAGIC):
        return _Look("gzip")
    if _ENVELOPE.match(line):
        return _Look("mbox")
    if line.startswith(b"{"):
        try:
            found = json.loads(line)
        except (ValueError, RecursionError):
            found = None
        if isinstance(found, dict):
            return _Look("json", tuple(map(str, found)), found.get(label_field))
    if _SVMLIGHT.fullmatch(line):
        return _Look("svmlight", label=float(line.split()[0]))
    return _Look("raw" if _HEADER.match(line) else None)


def _distinct(values: Iterable[object]) -> list[object]:
    """``values`` without repeats (a value counted once, however many times it comes), in order."""
    seen: list[object] = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


def _named(values: list[object]) -> str:
    """The first ``NAMED_AT_MOST`` of ``values``, each as Python shows it, and how many more."""
    shown = ", ".join(map(repr, values[:NAMED_AT_MOST]))
    return shown + (f" and {len(values) - NAMED_AT_MOST} more" if len(values) > NAMED_AT_MOST else "")


class LeadingRejections:
    """The watch over the first ``limit`` records of a run while each of them comes to nothing.

    ``events`` and ``rejected`` are the runner's counts when the run starts (a resumed run's included). The runner
    notes each rejected record (`note`) and each label for no event (`note_unmatched`), and checks its counts after
    each batch (`check`), reading no more than the records `left` at a time, so that the limit falls between two
    batches."""

    def __init__(self, limit: int, parser: EventParser, multiclass: bool, events: int, rejected: int) -> None:
        self.limit = limit
        self._parser = parser
        self._multiclass = multiclass
        self._start = (events, rejected)
        self._looks: list[_Look] = []
        self._first_reason: str | None = None
        self._unmatched = 0  # labels alone, for ids that no event before them had

    def note(self, record: Record, reason: str) -> None:
        """``record`` was rejected for ``reason``."""
        if self._first_reason is None:
            self._first_reason = reason
        self._look_at(record)

    def note_unmatched(self, record: Record) -> None:
        """``record`` was a label alone, for an id that no event before it had."""
        self._unmatched += 1
        self._look_at(record)

    def _look_at(self, record: Record) -> None:
        lines = record.value.split(b"\n", LINES_LOOKED_AT)[:LINES_LOOKED_AT]  # (the rest of a message left whole)
        self._looks += [_look(line.strip(), self._parser.fields["label"]) for line in lines if line.strip()]

    def left(self, events: int) -> int:
        """The records still to read before the limit, with ``events`` processed."""
        return self.limit - (events - self._start[0])

    def check(self, events: int, rejected: int, ended: bool = False) -> bool:
        """Whether to go on watching, with ``events`` processed and ``rejected`` rejected: not once a record of the
        run came to something; `AllRejected` once each of ``limit`` records came to nothing (each of them, when the
        input has ``ended``)."""
        processed, refused = events - self._start[0], rejected - self._start[1] + self._unmatched
        if refused < processed:
            return False
        if processed >= self.limit or (ended and processed):
            raise AllRejected(
                f"{_each(processed, self.limit)} {self._came_to()}: {self._hint()} (to read on regardless:"
                " --set run.stop_after_leading_rejections=0)"
            )
        return True

    def _came_to(self) -> str:
        """What each of the records watched came to."""
        if not self._unmatched:
            return "rejected"
        rejected = self._first_reason is not None
        return "rejected or a label with no event before it" if rejected else "a label with no event before it"

    def _hint(self) -> str:
        """What the records look like against what the parser expects."""
        parser = self._parser
        formats = {look.format for look in self._looks}
        if "gzip" in formats:
            return (
                "the input looks like gzip data, read as it is: a file whose name ends in .gz is decompressed, a pipe"
                " is not (decompress into it: zcat FILE | pegasos-stream ... --input -)"
            )
        seen = next((format for format in _FORMATS if format in formats), None)
        if seen is not None and seen != parser.format:
            return f"the input looks like {_FORMATS[seen]}, read as {parser.format}: set source.format: {seen}"
        objects = [look for look in self._looks if look.format == seen]
        if seen == "json" and (hint := _fields_hint(parser, objects, self._unmatched > 0)) is not None:
            return hint
        labelled = seen in ("json", "svmlight") and not self._multiclass  # (binary labels, each checked)
        if labelled and (hint := _labels_hint(parser, objects)) is not None:
            return hint
        return f"the first: {self._first_reason}"


def _fields_hint(parser: EventParser, objects: list[_Look], labels_alone: bool) -> str | None:
    """The fields of the JSON ``objects``, when none of them is one ``parser`` reads, or (``labels_alone``: some of
    them were read as labels alone) none that holds an event's features (None: some is)."""
    fields = parser.fields
    names = _distinct(name for look in objects for name in look.fields)
    if {fields["x"], fields["text"], *([] if labels_alone else [fields["label"]])} & set(names):
        return None
    if labels_alone:
        return (
            f"the input holds JSON objects with the fields {_named(names)}, none of them where source.fields expects"
            f" an event's features, {fields['x']!r} or {fields['text']!r}: set source.fields.text (or .x) to the"
            " field that holds them"
        )
    return (
        f"the input holds JSON objects with the fields {_named(names)}, where source.fields expects"
        f" {fields['id']!r}, {fields['x']!r} or {fields['text']!r}, and {fields['label']!r}"
    )


def _labels_hint(parser: EventParser, objects: list[_Look]) -> str | None:
    """The labels of the ``objects`` (JSON objects or svmlight lines), when one is no label ``parser`` takes for a
    binary learner (None: each is)."""
    signs = parser.label_signs()
    labels = _distinct(look.label for look in objects if look.label is not None)
    if all(_accepted(label, signs) for label in labels):
        return None
    return f"its labels are {_named(labels)}, {_expected(parser)}"


def _each(processed: int, limit: int) -> str:
    """Which records were rejected, of ``processed``: the first ``limit``, or all the input held."""
    if processed >= limit:
        return f"each of the first {processed} records was"
    return "the input's one record was" if processed == 1 else f"each of the input's {processed} records was"


def _accepted(label: object, signs: dict) -> bool:
    try:
        return label in signs
    except TypeError:  # an unhashable label (a list, an object) is no class
        return False


def _expected(parser: EventParser) -> str:
    """The label values ``parser`` takes for a binary learner, in a hint."""
    if parser.labels:
        return f"where source.labels expects {parser.labels['positive']!r} or {parser.labels['negative']!r}"
    return "not true | false, 1 | 0 | -1: map them to those with source.labels: {positive: ..., negative: ...}"
