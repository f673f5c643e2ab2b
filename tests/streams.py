"""Event streams and learner settings shared by the tests (imported by them; not a test module)."""

from __future__ import annotations

import json
import random

import numpy as np
from hypothesis import strategies as st

from pegasos_stream.learners.batch import LearnBatch
from pegasos_stream.learners.rows import Rows

#: Settings of PegasosClassifier (exact Pegasos: an explicit lambda_) covering every variant, rare branches included.
PEGASOS_PARAMS = st.fixed_dictionaries(
    {"lambda_": st.sampled_from([1e-4, 1e-2, 0.3, 2.0])},
    optional={
        "fit_intercept": st.sampled_from([False, True, "regularised"]),
        "projection": st.booleans(),
        "average": st.sampled_from([False, True, 1, 7, 40]),
        "class_weight": st.sampled_from([None, "balanced", {True: 3.0, False: 0.5}]),
        "prior": st.sampled_from([None, {0: 0.5, 3: -1.0, 9: 0.25}]),
        "horizon": st.sampled_from([None, 1, 2, 5, 30]),  # small horizons fold the scale often
        "t0": st.sampled_from([0, 1, 10, 1000]),
        "calibrate": st.booleans(),
    },
)


def int_stream(seed: int, n: int, n_features: int) -> tuple[list[dict], list[bool], list[float]]:
    """Examples over int columns 0..n_features - 1 with values of every size, labels and sample weights."""
    rng = random.Random(seed)
    xs, ys, ws = [], [], []
    for _ in range(n):
        keys = rng.sample(range(n_features), rng.randint(0, min(6, n_features)))
        xs.append({k: rng.choice([1, rng.gauss(0, 3), rng.uniform(-1e3, 1e3)]) for k in keys})
        ys.append(rng.random() < 0.4)
        ws.append(rng.choice([1.0, 1.0, 0.0, 2.5]))
    return xs, ys, ws


def learn_in_chunks(model, xs: list[dict], ys: list[bool], ws: list[float], chunk: int, columns: int | None):
    """``model.learn_rows`` over the stream in chunks of ``chunk`` rows, each learned whole: rows numbered locally,
    or, with ``columns``, by the int features themselves (keys ``range(columns)``). (decisions, probabilities)."""
    n = len(xs)
    decisions, probas = np.empty(n), np.empty(n)
    signs, weights = np.where(ys, 1.0, -1.0), np.array(ws)
    for start in range(0, n, chunk):
        batch = xs[start : start + chunk]
        rows = Rows.from_dicts(batch)
        if columns is not None:
            rows = Rows(rows.indptr, np.array(rows.keys, dtype=np.int64)[rows.indices], rows.data, range(columns))
        end = start + len(batch)
        stop, error = model.learn_rows(
            LearnBatch(rows, signs[start:end], weights[start:end], decisions[start:end], probas[start:end])
        )
        assert (stop, error) == (len(batch), None)
    return decisions.tolist(), probas.tolist()


def weighted_rows(
    stream: list[tuple[dict, bool, float]], in_place: int | None = None
) -> tuple[Rows, np.ndarray, np.ndarray]:
    """(rows, signs, sample weights) of (x, y, weight) examples: columns numbered locally, or, with ``in_place``, the
    int features themselves (keys ``range(in_place)``)."""
    rows = Rows.from_dicts([x for x, _, _ in stream])
    if in_place is not None:
        rows = Rows(rows.indptr, np.array(rows.keys, dtype=np.int64)[rows.indices], rows.data, range(in_place), True)
    signs = np.array([1.0 if y else -1.0 for _, y, _ in stream])
    return rows, signs, np.array([weight for _, _, weight in stream])


def learn_split(model, rows: Rows, signs: np.ndarray, weights: np.ndarray, splits: tuple[int, ...]) -> tuple:
    """``model.learn_rows`` over the rows in batches split at ``splits``, each learned whole, the last taken from its
    ``start`` in the whole batch. (decisions, probabilities) as lists."""
    n = len(rows)
    decisions, probas = np.empty(n), np.empty(n)
    bounds = [0, *splits, n]
    for a, b in zip(bounds, bounds[1:]):
        if b < n:
            part = slice(a, b)
            batch = LearnBatch(rows.slice(a, b), signs[part], weights[part], decisions[part], probas[part])
        else:
            batch = LearnBatch(rows, signs, weights, decisions, probas, a)
        assert model.learn_rows(batch) == (b - a if b < n else n, None)
    return decisions.tolist(), probas.tolist()


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
