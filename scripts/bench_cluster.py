"""Cluster mode simulated in one process: N learners, each on its share of a stream, syncing deltas every B events.

Protocol (deterministic, in one process, as the ``Harness`` of ``tests/test_cluster.py``): event k of the stream
goes to learner k mod N, which reads partition ("in", k mod N) (round-robin partitions). Each learner is a
`ClusterSync` around a `StepRecorder` of its own `PegasosClassifier`, and all of them share one `MemoryLog`, the
delta topic. The learners advance in lockstep: in each round every learner learns its next event, its decision
being the one its own copy of the model gives before learning it; then each learner that has learned B events
since its last sync syncs, in learner order (``ClusterSync.write``: publish its delta, fold the log to its end in
log order, take up a copy of the merged model). A learner learns the B events between two syncs in one compiled
``learn_rows`` call, which records the same steps as B ``learn_one`` calls. After the stream every learner syncs
twice, so that all of them fold everything. "Examples seen" at event k is k, the events the cluster was given
before it; the model that scores event k has folded all but the last N·B or fewer of them, plus the learner's own
events since its last sync.

Merge rules (``cluster.merge``), each run over the whole grid: ``additive`` (``StepRecorder(model)``: a delta carries
the violated steps, and the cluster replays them with each learner's recorded margin tests, "delayed Pegasos") and
``sequential`` (``StepRecorder(model, every_row=True)``: a delta carries every example, and the cluster's model learns
them again in log order with its own tests). Each run's merged model is compared (``model_digest``) with one
`PegasosClassifier` that learned the events in the order of the delta log, read back from the deltas' input ranges:
equal, bit for bit, is asserted for every sequential run, and holds for additive runs with N = 1 only.

Grid: N ∈ {1, 2, 4, 8, 16}, B ∈ {100, 1000, 10000}, for each merge. Baselines, in the same tables: one learner on
every N-th event (learner 0's partition: what one process that keeps up with only 1/N of the stream learns), and
the mini-batch Pegasos of ``PegasosClassifier.learn_many`` with batches of N·B (one step per batch, decisions taken
before each batch). The batches are computed on sparse rows by `minibatch_pegasos`, because ``learn_many`` takes
dense frames; it is checked against ``learn_many`` itself on a prefix of each stream.

* SpamAssassin (``--data``; skipped with a note when the file is missing): the features of ``configs/spam.yaml``
  (2^20 hashed columns, extracted once) and the parameters of its Pegasos member (λ = 1e-5, t0 = 30,000).
  Metric: prequential (1−ROCA)% of the decisions. The target (relative loss ≤ 5% against one learner, N ≤ 8) is
  also run with fresher views, B = ⌊n/(N·k)⌋ for k in FRESH_SYNCS (k syncs per learner, views at most about n/k
  events of the stream old whatever N) and B = 1, where the sequential cluster is checked against `lagged`: one
  process scoring each event with its model of N − 1 events earlier.
* RCV1-like rows (``_stream_data.rcv1_like_rows``): ``--rows`` training rows, then a held-out sample of
  ``--test-rows``, generated as one concept; λ = 1e-4. Metric: the primal objective λ/2·‖w‖² + mean hinge loss on
  the held-out sample of the merged model, after the sync rounds that reach each multiple of n/16 examples and at
  the end.

Also measured: the bytes of the encoded deltas on the delta topic (each written once and read by all N learners),
compared with a model snapshot (the bytes of a checkpoint), and the CPU time a learner spends in its syncs
(``ClusterSync.pauses``: encoding its delta, folding every learner's delta, copying the merged model).

Then real processes against a local broker (``_cluster_processes``; ``--no-processes`` leaves them out): events/s
of 1 and 2 learners, predictions/s of 1 and 2 ``serve`` replicas, and the model age the replicas serve with.

Usage: ``python scripts/bench_cluster.py [--data PATH] [--out reports/cluster.json] [--rows 256000]
[--test-rows 10000] [--seed 0] [--quick] [--no-processes]``
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
from _cluster_processes import process_sections
from _harness import (
    LOAD_AT_START,
    REPO,
    add_data_argument,
    add_out_argument,
    fmt,
    load_messages,
    prepare_timing,
    prequential_metrics,
    section,
    write_results,
)
from _stream_data import rcv1_like_rows
from matplotlib.figure import Figure

from pegasos_stream import PegasosClassifier
from pegasos_stream.cli.assemble import build_features
from pegasos_stream.cli.config import load_config
from pegasos_stream.distribute.cluster import ClusterState, ClusterSync, MemoryLog, decode_delta
from pegasos_stream.learners.batch import LearnBatch
from pegasos_stream.learners.rows import Rows
from pegasos_stream.learners.steps import StepRecorder
from pegasos_stream.persist.checkpoint import model_digest, write_checkpoint

SPAM_CONFIG = REPO / "configs" / "spam.yaml"
#: The grid: learners N and events between two syncs of a learner B.
LEARNERS = (1, 2, 4, 8, 16)
EVERY = (100, 1000, 10_000)
DEFAULT_EVERY = 1000
#: The target: (1−ROCA)% of the cluster at most 5% above one learner's, for these N at B = DEFAULT_EVERY.
TARGET = 0.05
TARGET_LEARNERS = (2, 4, 8)
RCV1_FEATURES = 47_236
RCV1_LAMBDA = 1e-4
#: Messages (--quick) and the points of the (1−ROCA)% curve: every CURVE_STEP examples from CURVE_START on.
QUICK_MESSAGES = 1500
CURVE_START, CURVE_STEP = 1000, 500
#: Batches of 100 rows on which minibatch_pegasos is checked against learn_many.
CHECK_BATCH, CHECK_BATCHES = 100, 10
#: Syncs per learner of the fresher-view runs of the target: B = ⌊n/(N·k)⌋ (and B = 1).
FRESH_SYNCS = (6, 15, 60, 240)
#: The merge rules: replay each learner's steps with its tests, or learn every example again in log order.
MERGES = ("additive", "sequential")
#: The (N, B) at which the additive cluster is checked against `delayed_pegasos`.
REFERENCE = (4, 100)
TOPIC = "in"
CONFIG_DIGEST = "bench_cluster"
NO_PROBAS = np.empty(0)


# -- streams -----------------------------------------------------------------------------------------------------


@dataclass
class Problem:
    """A stream to simulate on: rows (columns = weight columns), label signs, the model every learner starts from,
    and, for a held-out objective, the function of dense weights and the examples seen at which to evaluate it."""

    name: str
    rows: Rows
    signs: np.ndarray
    params: dict
    objective: Callable[[np.ndarray], float] | None = None
    checkpoints: tuple[int, ...] = ()

    @property
    def n(self) -> int:
        return len(self.signs)

    @property
    def n_features(self) -> int:
        return int(self.params["n_features"])

    def model(self) -> PegasosClassifier:
        return PegasosClassifier(**self.params)

    def matrix(self) -> sp.csr_matrix:
        return to_matrix(self.rows, self.n_features)


def to_matrix(rows: Rows, n_features: int) -> sp.csr_matrix:
    """Rows over weight columns as a scipy CSR matrix (sharing their arrays)."""
    return sp.csr_matrix((rows.data, rows.indices, rows.indptr), shape=(len(rows), n_features))


def take(rows: Rows, index: np.ndarray) -> Rows:
    """Rows ``index`` of ``rows``, in that order, as new CSR rows with the same keys."""
    first = rows.indptr[index]
    lengths = rows.indptr[index + 1] - first
    at = np.repeat(first - np.cumsum(lengths) + lengths, lengths) + np.arange(int(lengths.sum()))
    indptr = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return Rows(indptr, rows.indices[at], rows.data[at], rows.keys, rows.distinct)


def spam_problem(path: Path, limit: int | None) -> tuple[Problem, np.ndarray, float]:
    """SpamAssassin with the features of configs/spam.yaml and its Pegasos member's parameters; also the labels
    and the seconds of the feature extraction."""
    config = load_config(SPAM_CONFIG)
    messages = load_messages(path)[:limit]
    started = time.perf_counter()
    rows = Rows(*build_features(config).transform_texts([m.text for m in messages], hashed_columns=True))
    extract_seconds = time.perf_counter() - started
    labels = np.array([m.is_spam for m in messages])
    model = config["model"]
    params = {"lambda_": float(model["lambda_"]), "t0": int(model["t0"]), "n_features": int(model["n_features"])}
    return Problem("SpamAssassin", rows, np.where(labels, 1.0, -1.0), params), labels, extract_seconds


def rcv1_problem(n: int, n_test: int, seed: int) -> Problem:
    """``n`` RCV1-like training rows and the objective on the ``n_test`` rows generated after them."""
    indptr, indices, data, labels = [0], [], [], []
    for columns, values, label in rcv1_like_rows(n + n_test, RCV1_FEATURES, seed=seed):
        indices.append(columns)
        data.append(values)
        indptr.append(indptr[-1] + len(columns))
        labels.append(label)
    everything = Rows(
        np.array(indptr, dtype=np.int64),
        np.concatenate(indices).astype(np.int64),
        np.concatenate(data),
        range(RCV1_FEATURES),
        True,
    )
    signs = np.where(labels, 1.0, -1.0)
    test, test_signs = to_matrix(everything.slice(n, n + n_test), RCV1_FEATURES), signs[n:]

    def objective(w: np.ndarray) -> float:
        hinge = np.maximum(0.0, 1.0 - test_signs * (test @ w))
        return float(RCV1_LAMBDA / 2 * (w @ w) + hinge.mean())

    params = {"lambda_": RCV1_LAMBDA, "n_features": RCV1_FEATURES}
    checkpoints = tuple(sorted({n * k // 16 for k in range(1, 17)}))
    return Problem("RCV1-like", everything.slice(0, n), signs[:n], params, objective, checkpoints)


def dense(model: PegasosClassifier, n_features: int) -> np.ndarray:
    """A model's weights as one array."""
    weights = model.weights
    w = np.zeros(n_features)
    w[np.fromiter(weights.keys(), np.int64, len(weights))] = np.fromiter(weights.values(), np.float64, len(weights))
    return w


