"""Event streams shared by the runner tests (imported by them; not a test module)."""

from __future__ import annotations

import json
import random


def binary_events(n: int, seed: int = 0, prefix: str = "e") -> list[dict]:
    """Linearly separable-ish sparse events {"id", "x", "label"}."""
    rng = random.Random(seed)
    truth = {f"f{j}": rng.uniform(-1, 1) for j in range(20)}
    events = []
    for i in range(n):
        x = {name: round(rng.gauss(0, 1), 4) for name in rng.sample(sorted(truth), 5)}
        label = sum(truth[k] * v for k, v in x.items()) + rng.gauss(0, 0.1) > 0
        events.append({"id": f"{prefix}{i}", "x": x, "label": label})
    return events


def jsonl(events: list[dict]) -> list[bytes]:
    """Each event as one JSON line (bytes, no newline)."""
    return [json.dumps(event).encode("utf-8") for event in events]
