"""Records to events: parsing JSON and svmlight lines and taking mail messages, with errors that say
where they came from."""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from ..io.records import Record
from ..learners.validation import SIGNS

__all__ = ["LABEL_LINE", "MAIL_FORMATS", "USER_LINE", "BadRecord", "Event", "EventParser", "taught_record"]

#: Formats whose records are whole RFC 822 messages (a mail source splits its input into them).
MAIL_FORMATS = ("mbox", "raw")
#: The lines before a taught message (`taught_record`) that name its class and its user.
LABEL_LINE, USER_LINE = b"X-Pegasos-Label: ", b"X-Pegasos-User: "


def taught_record(message: bytes, label: str | None, user: str | None = None) -> bytes:
    """A message taught as ``label`` (by the name the configuration gives the class, e.g. "spam"; None: its source
    says it, as a folder does), for ``user``: a first line ``X-Pegasos-Label: LABEL`` when there is a label, then
    ``X-Pegasos-User: NAME`` when there is a user, each ended as the message ends its lines, then the message as
    it is. The parser of mail takes those lines away from every message, and reads the label from them when it
    parses taught records and the source gives none."""
    end = b"\r\n" if b"\r\n" in message[:4096] else b"\n"
    head = b"" if label is None else LABEL_LINE + label.encode() + end
    if user is not None:
        head += USER_LINE + user.encode() + end
    return head + message


class BadRecord(ValueError):
    """A record that cannot become an event; the message starts with the record's position."""

    def __init__(self, position: str, reason: str) -> None:
        super().__init__(f"{position}: {reason}")
        self.position = position
        self.reason = reason


@dataclass
class Event:
    """One event: an id, its features or text (absent for a label-only event), its label and whose mail it is (a
    user, when the parser reads users). A message's text is its bytes, as the mail source read them."""

    id: Hashable
    position: str
    x: dict | None = None
    text: str | bytes | None = None
    label: object = None
    user: str | None = None

    @property
    def has_input(self) -> bool:
        return self.x is not None or self.text is not None