# -- runs ----------------------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One system on one stream: its decisions (in the order of the events it scored), the objective at examples
    seen, and what it cost."""

    decisions: np.ndarray
    points: list[tuple[int, float]] = field(default_factory=list)
    learn_seconds: float = 0.0
    sync_seconds: float = 0.0  # every sync of every learner, the two at the end included
    pauses: list[float] = field(default_factory=list)  # seconds of each regular sync (every B events)
    deltas: int = 0
    delta_bytes: int = 0
    model: PegasosClassifier | None = None
    in_log_order: bool = False  # the merged model is one process's on the events in the order of the delta log

    def at(self, examples: int) -> tuple[int, float] | None:
        """The first objective point at ``examples`` or more."""
        return next((point for point in self.points if point[0] >= examples), None)


def shares(problem: Problem, learners: int) -> list[tuple[Rows, np.ndarray]]:
    """Each learner's rows and signs: learner i gets events i, i + N, i + 2N, …"""
    return [
        (take(problem.rows, np.arange(i, problem.n, learners)), np.ascontiguousarray(problem.signs[i::learners]))
        for i in range(learners)
    ]


def simulate(problem: Problem, parts: Sequence[tuple[Rows, np.ndarray]], every: int, merge: str) -> Run:
    """The cluster of ``len(parts)`` learners syncing every ``every`` events with the ``merge`` rule, in lockstep
    (see the module); ``in_log_order`` compares its merged model with `one_process` on the log's order."""
    learners = len(parts)
    log = MemoryLog()
    syncs = [
        ClusterSync(
            StepRecorder(problem.model(), every_row=merge == "sequential"),
            ClusterState(problem.model()),
            log.channel(),
            f"learner-{i}",
            CONFIG_DIGEST,
            every_events=every,
            every_ms=None,
        )
        for i in range(learners)
    ]
    own = [np.empty(len(signs)) for _, signs in parts]
    learned = [0] * learners
    ones = np.ones(every)
    run = Run(np.empty(problem.n))
    pending = list(problem.checkpoints)

    def sync(i: int) -> None:
        syncs[i].write(None, {"counts": [learned[i], 0, 0, 0]}, {"offsets": [[TOPIC, i, learned[i]]]})

    def evaluate(model: PegasosClassifier) -> None:
        if problem.objective is not None and pending and model.t >= pending[0]:
            run.points.append((model.t, problem.objective(dense(model, problem.n_features))))
            while pending and pending[0] <= model.t:
                pending.pop(0)

    for start in range(0, len(parts[0][1]), every):
        due = []
        for i, (rows, signs) in enumerate(parts):
            stop = min(start + every, len(signs))
            if stop <= start:
                continue
            began = time.perf_counter()
            recorder = syncs[i].recorder
            _, error = recorder.learn_rows(
                LearnBatch(
                    rows.slice(start, stop), signs[start:stop], ones[: stop - start], own[i][start:stop], NO_PROBAS
                )
            )
            run.learn_seconds += time.perf_counter() - began
            if error is not None:
                raise error
            learned[i] = stop
            if stop - start == every:
                due.append(i)
        for i in due:
            sync(i)
            run.pauses.append(syncs[i].pauses[-1])
        if due:
            evaluate(syncs[due[-1]].state.model)
    for _ in range(2):
        for i in range(learners):
            sync(i)
    run.sync_seconds = sum(sum(s.pauses) for s in syncs)
    merged = syncs[0].state.model
    if merged.t != problem.n or len({model_digest(s.state.model) for s in syncs}) != 1:
        raise RuntimeError(f"the learners do not hold one merged model of {problem.n} steps (t = {merged.t})")
    if problem.objective is not None and (not run.points or run.points[-1][0] != problem.n):
        run.points.append((problem.n, problem.objective(dense(merged, problem.n_features))))
    for i in range(learners):
        run.decisions[i::learners] = own[i]
    run.deltas, run.delta_bytes, run.model = len(log.records), sum(map(len, log.records)), merged
    run.in_log_order = model_digest(merged) == model_digest(one_process(problem, log_order(log, learners)))
    return run


def log_order(log: MemoryLog, learners: int) -> np.ndarray:
    """The events of a simulated cluster's delta log, in log order, read back from the deltas' input ranges:
    offset o of partition i is event i + N·o (a partition's first delta starts at NEW, offset 0 here); a ValueError
    unless every event appears exactly once."""
    pieces = [
        partition + learners * np.arange(max(start, 0), end)
        for data in log.records
        for (_, partition), (start, end) in decode_delta(data).ranges.items()
    ]
    order = np.concatenate(pieces)
    if not np.array_equal(np.sort(order), np.arange(len(order))):
        raise ValueError("the delta log does not cover every event exactly once")
    return order


