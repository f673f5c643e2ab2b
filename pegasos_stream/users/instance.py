"""What an instance does with each record of the users topic, its user's personal offset its keyed state.

The users topic holds JSON events keyed by user: those ``run`` forwards (``output.forward``: ``id``, ``user``,
``text`` or ``x``, ``label`` when labelled, ``shared_score``, the shared learner's f(x) before it learned the
event, and ``shared_t``, the examples it had learned then), and mail to score written by anyone (``id``, ``user``,
``text`` or ``x``). An event is scored f(x) + ⟨d_u, x⟩; a labelled one then takes the offset's step with that f(x)
and that t (`PersonalPegasos.learn_offset`; a record without ``shared_t``, from an earlier forwarder, without the
share decay). So
the offsets an instance learns equal those of one `PersonalPegasos` learning the same stream, bit for bit, however
the users are spread over instances. An event without ``shared_score`` is scored with the newest shared model the
model topic gave.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, cast

from ..features import DictHasher, EmailFeatures
from ..learners.personal import PersonalPegasos
from ..learners.personal_offset import PersonalOffset, feature_columns
from ..learners.protocols import BinaryLearner
from ..parse.parsing import BadRecord, Event
from ..run.predictions import Predictor

__all__ = [
    "DecodedOffsets",
    "InstanceStopped",
    "SharedModel",
    "UserEvent",
    "UserInstance",
    "offset_digest",
    "parse_user_event",
]


@dataclass(frozen=True, slots=True)
class SharedModel:
    """The shared model an instance scores mail without a ``shared_score`` with, and its version."""

    model: BinaryLearner
    version: int


class InstanceStopped(RuntimeError):
    """An instance stopped on an error of Kafka or of its state store; nothing after its last commit was committed,
    and an instance started again recovers its partitions' offsets from the changelog."""


@dataclass(frozen=True, slots=True)
class UserEvent:
    """One record of the users topic: the event, and the shared learner's f(x) and t when ``run`` forwarded it."""

    event: Event
    shared_score: float | None
    shared_t: int | None = None


def offset_digest(offset: PersonalOffset) -> str:
    """A digest of the offset (its `to_bytes`): equal digests, equal offsets."""
    import hashlib  # (only here: it loads OpenSSL, which a run without digests does without)

    return hashlib.blake2b(offset.to_bytes(), digest_size=16).hexdigest()


def _field(obj: dict, name: str, types: tuple[type, ...], where: str) -> Any:
    value = obj.get(name)
    if value is not None and not isinstance(value, types):
        raise BadRecord(where, f"{name}: expected {' or '.join(t.__name__ for t in types)}, got {value!r:.40}")
    return value


def _input(obj: dict, where: str) -> tuple[str | None, dict | None]:
    """(text, x) of a users-topic object: one of them."""
    text, x = _field(obj, "text", (str,), where), _field(obj, "x", (dict,), where)
    if (text is None) == (x is None):
        raise BadRecord(where, "expected either text or x")
    if x is not None and not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in x.values()
    ):
        raise BadRecord(where, "x: expected finite numbers")
    return text, x


def _shared_score(obj: dict, where: str) -> float | None:
    """The ``shared_score`` of a users-topic object: a finite number, or None without one."""
    shared = obj.get("shared_score")
    if shared is None:
        return None
    if isinstance(shared, bool) or not isinstance(shared, (int, float)):
        raise BadRecord(where, f"shared_score: expected a number, got {shared!r:.40}")
    if not math.isfinite(shared):
        raise BadRecord(where, "shared_score: expected a finite number")
    return float(shared)


def parse_user_event(value: bytes, key: bytes | None, where: str) -> UserEvent:
    """The event of a users-topic record (see the module), keyed by its user; a BadRecord naming ``where``."""
    try:
        obj = json.loads(value)
    except (ValueError, UnicodeDecodeError) as error:
        raise BadRecord(where, f"not JSON ({error})") from None
    if not isinstance(obj, dict):
        raise BadRecord(where, f"expected a JSON object, got {type(obj).__name__}")
    user = _field(obj, "user", (str,), where)
    if user is None or key is None or key.decode("utf-8", "replace") != user:
        raise BadRecord(where, f"user: expected a string equal to the record's key, got {user!r:.40} (key {key!r:.40})")
    text, x = _input(obj, where)
    shared, label = _shared_score(obj, where), _field(obj, "label", (bool,), where)
    if label is not None and shared is None:
        raise BadRecord(where, "a label without shared_score: labels reach the users topic through run's forward")
    shared_t = _field(obj, "shared_t", (int,), where)
    if isinstance(shared_t, bool) or (shared_t is not None and shared_t < 0):
        raise BadRecord(where, f"shared_t: expected a count (an integer >= 0), got {shared_t!r:.40}")
    event_id: Hashable = obj.get("id") if isinstance(obj.get("id"), (str, int)) else where
    return UserEvent(Event(event_id, where, x, text, label, user), shared, shared_t)