class EventParser:
    """Turns records into events.

    Parameters
    ----------
    format
        "json" (one object per record), "svmlight" (``label index:value ... # comment``), or "mbox"
        or "raw" (each record one RFC 822 message, as a mail source splits its input: a text event
        named by its position, with the label the source gives it, in bytes, not decoded).
    fields
        Where the id, features (a dict of numbers), text and label sit in a JSON object. An event
        without an id, or whose id is NaN or infinite, is named by its position.
    labels
        Label strings to map to the positive and negative class, e.g. {"positive": "spam",
        "negative": "ham"}; without it a label is taken as it is (true/false, 1/0, 1/-1, or a class).
    max_bytes
        Records longer than this are refused.
    classes
        svmlight labels are the classes of a multiclass learner (ints when integral), not the binary
        classes +1, -1 and 0.
    columns
        None: svmlight feature names stay strings. An int n: they are the int columns 0..n − 1 of a
        learner's weight arrays (``n_features``), written in decimal without a sign or leading zeros;
        a line with any other name is refused.
    users
        Read each JSON event's user (``fields["user"]``, "user" by default: a string, or absent), for a learner
        of personal models; False: no event has a user.
    taught
        The records are taught messages (a feedback log's, `taught_record`): a message without a label from its
        source takes the one of its ``X-Pegasos-Label`` line. Otherwise that line is taken away and its label
        left: a message from elsewhere, whose sender may have written the line, never names its own label.

    """

    def __init__(
        self,
        format: str = "json",
        fields: Mapping[str, str] | None = None,
        labels: Mapping[str, object] | None = None,
        max_bytes: int = 1_000_000,
        classes: bool = False,
        columns: int | None = None,
        users: bool = False,
        taught: bool = False,
    ) -> None:
        self.format = format
        self.taught = taught
        self.fields = {"id": "id", "x": "x", "text": "text", "label": "label", "user": "user", **(fields or {})}
        self.users = users
        self.labels = dict(labels or {})
        self.max_bytes = max_bytes
        self.classes = classes
        self.columns = columns

    def parse(self, record: Record) -> Event | None:
        """The event in ``record`` (None for a comment-only svmlight line); a BadRecord naming its
        position if it is malformed, or if parsing it raised anything else (an integer of too many
        digits, nesting too deep for the recursion limit, a MemoryError...), named in the reason."""
        try:
            return self._parse(record)
        except BadRecord:
            raise
        except Exception as error:
            raise BadRecord(record.position, f"cannot parse: {type(error).__name__}: {error}") from None

    def _parse(self, record: Record) -> Event | None:
        if record.error is not None:
            raise BadRecord(record.position, record.error)
        size = len(record.value)
        if size > self.max_bytes:
            # a source cuts a longer record to max_bytes + 1 bytes while skipping the rest of it
            length = f"more than {self.max_bytes}" if size == self.max_bytes + 1 else str(size)
            raise BadRecord(record.position, f"record of {length} bytes exceeds {self.max_bytes}")
        if self.format in MAIL_FORMATS:
            return self._message(record)
        try:
            text = record.value.decode("utf-8")
        except UnicodeDecodeError as error:
            raise BadRecord(record.position, f"invalid UTF-8 ({error.reason} at byte {error.start})") from None
        if self.format == "svmlight":
            return self._svmlight(text, record.position)
        return self._json(text, record.position)

    def label_signs(self) -> dict:
        """The class sign of each label value of a binary stream, as this parser and then a binary learner
        take it ({value: 1.0 or -1.0}; dict equality, as theirs: True == 1, False == 0)."""
        if self.labels:
            return {self.labels.get("positive"): 1.0, self.labels.get("negative"): -1.0}
        return dict(SIGNS)

    def _label(self, value: object, position: str) -> object:
        if not self.labels:
            if isinstance(value, float) and not math.isfinite(value):
                raise BadRecord(position, f"label {value!r} is not a class")
            return value
        if value == self.labels.get("positive"):
            return True
        if value == self.labels.get("negative"):
            return False
        raise BadRecord(
            position,
            f"unknown label {value!r}: expected {self.labels.get('positive')!r} or {self.labels.get('negative')!r}",
        )

    def _json(self, text: str, position: str) -> Event:
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as error:
            raise BadRecord(position, f"malformed JSON: {error}") from None
        if not isinstance(obj, dict):
            raise BadRecord(position, f"expected a JSON object, got {type(obj).__name__}")
        f = self.fields
        event_id = obj.get(f["id"], position)
        if isinstance(event_id, (dict, list)):
            raise BadRecord(position, f"field {f['id']!r} must be a string or a number")
        if isinstance(event_id, float) and not math.isfinite(event_id):
            event_id = position  # NaN or an infinity has no JSON form, and equals no other id
        label = obj.get(f["label"])
        event = Event(id=event_id, position=position, label=None if label is None else self._label(label, position))
        if self.users:
            event.user = _user(obj.get(f["user"]), position, f["user"])
        if f["x"] in obj:
            event.x = _features(obj[f["x"]], position, f["x"])
        elif f["text"] in obj:
            event.text = obj[f["text"]]
            if not isinstance(event.text, str):
                raise BadRecord(position, f"field {f['text']!r} must be a string")
        elif label is None:
            raise BadRecord(
                position, f"no {f['x']!r}, {f['text']!r} or {f['label']!r} field: nothing to predict or learn"
            )
        return event

    def _message(self, record: Record) -> Event:
        """A mail message: its bytes as the text, named by its position, labelled as its source says. The first
        lines of a taught message (`taught_record`), ``X-Pegasos-Label: LABEL`` and ``X-Pegasos-User: NAME``, are
        taken away: the label is the event's when the records are taught ones and the source gives none (a
        folder's or ``source.label`` stands), and the user names the event's user when the parser reads users and
        the source names none (a maildir of users' mail names each message's)."""
        text, taught = record.value, {}
        for line_start in (LABEL_LINE, USER_LINE):
            if text.startswith(line_start):
                line, _, text = text.partition(b"\n")
                taught[line_start] = line[len(line_start) :].rstrip(b"\r").decode("utf-8", "replace")
        if not text.strip():
            raise BadRecord(record.position, "empty message")
        given = taught.get(LABEL_LINE) if record.label is None and self.taught else record.label
        label = None if given is None else self._label(given, record.position)
        user = (record.user or taught.get(USER_LINE)) if self.users else None
        return Event(id=record.position, position=record.position, text=text, label=label, user=user or None)

    def _svmlight(self, text: str, position: str) -> Event | None:
        """``label name:value ...`` with an optional ``# comment``; names stay strings, as river's
        ``stream.iter_libsvm`` gives them, and ``qid:`` pairs are skipped."""
        tokens = text.split("#", 1)[0].split()
        if not tokens:
            return None  # a comment line
        try:
            y = float(tokens[0])
        except ValueError:
            raise BadRecord(position, f"svmlight label {tokens[0]!r} is not a number") from None
        try:  # the common case at C speed; the loop below names the culprit otherwise
            x = {name: float(value) for name, value in (token.split(":", 1) for token in tokens[1:])}
            if "" in x:
                raise ValueError("a pair without a name")
        except ValueError:
            x = _svmlight_pairs(tokens[1:], position)
        x.pop("qid", None)
        if self.columns is not None:
            x = _svmlight_columns(x, self.columns, position)
        event = Event(id=position, position=position, x=_features(x, position, "features"))
        if self.labels:
            event.label = self._label(y, position)
        else:
            event.label = _svmlight_class(y, position) if self.classes else _svmlight_label(y, position)
        return event