def one_process(problem: Problem, order: np.ndarray) -> PegasosClassifier:
    """One `PegasosClassifier` that learned the events of the stream in ``order`` (one ``learn_rows`` call)."""
    model = problem.model()
    n = len(order)
    _, error = model.learn_rows(
        LearnBatch(take(problem.rows, order), problem.signs[order], np.ones(n), np.empty(n), NO_PROBAS)
    )
    if error is not None:
        raise error
    return model


def single(problem: Problem, rows: Rows, signs: np.ndarray) -> Run:
    """One learner (``learn_rows``) on ``rows``; its objective at the checkpoints it reaches and at its end."""
    model = problem.model()
    run = Run(np.empty(len(signs)))
    bounds = [c for c in problem.checkpoints if c < len(signs)] + [len(signs)]
    start = 0
    for stop in bounds:
        _, error = model.learn_rows(
            LearnBatch(
                rows.slice(start, stop), signs[start:stop], np.ones(stop - start), run.decisions[start:stop], NO_PROBAS
            )
        )
        if error is not None:
            raise error
        if problem.objective is not None:
            run.points.append((stop, problem.objective(dense(model, problem.n_features))))
        start = stop
    return run


def minibatch_pegasos(problem: Problem, batch: int) -> tuple[Run, np.ndarray]:
    """``learn_many``'s mini-batch Pegasos over batches of ``batch`` rows, on sparse rows: the margins of a batch's
    rows before it (its decisions), then one step at t ← t + 1, t' = t + t0, k the batch's rows:
    w ← (1 − 1/t')·w + 1/(λ·t'·k)·Σ y·x over the rows with y·⟨w, x⟩ < 1 (the models here have no class weights,
    intercept, projection or horizon). Returns the run and the final weights."""
    matrix = problem.matrix()
    lambda_, t0 = problem.params["lambda_"], problem.params.get("t0", 0)
    w = np.zeros(problem.n_features)
    run = Run(np.empty(problem.n))
    pending = list(problem.checkpoints)
    for t, start in enumerate(range(0, problem.n, batch), 1):
        stop = min(start + batch, problem.n)
        block, signs = matrix[start:stop], problem.signs[start:stop]
        margins = block @ w
        run.decisions[start:stop] = margins
        coefs = np.where(signs * margins < 1.0, signs, 0.0)
        t_eff = t + t0
        rate = 1.0 / (lambda_ * t_eff * (stop - start))
        w *= 1.0 - 1.0 / t_eff
        w += rate * (block.T @ coefs)
        if problem.objective is not None and pending and stop >= pending[0]:
            run.points.append((stop, problem.objective(w)))
            while pending and pending[0] <= stop:
                pending.pop(0)
    if problem.objective is not None and (not run.points or run.points[-1][0] != problem.n):
        run.points.append((problem.n, problem.objective(w)))
    return run, w


def check_minibatch(problem: Problem) -> float:
    """max |w − w'| / max |w'| after CHECK_BATCHES batches of CHECK_BATCH rows: w from `minibatch_pegasos`, w' from
    ``learn_many`` itself (a pandas frame of each batch's columns)."""
    n = min(CHECK_BATCH * CHECK_BATCHES, problem.n)
    model = problem.model()
    matrix = problem.matrix()
    for start in range(0, n, CHECK_BATCH):
        block = matrix[start : min(start + CHECK_BATCH, n)]
        columns = np.unique(block.indices)
        frame = pd.DataFrame(block[:, columns].toarray(), columns=columns.tolist())
        model.learn_many(frame, pd.Series(problem.signs[start : start + block.shape[0]] > 0))
    prefix = dataclasses.replace(problem, rows=problem.rows.slice(0, n), signs=problem.signs[:n], checkpoints=())
    _, w = minibatch_pegasos(prefix, CHECK_BATCH)
    reference = dense(model, problem.n_features)
    return float(np.abs(w - reference).max() / np.abs(reference).max())


