"""Examples waiting for their label: delayed feedback, bounded in count and age."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = ["PendingLabels"]


@dataclass
class Pending:
    """A predicted example: its features, the score it got, and when."""

    x: dict
    score: float
    arrived: float


class PendingLabels:
    """Predicted examples by id, until their label arrives.

    At most ``max_pending`` are kept, for at most ``max_age_seconds``: the oldest go first, and are
    counted as ``dropped`` (over the count) or ``expired`` (too old).
    """

    def __init__(self, max_pending: int, max_age_seconds: float, clock: Callable[[], float] = time.monotonic):
        self.max_pending = max_pending
        self.max_age_seconds = max_age_seconds
        self.clock = clock
        self._waiting: OrderedDict[Hashable, Pending] = OrderedDict()
        self.dropped = 0
        self.expired = 0
        self.unmatched = 0

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, event_id: Hashable, x: dict, score: float) -> None:
        """Keep x until its label comes; a repeated id replaces the earlier example."""
        self._waiting.pop(event_id, None)
        self._waiting[event_id] = Pending(x, score, self.clock())
        while len(self._waiting) > self.max_pending:
            self._waiting.popitem(last=False)
            self.dropped += 1

    def items(self):
        """(id, Pending) pairs, oldest first."""
        return self._waiting.items()

    def restore(self, event_id: Hashable, x: dict, score: float, arrived: float) -> None:
        """Put back an example saved by a checkpoint, keeping the order of arrival."""
        self._waiting[event_id] = Pending(x, score, arrived)

    def take(self, event_id: Hashable) -> Pending | None:
        """The example waiting under this id, removed; None (counted as unmatched) if there is none."""
        self.expire()
        pending = self._waiting.pop(event_id, None)
        if pending is None:
            self.unmatched += 1
        return pending

    def expire(self) -> None:
        """Forget the examples that waited longer than ``max_age_seconds``."""
        limit = self.clock() - self.max_age_seconds
        while self._waiting:
            oldest = next(iter(self._waiting.values()))
            if oldest.arrived >= limit:
                break
            self._waiting.popitem(last=False)
            self.expired += 1