def _user(value: object, position: str, name: str) -> str | None:
    """The user of an event: a non-empty string, or None when the field is absent or null."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise BadRecord(position, f"field {name!r} must be a non-empty string (a user)")
    return value


def _svmlight_pairs(tokens: list[str], position: str) -> dict:
    """``name:value`` tokens as a dict; a BadRecord naming the first malformed one."""
    x = {}
    for token in tokens:
        name, colon, value = token.partition(":")
        if not (colon and name):
            raise BadRecord(position, f"svmlight pair {token!r} is not name:value")
        try:
            x[name] = float(value)
        except ValueError:
            raise BadRecord(position, f"feature {name!r} has value {value!r}: expected a number") from None
    return x


def svmlight_column(name: str, columns: int) -> int | None:
    """The int column a svmlight name writes (decimal, no sign, no leading zero), if below ``columns``."""
    if not (name.isascii() and name.isdigit()) or (name[0] == "0" and len(name) > 1):
        return None
    column = int(name)
    return column if column < columns else None


def _svmlight_columns(x: dict, columns: int, position: str) -> dict:
    """The features of a svmlight line over int columns; a BadRecord naming a name that is no column."""
    converted = {}
    for name, value in x.items():
        column = svmlight_column(name, columns)
        if column is None:
            raise BadRecord(position, _no_column(name, columns))
        converted[column] = value
    return converted


def _no_column(name: str, columns: int) -> str:
    """Why the svmlight feature ``name`` is no column of weight arrays of ``columns``, and what would take it."""
    problem = f"svmlight feature {name!r} is no column from 0 to {columns - 1} of the model's weight arrays"
    if name.isascii() and name.isdigit():
        return f"{problem} (model.max_features, or model.n_features, sets their columns)"
    return f"{problem} (features.hash_bits hashes names into columns; model.max_features: null keeps them in dicts)"


def _svmlight_label(y: float, position: str) -> bool:
    if y == 1.0:
        return True
    if y in (0.0, -1.0):
        return False
    raise BadRecord(position, f"unknown svmlight label {y!r}: expected +1, -1 or 0")


def _svmlight_class(y: float, position: str) -> int | float:
    """A multiclass svmlight label: the number, an int when integral (``4.0`` is class 4)."""
    if not math.isfinite(y):
        raise BadRecord(position, f"svmlight label {y!r} is not a class")
    return int(y) if y.is_integer() else y


_NUMBERS = {int, float}


def _features(x: object, position: str, field: str) -> dict:
    if not isinstance(x, dict):
        raise BadRecord(position, f"field {field!r} must be an object of feature: number")
    values = x.values()
    if set(map(type, values)) <= _NUMBERS:  # no bools, strings, None...: one C-speed check of the rest
        try:
            if math.isfinite(math.fsum(values)):
                return x
        except (OverflowError, ValueError):  # a huge integer, an overflowing sum, or inf - inf
            pass
    for key, value in x.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadRecord(position, f"feature {key!r} has value {value!r}: expected a number")
        try:
            finite = math.isfinite(value)
        except OverflowError:  # an integer beyond the float range
            finite = False
        if not finite:
            raise BadRecord(position, f"feature {key!r} has value {value!r}: expected a finite number")
    return x