def delayed_pegasos(problem: Problem, learners: int, every: int) -> np.ndarray:
    """The decisions of the simulated protocol computed densely from its definition, without the package's steps,
    deltas or fold (the ``DelayedPegasos`` of tests/test_cluster.py, with t0): plain Pegasos keeps
    w_t = S_t/(λ·(t + t0)), S_t the sum of y·x over the violated steps. Each learner tests margins on its view (the
    merged S and t at its last sync, plus its own steps since); at a sync the merged S and t take its steps in order,
    with the tests it made."""
    rows, signs = problem.rows, problem.signs
    lambda_, t0 = problem.params["lambda_"], problem.params.get("t0", 0)

    def row(k: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = rows.indptr[k], rows.indptr[k + 1]
        return rows.indices[a:b], rows.data[a:b]

    merged, merged_t = np.zeros(problem.n_features), 0
    views = [(merged.copy(), 0) for _ in range(learners)]
    violated: list[list[int]] = [[] for _ in range(learners)]  # each learner's violated events since its last sync
    since = [0] * learners  # each learner's steps since its last sync
    decisions = np.empty(problem.n)
    for start in range(0, share_size(problem.n, learners), every):
        due = []
        for i, (view, t) in enumerate(views):
            events = range(i + learners * start, min(i + learners * (start + every), problem.n), learners)
            for k in events:
                columns, values = row(k)
                decisions[k] = float(values @ view[columns]) / (lambda_ * max(t + t0, 1))
                t += 1
                if signs[k] * decisions[k] < 1.0:
                    view[columns] += signs[k] * values
                    violated[i].append(k)
            views[i] = (view, t)
            since[i] += len(events)
            if len(events) == every:
                due.append(i)
        for i in due:
            for k in violated[i]:
                columns, values = row(k)
                merged[columns] += signs[k] * values
            merged_t += since[i]
            violated[i], since[i] = [], 0
            views[i] = (merged.copy(), merged_t)
    return decisions


def learning_rates(problem: Problem, repeat: int = 3) -> dict[str, float]:
    """Events/s of one learner over the whole stream, fastest of ``repeat``: a cluster learner of each merge
    (``StepRecorder.learn_rows``, recording its steps, every example for ``sequential``) and, under "bare", the
    bare model (``PegasosClassifier.learn_rows``)."""
    rates = {}
    for name in (*MERGES, "bare"):
        best = float("inf")
        for _ in range(repeat):
            model = problem.model()
            learner = model if name == "bare" else StepRecorder(model, every_row=name == "sequential")
            began = time.perf_counter()
            learner.learn_rows(
                LearnBatch(problem.rows, problem.signs, np.ones(problem.n), np.empty(problem.n), NO_PROBAS)
            )
            best = min(best, time.perf_counter() - began)
        rates[name] = problem.n / best
    return rates


def snapshot_bytes(model: PegasosClassifier) -> int:
    """The bytes of a checkpoint of ``model`` alone (``write_checkpoint``)."""
    with tempfile.TemporaryDirectory() as directory:
        return len(write_checkpoint(Path(directory) / "model.pgs", {"model": model}))


@dataclass
class Results:
    """Every run on one stream."""

    problem: Problem
    cluster: dict[tuple[str, int, int], Run]  # (merge, N, B)
    fresh: dict[tuple[str, int, int], Run]  # (merge, N, B), B in fresh_blocks
    lag_check: dict[int, bool]  # N: the sequential cluster at B = 1 scores as `lagged` with lag N − 1
    subsample: dict[int, Run]  # N: one learner on every N-th event
    minibatch: dict[int, Run]  # batch rows N·B
    rates: dict[str, float]  # events/s of one recording learner per merge, and of the bare model ("bare")
    snapshot: int
    check: float  # minibatch_pegasos against learn_many
    reference: float  # the additive cluster at REFERENCE against delayed_pegasos: max |Δ decision| / max |decision|

    @property
    def rate(self) -> float:
        """Events/s of one learner alone: the additive recorder (what the cost table compares with)."""
        return self.rates["additive"]


def fresh_blocks(n: int, learners: int) -> list[int]:
    """The B of the fresher-view runs of N = ``learners`` on ``n`` events, largest first: ⌊n/(N·k)⌋ for k in
    FRESH_SYNCS, and 1."""
    return sorted({max(n // (learners * syncs), 1) for syncs in FRESH_SYNCS} | {1}, reverse=True)


def lagged(problem: Problem, lag: int) -> np.ndarray:
    """One learner's decisions on the stream, event k scored by its model of the events before k − lag (the first
    lag + 1 events by the new model). N learners that learn at once score each event at least N − 1 events late."""
    model, rows, n = problem.model(), problem.rows, problem.n
    decisions = np.empty(n)
    scored = 0
    for learned in range(n):
        for k in range(scored, min(learned + lag + 1, n)):
            decisions[k] = model.decision_function_one(rows.row(k))
        scored = min(learned + lag + 1, n)
        _, error = model.learn_rows(
            LearnBatch(
                rows.slice(learned, learned + 1),
                problem.signs[learned : learned + 1],
                np.ones(1),
                np.empty(1),
                NO_PROBAS,
            )
        )
        if error is not None:
            raise error
    return decisions


def measure(problem: Problem, fresh: bool = False) -> Results:
    """The grid for each merge, the baselines and the costs on one stream; with ``fresh``, the target's N at
    the B of `fresh_blocks` too. Raises unless every sequential merged model is one process's on the
    events in log order."""
    cluster: dict[tuple[str, int, int], Run] = {}
    fresher: dict[tuple[str, int, int], Run] = {}
    subsample, minibatch = {}, {}

    def simulated(parts: list[tuple[Rows, np.ndarray]], every: int, merge: str) -> Run:
        learners = len(parts)
        done = cluster.get((merge, learners, every))
        if done is not None:
            return done
        began = time.perf_counter()
        result = simulate(problem, parts, every, merge)
        print(
            f"[{problem.name}] {merge} N={learners} B={every}: {result.deltas} deltas, "
            f"{result.delta_bytes / problem.n:,.0f} B/event, {time.perf_counter() - began:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        if merge == "sequential" and not result.in_log_order:
            raise RuntimeError(f"sequential N={learners} B={every}: not one process's model on the log's order")
        return result

    for learners in LEARNERS:
        parts = shares(problem, learners)
        subsample[learners] = single(problem, *parts[0])
        for every in EVERY:
            minibatch[learners * every], _ = minibatch_pegasos(problem, learners * every)
            for merge in MERGES:
                cluster[merge, learners, every] = simulated(parts, every, merge)
        if fresh and learners in TARGET_LEARNERS:
            for every in fresh_blocks(problem.n, learners):
                for merge in MERGES:
                    fresher[merge, learners, every] = simulated(parts, every, merge)
    merged = cluster["additive", 1, DEFAULT_EVERY].model
    assert merged is not None
    expected = delayed_pegasos(problem, *REFERENCE)
    reference = float(
        np.abs(cluster["additive", REFERENCE[0], REFERENCE[1]].decisions - expected).max() / np.abs(expected).max()
    )
    lag_check = {
        learners: np.array_equal(fresher["sequential", learners, 1].decisions, lagged(problem, learners - 1))
        for learners in (TARGET_LEARNERS if fresh else ())
    }
    return Results(
        problem,
        cluster,
        fresher,
        lag_check,
        subsample,
        minibatch,
        learning_rates(problem),
        snapshot_bytes(merged),
        check_minibatch(problem),
        reference,
    )


# -- tables -------------------------------------------------------------------------------------------------------


def roca(decisions: np.ndarray, positives: np.ndarray) -> float | None:
    """(1−ROCA)% of the decisions; None without both classes."""
    if positives.all() or not positives.any():
        return None
    return prequential_metrics(decisions, positives)[1]


def error_rate(decisions: np.ndarray, signs: np.ndarray) -> float:
    """Prequential error rate (%) of the decisions (decision > 0 is positive)."""
    return 100.0 * float(np.mean((decisions > 0.0) != (signs > 0.0)))


def relative(value: float | None, reference: float | None) -> float | None:
    return None if value is None or reference is None else value / reference - 1.0


def share_size(n: int, learners: int) -> int:
    """Events of learner 0 (and of the one learner on every N-th event): ⌈n/N⌉."""
    return -(-n // learners)


def protocol_note(results: Results) -> str:
    n = results.problem.n
    same = all(
        np.array_equal(results.cluster[merge, 1, every].decisions, results.subsample[1].decisions)
        for merge in MERGES
        for every in EVERY
    )
    return (
        f"{results.problem.name}, {n:,} events. Protocol: event k goes to learner k mod N (round-robin partitions); "
        "the learners advance in lockstep, each scoring an event with its own copy of the model before learning "
        "it, and a learner syncs once it has learned B events since its last sync (in learner order within a "
        "round): it publishes its delta, folds the delta log to its end and takes up the merged model. After the "
        "stream every learner syncs twice; all then hold the same merged model, of t = "
        f"{n:,} steps (checked by digest). Merge: 'additive' replays each learner's violated steps with the margin "
        "tests it made (delayed Pegasos); 'sequential' ships every example and the cluster's model learns them "
        "again in log order with its own tests. 'Examples seen' at event k is k, the events the cluster was given "
        "before it. With N = 1 the cluster's decisions equal one learner's bit for bit at every B, with either "
        "merge: "
        + ("yes." if same else "**NO**.")
        + f" At N = {REFERENCE[0]}, B = {REFERENCE[1]:,} the additive cluster's decisions were checked against "
        "`delayed_pegasos`, the same protocol computed densely from its definition (w = S/(λ·(t + t0)), each "
        "learner's margin tests on its view, the merged S and t taking each learner's steps at its syncs) without "
        f"the package's steps, deltas or fold: max |Δ decision| / max |decision| = {results.reference:.1e}. "
        + log_order_note(results)
    )


def log_order_note(results: Results) -> str:
    """Which merged models are, bit for bit, one process's on the events in the order of the delta log."""
    counts = []
    for merge in MERGES:
        runs = {key[1:]: run for key, run in results.cluster.items() if key[0] == merge}
        equal = sorted(key for key, run in runs.items() if run.in_log_order)
        at = sorted({learners for learners, _ in equal})
        text = f"{merge}: {len(equal)} of {len(runs)} (N, B)" + (
            f", at N = {', '.join(map(str, at))}" if equal and len(equal) < len(runs) else ""
        )
        fresh = [run.in_log_order for key, run in results.fresh.items() if key[0] == merge]
        if fresh:
            text += f"; of the fresher-view runs of the target, {sum(fresh)} of {len(fresh)}"
        counts.append(text)
    return (
        "Bit for bit against one process: each run's merged model was compared (model_digest) with one "
        "PegasosClassifier that learned the events, in one learn_rows call, in the order their deltas were folded "
        "(the order of the delta log, read back from each delta's input range: offset o of partition i is event "
        "i + N·o). Equal: "
        + "; ".join(counts)
        + ". Asserted for every sequential run (the script stops otherwise); an additive cluster with N > 1 is "
        "delayed Pegasos, not one process."
    )


def minibatch_note(results: Results) -> str:
    return (
        "learn_many: mini-batch Pegasos with batches of N·B consecutive events (one step per batch, t += 1), each "
        "batch scored by the weights before it. Computed on sparse rows by the script's minibatch_pegasos (learn_many "
        f"takes a dense frame: a batch of {DEFAULT_EVERY:,} events would be a frame of all the columns it uses); "
        f"checked against learn_many itself on the first {CHECK_BATCHES} batches of {CHECK_BATCH} events: "
        f"max |Δw| / max |w| = {results.check:.1e}. It does not depend on the merge."
    )


def spam_sections(results: Results, labels: np.ndarray, extract_seconds: float, figure: str | None) -> list[dict]:
    """Quality, the target (at B = DEFAULT_EVERY and with fresher views), the (1−ROCA)% curve."""
    n = results.problem.n
    rows = []
    for (merge, learners, every), run in results.cluster.items():
        m = share_size(n, learners)
        own = results.subsample[learners]
        value = roca(run.decisions, labels)
        rows.append(
            [
                learners,
                f"{every:,}",
                merge,
                fmt(value, ".3f"),
                fmt(relative(value, roca(results.cluster[merge, 1, every].decisions, labels)), "+.1%"),
                fmt(roca(run.decisions[::learners], labels[::learners]), ".3f"),
                fmt(roca(run.decisions[:m], labels[:m]), ".3f"),
                fmt(roca(own.decisions, labels[::learners]), ".3f"),
                f"{m:,}",
                fmt(roca(results.minibatch[learners * every].decisions, labels), ".3f"),
            ]
        )
    quality = section(
        "SpamAssassin: prequential (1−ROCA)% of the cluster, N learners × B events between syncs, per merge rule",
        [
            ">N",
            ">B",
            "merge",
            ">cluster, all events",
            ">vs N = 1",
            ">cluster, learner 0's events",
            ">cluster, first ⌈n/N⌉ events",
            ">1 learner on every N-th event",
            ">its events ⌈n/N⌉",
            ">learn_many, batches of N·B",
        ],
        rows,
        [
            protocol_note(results),
            "Columns: 'cluster, all events': (1−ROCA)% of the decisions on all events, in stream order; 'vs N = 1': "
            "its relative change from one learner's on the same events, with the same examples seen (lower is better); "
            "'cluster, learner 0's events': on events 0, N, 2N, …, the very events of the next column; 'cluster, first "
            "⌈n/N⌉ events': at the examples seen of the next column; '1 learner on every N-th event': one process that "
            "keeps up with 1/N of the stream learns events 0, N, 2N, … only, scored over its own ⌈n/N⌉ events (its "
            "model has seen as many examples as it scored: equal examples seen with the column before, the same "
            "events as the cluster's learner-0 column). This is what the cluster must beat. The last three columns "
            "do not depend on the merge.",
            minibatch_note(results) + " A batch of n or more events is one step after scoring everything with w = 0: "
            "(1−ROCA)% = 50.",
            f"Model: PegasosClassifier({', '.join(f'{k}={v}' for k, v in results.problem.params.items())}), the "
            "Pegasos member of configs/spam.yaml; features of configs/spam.yaml extracted once "
            f"({extract_seconds:.2f} s, {n / extract_seconds:,.0f} messages/s) and shared by every run.",
        ],
    )
    target_columns = [
        "merge",
        ">syncs per learner before the end",
        ">1 learner (N = 1)",
        ">cluster",
        ">relative loss",
        "target met",
        ">1 learner on every N-th event",
        ">cluster on its events",
        ">vs 1 learner on every N-th event",
        "beats it",
    ]
    target_rows = [
        [learners, f"{DEFAULT_EVERY:,}", *target_cells(results, labels, merge, learners, DEFAULT_EVERY)]
        for learners in TARGET_LEARNERS
        for merge in MERGES
    ]
    target = section(
        f"SpamAssassin: the target, (1−ROCA)% of the cluster at most {TARGET:.0%} above one learner's "
        f"(B = {DEFAULT_EVERY:,}), and against one learner on every N-th event",
        [">N", ">B", *target_columns],
        target_rows,
        [target_note(results, labels), why_note(results, labels)],
    )
    sections = [quality, target]
    if results.fresh:
        fresh_rows = []
        for (merge, learners, every), run in results.fresh.items():
            fresh_rows.append(
                [
                    learners,
                    f"{every:,}",
                    f"{learners * every:,}",
                    *target_cells(results, labels, merge, learners, every, run),
                ]
            )
        sections.append(
            section(
                f"SpamAssassin: the target with fresher views, B = ⌊n/(N·k)⌋ for k = "
                f"{', '.join(map(str, FRESH_SYNCS))} syncs per learner, and B = 1",
                [">N", ">B", ">N·B", *target_columns],
                fresh_rows,
                [
                    "The columns of the table above, at B = ⌊n/(N·k)⌋: each learner syncs about k times before the end "
                    "of the stream, and the events of the other learners a view misses, up to (N − 1)·B, are about "
                    "n/k whatever N; B = 1 syncs after every event.",
                    fresh_note(results, labels),
                ],
            )
        )
    points = [*range(CURVE_START, n, CURVE_STEP), n]
    curve_rows = []
    for learners in LEARNERS:
        for merge in MERGES:
            decisions = results.cluster[merge, learners, DEFAULT_EVERY].decisions
            curve_rows.append(
                [f"cluster N = {learners}, {merge}", *(fmt(roca(decisions[:m], labels[:m]), ".3f") for m in points)]
            )
    for learners in LEARNERS[1:]:
        scored, scored_labels = results.subsample[learners].decisions, labels[::learners]
        curve_rows.append(
            [
                f"1 learner on 1 event in {learners}",
                *(fmt(roca(scored[:m], scored_labels[:m]) if m <= len(scored) else None, ".3f") for m in points),
            ]
        )
    curve = section(
        f"SpamAssassin: (1−ROCA)% over the first m examples seen (B = {DEFAULT_EVERY:,})",
        ["system", *(f">{m:,}" for m in points)],
        curve_rows,
        [
            "Cumulative prequential (1−ROCA)% of the decisions on the first m events a system scored: for the cluster "
            "the first m events of the stream, for one learner on every N-th event its own first m events (m "
            f"examples seen either way). The curve starts at {CURVE_START:,}: the stream opens with nearly only one "
            f"class ({int(labels[:500].sum())} spam in its first 500 messages). With N = 1 the two merges are the "
            "same learner."
        ],
        [figure] if figure else [],
    )
    return [*sections, curve]


def target_cells(
    results: Results, labels: np.ndarray, merge: str, learners: int, every: int, run: Run | None = None
) -> list[str]:
    """A target row from the merge on: syncs per learner before the end, (1−ROCA)% of one learner and of the
    cluster, the relative loss and whether it meets the target; one learner on every N-th event, the cluster on
    the same events, the relative change and whether the cluster beats it. ``run`` defaults to the grid's."""
    n = results.problem.n
    run = results.cluster[merge, learners, every] if run is None else run
    one = roca(results.cluster[merge, 1, DEFAULT_EVERY].decisions, labels)
    value = roca(run.decisions, labels)
    loss = relative(value, one)
    baseline = roca(results.subsample[learners].decisions, labels[::learners])
    same = roca(run.decisions[::learners], labels[::learners])
    versus = relative(same, baseline)
    return [
        merge,
        f"{share_size(n, learners) // every:,}",
        fmt(one, ".3f"),
        fmt(value, ".3f"),
        fmt(loss, "+.1%"),
        "yes" if loss is not None and loss <= TARGET else "**NO**",
        fmt(baseline, ".3f"),
        fmt(same, ".3f"),
        fmt(versus, "+.1%"),
        "–" if versus is None else "yes" if versus < 0 else "no, equal" if versus == 0 else "no",
    ]


def target_note(results: Results, labels: np.ndarray) -> str:
    n = results.problem.n
    return (
        f"Relative loss = cluster ÷ one learner − 1, both over all {n:,} events (equal examples seen); target ≤ "
        f"{TARGET:.0%}. One misordered (spam, ham) pair is {100 / (labels.sum() * (~labels).sum()):.1e} points of "
        "(1−ROCA)%. Against one learner on every N-th event (baseline 1, what the cluster must beat): both scored on "
        "the same events 0, N, 2N, … (the cluster's decisions on them are learner 0's); 'vs' = cluster ÷ baseline "
        "1 − 1, 'beats it' when negative ('equal': the same (1−ROCA)%, as when learner 0 does not sync before the "
        "end: its decisions are then baseline 1's). Baseline 1 has seen as many examples as it scored; the "
        "cluster, N times as many, but up to N·B events late."
    )


def why_note(results: Results, labels: np.ndarray) -> str:
    """The structural reason the target is out of reach at B = DEFAULT_EVERY on this stream."""
    n, every = results.problem.n, DEFAULT_EVERY
    syncs = ", ".join(f"{share_size(n, k) // every} at N = {k}" for k in TARGET_LEARNERS)
    one = results.cluster["additive", 1, every].decisions
    first = roca(one[:CURVE_START], labels[:CURVE_START])
    never = [k for k in TARGET_LEARNERS if share_size(n, k) < every]
    return (
        f"Why the target is out of reach at B = {every:,} on this stream: a learner syncs every B of its own events, "
        f"⌊⌈n/N⌉/B⌋ times before the end of the {n:,} events ({syncs}). Until its first sync (the first N·B events "
        f"of the stream: {', '.join(f'{k * every:,}' for k in TARGET_LEARNERS)}) every learner scores with "
        "a model of its own share only, and after a sync its view misses up to (N − 1)·B of the others' events"
        + (
            f"; with N = {', '.join(map(str, never))} no learner syncs before the end: the cluster is N independent "
            "learners on one event in N, baseline 1 at best"
            if never
            else ""
        )
        + f". One learner's (1−ROCA)% falls from {fmt(first, '.2f')} over the first {CURVE_START:,} events to "
        f"{fmt(roca(one, labels), '.2f')} over all {n:,} (a steep learning curve, on a stream that opens with "
        f"{int(labels[:500].sum())} spam in its first 500 messages), so a model that misses hundreds to thousands "
        f"of the latest events scores much more than {TARGET:.0%} worse. The merge rule decides what the merged model "
        "is, not how old a learner's view is: neither merge can meet the target while N·B is a sizeable fraction "
        "of n. Fresher views, B = n/(N·k) for a large k, take many syncs per learner"
        + (": the next table." if results.fresh else ".")
    )


def fresh_note(results: Results, labels: np.ndarray) -> str:
    """What the fresher views reach: where the target is met, the loss at B = 1, and against baseline 1."""
    met, floor, beats = [], [], []
    for merge in MERGES:
        one = roca(results.cluster[merge, 1, DEFAULT_EVERY].decisions, labels)
        runs = {key[1:]: run for key, run in results.fresh.items() if key[0] == merge}
        losses = {key: relative(roca(run.decisions, labels), one) for key, run in runs.items()}
        met += [f"{merge} N = {k} B = {b:,}" for (k, b), loss in losses.items() if loss is not None and loss <= TARGET]
        floor.append(f"{merge} " + ", ".join(f"{fmt(losses[k, 1], '+.1%')} (N = {k})" for k in TARGET_LEARNERS))
        versus = [
            relative(roca(run.decisions[::k], labels[::k]), roca(results.subsample[k].decisions, labels[::k]))
            for (k, _), run in runs.items()
        ]
        better = sum(v is not None and v < 0 for v in versus)
        beats.append(f"{merge} in {better} of {len(runs)}")
    checked = ", ".join(f"N = {k}: {'yes' if equal else '**NO**'}" for k, equal in results.lag_check.items())
    return (
        "At B = 1 the delta log holds the events in stream order, so the sequential cluster's merged model is one "
        "process's on the stream, and each event is scored by that process's model of N − 1 events earlier: the "
        "events the other learners are learning at the same time (checked: its decisions equal, bit for bit, those "
        f"of `lagged`, one learner that scores each event N − 1 events late: {checked}). No B and no merge rule "
        "removes that lag while N learners learn at once. Relative loss at B = 1: "
        + "; ".join(floor)
        + ". "
        + (
            "The target is met at: " + "; ".join(met) + "."
            if met
            else "The target is met at no B tried, down to B = 1, by either merge."
        )
        + " The cluster beats one learner on every N-th event (on the same events) in these runs: "
        + "; ".join(beats)
        + "."
    )


def rcv1_sections(results: Results, figure: str | None) -> list[dict]:
    """The objective table and its curve."""
    problem = results.problem
    n = problem.n
    rows = []
    for (merge, learners, every), run in results.cluster.items():
        m = share_size(n, learners)
        equal = run.at(m)
        rows.append(
            [
                learners,
                f"{every:,}",
                merge,
                f"{run.points[-1][1]:.5f}",
                fmt(relative(run.points[-1][1], results.cluster[merge, 1, DEFAULT_EVERY].points[-1][1]), "+.2%"),
                "–" if equal is None else f"{equal[1]:.5f}" + ("" if equal[0] == m else f" (at {equal[0]:,})"),
                f"{results.subsample[learners].points[-1][1]:.5f}",
                f"{m:,}",
                f"{results.minibatch[learners * every].points[-1][1]:.5f}",
                f"{error_rate(run.decisions, problem.signs):.2f}",
            ]
        )
    table = section(
        f"RCV1-like: objective of the merged model on the held-out sample, N learners × B events between syncs, per "
        f"merge rule ({n:,} events)",
        [
            ">N",
            ">B",
            "merge",
            f">cluster at {n:,}",
            ">vs N = 1",
            ">cluster at ⌈n/N⌉",
            ">1 learner on every N-th event",
            ">its examples ⌈n/N⌉",
            f">learn_many, batches of N·B, at {n:,}",
            ">cluster prequential error %",
        ],
        rows,
        [
            protocol_note(results),
            f"Objective: λ/2·‖w‖² + mean hinge loss max(0, 1 − y⟨w, x⟩) over a fixed held-out sample, λ = "
            f"{RCV1_LAMBDA:g}, model PegasosClassifier(lambda_={RCV1_LAMBDA:g}, n_features={RCV1_FEATURES}). "
            "The cluster's merged model is evaluated after the sync rounds that reach each multiple of n/16 examples "
            "(exact for B ≤ 1,000: N·B divides n/16; otherwise the first round past it, whose examples are shown) and "
            "at the end. 'vs N = 1': relative change from one learner's objective at the end (lower is better). "
            "'1 learner on every N-th event': events 0, N, 2N, … only, at its end (⌈n/N⌉ examples seen, to be "
            "compared with 'cluster at ⌈n/N⌉' at equal examples, and with 'cluster at n' at the same position in "
            "the stream). The merged model of a sequential cluster is one process's on the events in log order, "
            "which differs from stream order only in how the learners' chunks of B events interleave.",
            minibatch_note(results),
        ],
    )
    marks = [m for m in problem.checkpoints if m in {share_size(n, k) for k in LEARNERS}]
    curve_rows = []
    for learners in LEARNERS:
        for merge in MERGES:
            run = results.cluster[merge, learners, DEFAULT_EVERY]
            curve_rows.append([f"cluster N = {learners}, {merge}", *(fmt(value_at(run, m), ".5f") for m in marks)])
    for learners in LEARNERS[1:]:
        run = results.subsample[learners]
        curve_rows.append([f"1 learner on 1 event in {learners}", *(fmt(value_at(run, m), ".5f") for m in marks)])
    for learners in LEARNERS:
        run = results.minibatch[learners * DEFAULT_EVERY]
        curve_rows.append(
            [f"learn_many, batches of {learners * DEFAULT_EVERY:,}", *(fmt(value_at(run, m), ".5f") for m in marks)]
        )
    curve = section(
        f"RCV1-like: held-out objective against examples seen (B = {DEFAULT_EVERY:,})",
        ["system", *(f">{m:,}" for m in marks)],
        curve_rows,
        ["Examples seen: the events the merged model (cluster), the one learner or the mini-batches have learned."],
        [figure] if figure else [],
    )
    return [table, curve]


def value_at(run: Run, examples: int) -> float | None:
    """The objective at exactly ``examples`` (None when not evaluated there)."""
    return next((value for seen, value in run.points if seen == examples), None)


def bytes_section(results: Results) -> dict:
    """Bytes on the delta topic, against snapshots."""
    n = results.problem.n
    rows = []
    for (merge, learners, every), run in results.cluster.items():
        written, rate = run.delta_bytes / n, results.rates[merge]
        rows.append(
            [
                learners,
                f"{every:,}",
                merge,
                f"{run.deltas:,}",
                f"{run.delta_bytes / 1e6:,.1f}",
                f"{written:,.0f}",
                f"{learners * run.delta_bytes / 1e6:,.1f}",
                f"{learners * written:,.0f}",
                f"{written * learners * rate / 1e6:,.1f}",
                f"{learners * written * learners * rate / 1e6:,.1f}",
                f"{results.snapshot / (learners * every):,.0f}",
            ]
        )
    ratios = [
        results.cluster["sequential", k, DEFAULT_EVERY].delta_bytes
        / results.cluster["additive", k, DEFAULT_EVERY].delta_bytes
        for k in LEARNERS
    ]
    return section(
        f"{results.problem.name}: bytes on the delta topic",
        [
            ">N",
            ">B",
            "merge",
            ">deltas",
            ">written MB",
            ">written B/event",
            ">read MB (× N)",
            ">read B/event",
            ">written MB/s",
            ">read MB/s",
            ">1 snapshot per N·B events, B/event",
        ],
        rows,
        [
            "Written: len(encode_delta(delta)) summed over the deltas of the run (per event: ÷ the "
            f"{n:,} labelled events); read: every learner reads every delta, × N. MB/s assume each of the N learners "
            "learns at the measured rate of one learner of that merge on these rows, r (StepRecorder.learn_rows "
            "over the whole stream, fastest of 3: "
            + ", ".join(f"{merge} {results.rates[merge]:,.0f}" for merge in MERGES)
            + f" events/s; the bare model: {results.rates['bare']:,.0f} events/s), so the cluster takes N·r "
            "events/s; parsing, feature extraction and the syncs are left out, so these are upper bounds: at the "
            "rates including syncs of the cost table, multiply by its 'N × that' ÷ (N·r).",
            "An additive delta carries, per step, its label, weight, decision and margin test, and the example of "
            "each violated step; a sequential delta carries the example of every step. At B = "
            f"{DEFAULT_EVERY:,} the sequential merge writes {min(ratios):.1f}× to {max(ratios):.1f}× the additive "
            "bytes (over N).",
            f"A snapshot of the model: {results.snapshot:,} bytes (write_checkpoint of the merged model, "
            f"{results.problem.n_features:,} weights); the last column is what publishing one per sync round "
            "(every N·B events) would write per event.",
        ],
    )


def cost_section(results: Results) -> dict:
    """CPU per learner: learning against syncs."""
    n, rate = results.problem.n, results.rate
    rows = []
    for (merge, learners, every), run in results.cluster.items():
        per_learner = n / (run.learn_seconds + run.sync_seconds)
        rows.append(
            [
                learners,
                f"{every:,}",
                merge,
                f"{len(run.pauses):,}",
                fmt(1e3 * float(np.mean(run.pauses)) if run.pauses else None, ".2f"),
                fmt(1e3 * max(run.pauses) if run.pauses else None, ".1f"),
                f"{1e6 * run.learn_seconds / n:.2f}",
                f"{1e6 * run.sync_seconds / n:.2f}",
                f"{run.sync_seconds / (run.learn_seconds + run.sync_seconds):.0%}",
                f"{per_learner:,.0f}",
                f"{learners * per_learner:,.0f}",
                f"{learners * per_learner / rate:.2f}",
            ]
        )
    return section(
        f"{results.problem.name}: the CPU cost of syncing",
        [
            ">N",
            ">B",
            "merge",
            ">regular syncs",
            ">ms per sync, mean",
            ">ms, max",
            ">learning µs/event",
            ">syncing µs/event",
            ">share syncing",
            ">events/s per learner incl. syncs",
            ">N × that",
            ">÷ one learner",
        ],
        rows,
        [
            "Measured in the simulator, one learner at a time on one core: a sync is ClusterSync.write (cut and encode "
            "its delta, decode and fold every learner's delta since its last sync, copy the merged model), timed "
            "by ClusterSync.pauses. Folding a delta: additive, replaying its steps; sequential, learning every "
            "example again (learn_rows); with N = 1 a learner's own delta is folded by taking its model up, with "
            "either merge. 'ms per sync': the regular syncs (every B events; none when a learner's share is "
            "shorter than B); 'syncing µs/event': every sync, the two at the end included (each learner folds every "
            "delta once, whatever B). µs/event: seconds summed over the learners ÷ the events of the stream, which "
            "is what a learner pays per event of its own share. 'events/s per learner incl. syncs' = events ÷ "
            "(learning + syncing seconds), the rate one learner sustains on its core; 'N × that' is the cluster's "
            f"rate with one core per learner, '÷ one learner' compares it with one learner alone (r = {rate:,.0f} "
            "events/s: the additive recorder, learning only, for both merges).",
        ],
    )


# -- figures -------------------------------------------------------------------------------------------------------


def roca_curve(decisions: np.ndarray, labels: np.ndarray, points: range) -> tuple[list[int], list[float]]:
    """(m, (1−ROCA)% of the first m decisions) at each of ``points`` where the first m hold both classes."""
    curve = [(m, roca(decisions[:m], labels[:m])) for m in points]
    return [m for m, value in curve if value is not None], [value for _, value in curve if value is not None]


def plot_roca(results: Results, labels: np.ndarray, path: Path) -> None:
    """(1−ROCA)% over the first m examples, one panel per merge: cluster (solid) and one learner on every N-th
    event (dashed)."""
    fig = Figure(figsize=(13, 5.5), layout="tight")
    axes = fig.subplots(1, len(MERGES), sharey=True)
    n = results.problem.n
    for ax, merge in zip(axes, MERGES):
        for color, learners in enumerate(LEARNERS):
            decisions = results.cluster[merge, learners, DEFAULT_EVERY].decisions
            ax.plot(
                *roca_curve(decisions, labels, range(CURVE_START, n + 1, 100)),
                color=f"C{color}",
                label=f"cluster N = {learners}",
            )
            if learners > 1:
                own = results.subsample[learners].decisions
                ax.plot(
                    *roca_curve(own, labels[::learners], range(100, len(own) + 1, 50)),
                    color=f"C{color}",
                    linestyle="--",
                    linewidth=1,
                    label=f"1 learner on 1 event in {learners}",
                )
        ax.set_yscale("log")
        ax.set_xlabel("examples seen m")
        ax.set_title(f"{merge} merge")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("(1−ROCA)% over the first m examples (log scale)")
    fig.suptitle(f"SpamAssassin, prequential, B = {DEFAULT_EVERY:,} events between syncs")
    fig.savefig(path, dpi=120)


def plot_objective(results: Results, path: Path) -> None:
    """Held-out objective against examples seen, one panel per merge: cluster, one learner on every N-th event,
    learn_many batches."""
    fig = Figure(figsize=(14, 5.5), layout="tight")
    axes = fig.subplots(1, len(MERGES), sharey=True)
    for ax, merge in zip(axes, MERGES):
        for color, learners in enumerate(LEARNERS):
            runs = [
                (results.cluster[merge, learners, DEFAULT_EVERY], "-", f"cluster N = {learners}"),
                (
                    results.minibatch[learners * DEFAULT_EVERY],
                    ":",
                    f"learn_many, batches of {learners * DEFAULT_EVERY:,}",
                ),
            ]
            if learners > 1:
                runs.append((results.subsample[learners], "--", f"1 learner on 1 event in {learners}"))
            for run, style, label in runs:
                seen, values = zip(*run.points)
                ax.plot(seen, values, color=f"C{color}", linestyle=style, marker="o", markersize=2, label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("examples seen")
        ax.set_title(f"{merge} merge")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    axes[0].set_ylabel("held-out λ/2·‖w‖² + mean hinge loss")
    fig.suptitle(f"RCV1-like, λ = {RCV1_LAMBDA:g}, B = {DEFAULT_EVERY:,} events between syncs")
    fig.savefig(path, dpi=120)


# -- main ----------------------------------------------------------------------------------------------------------


def summary(results: Results, quality: dict) -> dict:
    """The raw numbers of a stream: quality per (merge, N, B), bytes, costs, rates, checks."""
    runs = {f"{merge}_{k}_{b}": run for (merge, k, b), run in results.cluster.items()}
    return {
        "events": results.problem.n,
        "params": results.problem.params,
        "quality": quality,
        "delta_bytes": {key: run.delta_bytes for key, run in runs.items()},
        "sync_seconds": {key: run.sync_seconds for key, run in runs.items()},
        "learn_seconds": {key: run.learn_seconds for key, run in runs.items()},
        "regular_syncs": {key: len(run.pauses) for key, run in runs.items()},
        "in_log_order": {key: run.in_log_order for key, run in runs.items()},
        "events_per_s_one_learner": results.rates,
        "snapshot_bytes": results.snapshot,
        "minibatch_check": results.check,
        "reference_check": results.reference,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(parser)
    add_out_argument(parser, "cluster.json")
    parser.add_argument("--rows", type=int, default=256_000, help="RCV1-like training rows (default: 256,000)")
    parser.add_argument("--test-rows", type=int, default=10_000, help="RCV1-like held-out rows (default: 10,000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the RCV1-like rows")
    parser.add_argument(
        "--no-processes",
        action="store_true",
        help="leave out the real processes (learners, replicas and model age against a local broker)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run: the first {QUICK_MESSAGES:,} messages, 32,000 + 2,000 RCV1-like rows",
    )
    args = parser.parse_args()
    if args.quick:
        args.rows, args.test_rows = 32_000, 2_000

    wall = time.perf_counter()
    prepare_timing()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    stem = args.out.stem
    sections, raw = [], {}
    if args.data.is_file():
        problem, labels, extract_seconds = spam_problem(args.data, QUICK_MESSAGES if args.quick else None)
        spam = measure(problem, fresh=True)
        figure = f"{stem}_spam_roca.png"
        plot_roca(spam, labels, args.out.parent / figure)
        sections += spam_sections(spam, labels, extract_seconds, figure)
        sections += [bytes_section(spam), cost_section(spam)]
        raw["spam"] = summary(
            spam, {f"{merge}_{k}_{b}": roca(r.decisions, labels) for (merge, k, b), r in spam.cluster.items()}
        )
        raw["spam"]["fresh_quality"] = {
            f"{merge}_{k}_{b}": roca(r.decisions, labels) for (merge, k, b), r in spam.fresh.items()
        }
        raw["spam"]["lag_check"] = spam.lag_check
    else:
        shown = os.path.relpath(args.data, REPO)
        note = f"The SpamAssassin stream was not found at {shown}; pass --data PATH to run that part."
        sections.append(section("SpamAssassin: skipped", ["data"], [[shown]], [note]))
    print(f"RCV1-like: generating {args.rows:,} + {args.test_rows:,} rows ...", file=sys.stderr, flush=True)
    rcv1 = measure(rcv1_problem(args.rows, args.test_rows, args.seed))
    figure = f"{stem}_rcv1_objective.png"
    plot_objective(rcv1, args.out.parent / figure)
    sections += rcv1_sections(rcv1, figure)
    sections += [bytes_section(rcv1), cost_section(rcv1)]
    raw["rcv1"] = summary(rcv1, {f"{merge}_{k}_{b}": r.points for (merge, k, b), r in rcv1.cluster.items()})
    if not args.no_processes:
        sections += process_sections(args.data if args.data.is_file() else None, args.quick)
    wall_seconds = time.perf_counter() - wall
    sections[0]["notes"].append(
        f"Machine: {os.cpu_count()} cores (shared; 1-minute load average {LOAD_AT_START:.2f} at start), native "
        f"thread pools limited to one thread; the whole benchmark took {wall_seconds:.0f} s."
    )
    write_results(
        args,
        "Cluster mode, simulated: N learners syncing deltas every B events, additive and sequential merges",
        sections,
        wall_seconds=wall_seconds,
        results=raw,
    )
    print(f"\nwall time {wall_seconds:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