class DecodedOffsets:
    """The offsets an instance decoded last, each with the very bytes object it was decoded from or encoded to: the
    state of an event's user is decoded again only when it is another object (read from disk, recovered), so that a
    busy user's offset is not decoded at each of its events. At most ``max_bytes`` of offsets (by their bytes), the
    least recently used leaving first. An offset is taken out while an event uses it, and kept again after."""

    def __init__(self, max_bytes: int = 256 << 20) -> None:
        self.max_bytes = max_bytes
        self._offsets: OrderedDict[str, tuple[bytes, PersonalOffset]] = OrderedDict()
        self._bytes = 0

    def take(self, user: str, stored: bytes) -> PersonalOffset:
        """The offset of ``stored``, the user's state."""
        kept = self._offsets.pop(user, None)
        if kept is not None:
            self._bytes -= len(kept[0])
            if kept[0] is stored:
                return kept[1]
        return PersonalOffset.from_bytes(stored)

    def keep(self, user: str, data: bytes, offset: PersonalOffset) -> None:
        """Remember ``offset`` as the decoding of ``data``."""
        self._offsets[user] = (data, offset)
        self._bytes += len(data)
        while self._bytes > self.max_bytes and self._offsets:
            self._bytes -= len(self._offsets.popitem(last=False)[1][0])


class UserInstance:
    """Scores and learns the events of the users an instance owns; their offsets are the caller's state.

    Parameters
    ----------
    personal
        The settings every offset takes (step, λ_u, t0, learning rate, ``max_weights``); its shared learner is not
        used.
    features
        What turns an event into features, as the shared learner's job does.
    classes
        (negative, positive): the names of the classes predicted.
    shared
        The newest shared model (None while there is none), for events without ``shared_score``.
    digests
        Whether the output of a learned event carries its offset's `offset_digest`.
    """

    def __init__(
        self,
        personal: PersonalPegasos,
        features: EmailFeatures | DictHasher | None,
        classes: tuple[object, object] = (False, True),
        shared: Callable[[], SharedModel | None] = lambda: None,
        digests: bool = False,
    ) -> None:
        self.personal = personal
        self._predictor = Predictor(personal, features, classes)
        self.classes = classes
        self.shared = shared
        self.digests = digests
        self._decoded = DecodedOffsets()

    def process(self, user_event: UserEvent, stored: bytes | None) -> tuple[dict, bytes | None]:
        """The output of one event, its user's offset ``stored`` (None: none yet), and the offset to store after it
        (None: unchanged). A BadRecord for an event that cannot be scored; the offset is then unchanged."""
        event = user_event.event
        x = self._predictor.features_of(event)
        user = cast(str, event.user)
        offset = None if stored is None else self._decoded.take(user, stored)
        output: dict[str, Any] = {"id": event.id, "user": user}
        shared_score = user_event.shared_score
        if shared_score is None:
            served = self.shared()
            if served is None:
                raise BadRecord(event.position, "no shared model yet to score an event without shared_score")
            shared_score = served.model.decision_function_one(x)
            output["model_version"] = served.version
        personal_score, columns = 0.0, None
        if offset is not None:  # (x's columns, found once for the score and the step)
            columns = feature_columns(x)
            personal_score = offset.dot_columns(*columns, self.personal.t0)
        score = shared_score + personal_score
        output.update(predicted=self.classes[score > 0.0], score=score)
        if event.label is None:
            if offset is not None:
                self._decoded.keep(user, cast(bytes, stored), offset)
            return output, None
        offset = self.personal.new_offset() if offset is None else offset
        self.personal.learn_offset(
            offset,
            x,
            bool(event.label),
            shared_score,
            personal_score=personal_score,
            shared_t=user_event.shared_t,
            x_columns=columns,
        )
        output["t"] = offset.t
        if self.digests:
            output["digest"] = offset_digest(offset)
        data = offset.to_bytes()
        self._decoded.keep(user, data, offset)
        return output, data
