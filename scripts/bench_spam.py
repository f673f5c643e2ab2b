"""Spam-filtering quality of pegasos_stream against tuned peers, on stress streams of SpamAssassin and Ling-Spam.

Prequential evaluation with immediate feedback, as in the TREC spam track: each message of a stream is scored,
then learnt. Streams (``_stress``), named ``corpus/shape``: each corpus as is, subject and sender only, subject
only, body only, subject and body with no blank line between them, lowercased and tokens spaced as a list archive
has them, spam subsampled to ~13% or ~3% or ham subsampled to ~75% spam, shuffled, reversed, the hard ham with all
spam, and the two corpora interleaved as one stream (``--corpus both``); each shape on the corpora it applies to.
Metric: (1−ROCA)% = 100·(1 − exact ROC AUC of all the scores of the run; spam positive, ties count one half).

pegasos_stream runs only what ``configs/spam.yaml`` builds (``build_features``/``build_model``), one configuration
for every stream, scored by ``decision_function_one``; and, on the same features, its first Pegasos alone (the
model section overridden to ``kind: linear`` with that SVM's λ, t0 and columns). Peers, each scored by a ranking
score that does not saturate: river ``LogisticRegression``, ``PAClassifier``, ``ALMAClassifier`` (raw margin
w·x + b) and ``MultinomialNB`` (log-odds, the difference of the joint log-likelihoods); scikit-learn
``SGDClassifier`` with hinge and log loss, one ``partial_fit`` per message (``decision_function``); Vowpal Wabbit
(pyvw) with hinge and logistic loss, predict then learn per message (the unclamped margin,
``get_partial_prediction``). Each peer runs on several representations — its customary features, exactly the
features pegasos_stream gets, and binary word + character 4-gram features of the lowercased text those features
read — and a small grid of its main setting; the best (representation, setting) of each peer per stream is
reported, which favours the peers.

Events/s = messages / (extraction + learning seconds): each representation of a stream is extracted once, timed,
into a compact cache (column ids and values per message) shared by every system and setting on it; learning is
the timed prequential loop on the cache, which rebuilds each message's input (dict, CSR row, VW example). With
``--jobs 2`` (the default) two streams run at once, one per process, which makes timings noisier; ``--jobs 1`` for
timings. Also draws the ROC curves and rolling error rate of the ``spamassassin/asis`` stream (PNG files next to
the JSON, named after it).

The first table is the stress table: per stream, configs/spam.yaml, its Pegasos alone, the best tuned peer and
whether configs/spam.yaml leads, with DeLong's 95% interval of the difference; the second, every peer held to
its one setting best over all the streams. Every message of every stream of both corpora (36 minutes with the
default two jobs on 2 cores, 4,300 s of runs in all; ``--limit 1500``: 13 minutes; ``--quick --limit 1000`` for a
smoke run)::

    python scripts/bench_spam.py --corpus both      # writes reports/spam_stress.json

Usage: ``python scripts/bench_spam.py [--corpus spamassassin|lingspam|both] [--data PATH] [--lingspam-data PATH]
[--out PATH] [--limit N] [--streams SHAPE ...] [--peers P ...] [--quick] [--jobs N]``; ``--out`` defaults to
reports/spam.json for ``--corpus spamassassin`` (the default), else to reports/spam_stress.json.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from multiprocessing import get_context
from pathlib import Path

import numpy as np
from _harness import (
    REPO,
    add_data_argument,
    add_lingspam_argument,
    first_svm,
    fmt,
    prepare_timing,
    prequential_metrics,
    section,
    write_results,
    yes,
)
from _stress import BOTH, CORPORA, SHAPES, Stream, build_streams, describe
from matplotlib.figure import Figure
from river import feature_extraction, linear_model, naive_bayes, optim, utils
from scipy import sparse
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.linear_model import SGDClassifier
from sklearn.metrics import roc_curve
from threadpoolctl import threadpool_limits
from vowpalwabbit import pyvw

from pegasos_stream.cli.assemble import build_features, build_model
from pegasos_stream.cli.config import load_config
from pegasos_stream.features.email import message_text
from pegasos_stream.run.evaluation import compare_roc_auc

SPAM_CONFIG = REPO / "configs" / "spam.yaml"
OURS = "pegasos_stream (configs/spam.yaml)"
PEGASOS = "pegasos_stream Pegasos alone (model.kind: linear)"
#: pegasos_stream's own systems; every other system is a peer.
OWN = (OURS, PEGASOS)
#: Columns of scikit-learn's rows and of Vowpal Wabbit's weights (``-b 20``), as many as configs/spam.yaml hashes into.
N_FEATURES = 2**20
#: Messages per window of the rolling error rate.
WINDOW = 500
#: Word tokens of the n-gram representation: EmailFeatures' word pattern.
_WORD = re.compile(r"[^\W_]{2,30}")

Encoded = tuple[np.ndarray, np.ndarray]
"""One message's features: column ids (int64) and values (float64)."""
Step = Callable[[np.ndarray, np.ndarray, bool], float]
"""Score one message from its cached features, then learn it; returns the score."""


# -- representations ---------------------------------------------------------------------------


def named(transform: Callable[[str], dict]) -> Callable[[str], Encoded]:
    """Encode ``{feature name: value}`` dicts; names are numbered in order of first appearance, modulo N_FEATURES
    (collision-free below N_FEATURES distinct names, far more than any stream here has)."""
    vocabulary: dict[str, int] = {}

    def encode(text: str) -> Encoded:
        x = transform(text)
        ids = (vocabulary.setdefault(name, len(vocabulary) % N_FEATURES) for name in x)
        return np.fromiter(ids, np.int64, len(x)), np.fromiter(x.values(), np.float64, len(x))

    return encode


def ours(config: dict) -> Callable[[str], Encoded]:
    """Exactly pegasos_stream's features: ``build_features(config).transform_one``, hashed columns, unit length."""
    transform = build_features(config).transform_one

    def encode(text: str) -> Encoded:
        x = transform(text)
        return np.fromiter(x.keys(), np.int64, len(x)), np.fromiter(x.values(), np.float64, len(x))

    return encode


def ngrams(config: dict) -> Callable[[str], Encoded]:
    """Binary words and character n-grams (unnormalised) of the lowercased text pegasos_stream's features read."""
    n, max_chars = config["features"]["char_ngram"], config["features"]["max_chars"]

    def transform(text: str) -> dict:
        read = message_text(text)[:max_chars].lower()
        x = dict.fromkeys(["c:" + read[i : i + n] for i in range(len(read) - n + 1)], 1.0)
        x.update(dict.fromkeys(["w:" + word for word in _WORD.findall(read)], 1.0))
        return x

    return named(transform)


def hashing_words(config: dict) -> Callable[[str], Encoded]:
    """scikit-learn's ``HashingVectorizer(alternate_sign=False, n_features=2**20)``: lowercased words, l2-normalised."""
    vectorizer = HashingVectorizer(alternate_sign=False, n_features=N_FEATURES)

    def encode(text: str) -> Encoded:
        row = vectorizer.transform([text])
        return row.indices.astype(np.int64), row.data

    return encode


def lower_tokens(text: str) -> Counter:
    """Vowpal Wabbit's words, lowercased: whitespace-separated tokens and their counts."""
    return Counter(text.lower().split())


def raw_tokens(text: str) -> Counter:
    """Vowpal Wabbit's words as they are: whitespace-separated tokens and their counts."""
    return Counter(text.split())


@dataclass(frozen=True)
class Representation:
    """A way to turn a text into features, shown as ``label``."""

    label: str
    kind: str  # "customary", "ours" or "ngrams": the column it is summarised in
    make: Callable[[dict], Callable[[str], Encoded]]  # from the configuration, a fresh text → Encoded


REPRESENTATIONS = {
    "ours": Representation("spam.yaml features", "ours", ours),
    "ngrams": Representation("binary words + 4-grams", "ngrams", ngrams),
    "bow": Representation("BagOfWords", "customary", lambda _: named(feature_extraction.BagOfWords().transform_one)),
    "hashing": Representation("HashingVectorizer", "customary", hashing_words),
    "vw-lower": Representation("VW tokens, lowercased", "customary", lambda _: named(lower_tokens)),
    "vw-raw": Representation("VW tokens, raw", "customary", lambda _: named(raw_tokens)),
}  # fmt: skip
#: Representation kinds, in the order of the per-kind column.
KINDS = ("customary", "ours", "ngrams")


def extract(representation: Representation, config: dict, texts: Sequence[str]) -> tuple[list[Encoded], float]:
    """Every text's features and the seconds the extraction took."""
    encode = representation.make(config)
    start = time.perf_counter()
    features = [encode(text) for text in texts]
    return features, time.perf_counter() - start


# -- learners ----------------------------------------------------------------------------------


def river_step(model, score: Callable[[dict], float]) -> Step:
    """A river classifier on dicts rebuilt from the cache: ``score(x)``, then ``learn_one(x, y)``."""

    def step(ids: np.ndarray, values: np.ndarray, y: bool) -> float:
        x = dict(zip(ids.tolist(), values.tolist()))
        s = score(x)
        model.learn_one(x, y)
        return s

    return step


def log_odds(model: naive_bayes.MultinomialNB) -> Callable[[dict], float]:
    """log P(spam, x) − log P(ham, x) (0 until both classes have been seen)."""

    def score(x: dict) -> float:
        joint = model.joint_log_likelihood(x)
        return joint[True] - joint[False] if len(joint) == 2 else 0.0

    return score


def logistic_regression(lr: float) -> Step:
    model = linear_model.LogisticRegression(optimizer=optim.SGD(lr))
    return river_step(model, model._raw_dot_one)  # w·x + b, the logit before the sigmoid


def passive_aggressive(c: float) -> Step:
    model = linear_model.PAClassifier(C=c)
    return river_step(model, lambda x: utils.math.dot(x, model.weights) + model.intercept)


def alma(c: float) -> Step:
    model = linear_model.ALMAClassifier(C=c)
    return river_step(model, model._raw_dot)  # w·x; ALMA has no intercept


def multinomial_nb(alpha: float) -> Step:
    model = naive_bayes.MultinomialNB(alpha=alpha)
    return river_step(model, log_odds(model))


def sgd(loss: str, alpha: float) -> Step:
    """``SGDClassifier(loss, alpha)``: ``decision_function`` (0 for the first message), then one ``partial_fit``."""
    model = SGDClassifier(loss=loss, alpha=alpha)
    classes = np.array([False, True])

    def step(ids: np.ndarray, values: np.ndarray, y: bool) -> float:
        row = sparse.csr_matrix((values, ids, [0, len(ids)]), shape=(1, N_FEATURES))
        s = float(model.decision_function(row)[0]) if hasattr(model, "coef_") else 0.0
        model.partial_fit(row, [y], classes=classes)
        return s

    return step


def vowpal_wabbit(loss: str, lr: float, workspaces: list) -> Step:
    """pyvw, ``--loss_function LOSS -l LR -b 20``: the cached columns pushed as hashed features of one namespace;
    predict, the unclamped margin (``get_partial_prediction``), learn. The workspace is added to ``workspaces``
    (to be finished after the run)."""
    workspace = pyvw.Workspace(f"--loss_function {loss} -l {lr} -b 20 --quiet")
    workspaces.append(workspace)

    def step(ids: np.ndarray, values: np.ndarray, y: bool) -> float:
        example = workspace.example({"x": list(zip(ids.tolist(), values.tolist()))})
        example.set_label_string("1" if y else "-1")
        workspace.predict(example)
        s = example.get_partial_prediction()
        workspace.learn(example)
        workspace.finish_example(example)
        return s

    return step


@dataclass(frozen=True)
class Peer:
    """A peer learner, the representations it runs on and the grid of its main setting."""

    label: str
    representations: tuple[str, ...]
    make: Callable[[float, list], Step]  # (setting, list collecting VW workspaces) → a fresh Step
    setting: str  # how a setting is shown: setting + value
    grid: tuple[float, ...]  # the first is the --quick one

    def settings(self, quick: bool) -> dict[str, float]:
        return {f"{self.setting}{value:g}": value for value in self.grid[: 1 if quick else None]}


RIVER = ("bow", "ours", "ngrams")
SKLEARN = ("hashing", "ours", "ngrams")
VW = ("vw-lower", "vw-raw", "ours", "ngrams")
PEERS = {
    "river-logreg": Peer(
        "river LogisticRegression", RIVER, lambda v, _: logistic_regression(v), "lr=", (0.01, 0.1, 1.0, 10.0)
    ),
    "river-pa": Peer("river PAClassifier", RIVER, lambda v, _: passive_aggressive(v), "C=", (1.0, 0.1, 0.01)),
    "river-alma": Peer("river ALMAClassifier", RIVER, lambda v, _: alma(v), "C=", (2**0.5, 0.1, 0.01)),
    "river-mnb": Peer("river MultinomialNB", RIVER, lambda v, _: multinomial_nb(v), "alpha=", (1.0, 0.01)),
    "sgd-hinge": Peer("sklearn SGDClassifier(hinge)", SKLEARN, lambda v, _: sgd("hinge", v), "alpha=", (1e-4, 1e-3)),
    "sgd-log": Peer(
        "sklearn SGDClassifier(log_loss)", SKLEARN, lambda v, _: sgd("log_loss", v), "alpha=", (1e-4, 1e-5)
    ),
    "vw-hinge": Peer("VW hinge", VW, lambda v, w: vowpal_wabbit("hinge", v, w), "-l ", (0.5, 0.1, 2.0)),
    "vw-logistic": Peer("VW logistic", VW, lambda v, w: vowpal_wabbit("logistic", v, w), "-l ", (0.5, 0.1, 2.0)),
}
"""Peers by the name ``--peers`` takes. Grids are small, around each peer's default (which comes first): a run costs
mostly per message (scikit-learn's ``partial_fit`` takes time in proportion to its 2^20 coefficients on every call,
river's MultinomialNB takes two logarithms per feature)."""


def pegasos_config(config: dict) -> dict:
    """``config`` (configs/spam.yaml) with its model overridden to its first Pegasos alone: ``model.kind: linear``
    with the mixture's first λ, that SVM's t0 (``lambda_t0``/λ) and the columns (a committee's λ and t0), loaded as
    ``--set model=...`` would."""
    linear = {"kind": "linear", **first_svm(config["model"]), "n_features": config["model"].get("n_features")}
    return load_config(SPAM_CONFIG, [f"model={json.dumps(linear)}"])


def pegasos_step(config: dict) -> Step:
    """pegasos_stream as configured: ``decision_function_one``, then ``learn_one``."""
    model = build_model(config)
    decide, learn = model.decision_function_one, model.learn_one

    def step(ids: np.ndarray, values: np.ndarray, y: bool) -> float:
        x = dict(zip(ids.tolist(), values.tolist()))
        s = decide(x)
        learn(x, y)
        return s

    return step


# -- runs --------------------------------------------------------------------------------------


@dataclass
class Run:
    """One system, representation and setting on one stream."""

    stream: str
    system: str
    representation: str
    setting: str
    one_minus_roca_pct: float  # NaN when a score was not finite (the model diverged)
    extract_seconds: float
    learn_seconds: float
    events: int
    scores: np.ndarray
    #: pegasos_stream only: seconds of its own loop on the texts, and whether its scores equal the cached run's.
    end_to_end_seconds: float | None = None
    end_to_end_identical: bool | None = None

    @property
    def events_per_s(self) -> float:
        return self.events / (self.extract_seconds + self.learn_seconds)

    @property
    def name(self) -> str:
        return self.system if self.system in OWN else f"{self.system} · {self.representation} · {self.setting}"

    @property
    def end_to_end_events_per_s(self) -> float | None:
        return None if self.end_to_end_seconds is None else self.events / self.end_to_end_seconds

    def to_json(self) -> dict:
        """The run without its scores."""
        return {**{k: v for k, v in asdict(self).items() if k != "scores"}, "events_per_s": self.events_per_s}


def prequential(step: Step, features: Sequence[Encoded], labels: Sequence[bool]) -> tuple[np.ndarray, float]:
    """``step`` over the stream: the scores and the seconds of the loop."""
    scores = np.empty(len(labels))
    start = time.perf_counter()
    for i, ((ids, values), y) in enumerate(zip(features, labels, strict=True)):
        scores[i] = step(ids, values, y)
    return scores, time.perf_counter() - start


def roca(scores: np.ndarray, labels: Sequence[bool]) -> float:
    """(1−ROCA)% of a run's scores; NaN when one is not finite."""
    return prequential_metrics(scores, labels)[1] if np.isfinite(scores).all() else math.nan


def run_stream(
    name: str, stream: Stream, configs: dict[str, dict], peers: Sequence[str], quick: bool
) -> tuple[list[Run], float]:
    """pegasos_stream's systems (each as its configuration in ``configs`` builds it, all on the features of
    ``configs[OURS]``) and every setting of every peer on every representation of a stream: the runs, and the wall
    seconds they took in all."""
    start = time.perf_counter()
    threadpool_limits(limits=1)
    config = configs[OURS]
    texts = [text for text, _ in stream]
    labels = [y for _, y in stream]
    runs = []
    for key, representation in REPRESENTATIONS.items():
        users = [PEERS[peer] for peer in peers if key in PEERS[peer].representations]
        if not users and key != "ours":
            continue
        features, extract_seconds = extract(representation, config, texts)
        print(f"[{name}] {representation.label}: extracted in {extract_seconds:.1f} s", file=sys.stderr, flush=True)
        jobs = [
            (system, "configured", lambda _, c=c: pegasos_step(c)) for system, c in configs.items() if key == "ours"
        ]
        for peer in users:
            jobs += [(peer.label, label, partial(peer.make, value)) for label, value in peer.settings(quick).items()]
        for system, setting, make in jobs:
            workspaces: list = []
            scores, learn_seconds = prequential(make(workspaces), features, labels)
            for workspace in workspaces:
                workspace.finish()
            one_minus_roca = roca(scores, labels)
            run = Run(name, system, representation.label, setting, one_minus_roca, extract_seconds, learn_seconds,
                      len(labels), scores)  # fmt: skip
            if system == OURS:
                check_scores, run.end_to_end_seconds = end_to_end(stream, config)
                run.end_to_end_identical = bool(np.array_equal(check_scores, scores))
            runs.append(run)
            print(
                f"[{name}] {run.name}: (1−ROCA)% {run.one_minus_roca_pct:.3f}, {run.events_per_s:,.0f} events/s",
                file=sys.stderr,
                flush=True,
            )
        del features
    seconds = time.perf_counter() - start
    print(f"[{name}] done in {seconds:.0f} s", file=sys.stderr, flush=True)
    return runs, seconds


def end_to_end(stream: Stream, config: dict) -> tuple[np.ndarray, float]:
    """pegasos_stream on the texts themselves (``transform_one``, ``decision_function_one``, ``learn_one``)."""
    transform, model = build_features(config).transform_one, build_model(config)
    scores = np.empty(len(stream))
    start = time.perf_counter()
    for i, (text, y) in enumerate(stream):
        x = transform(text)
        scores[i] = model.decision_function_one(x)
        model.learn_one(x, y)
    return scores, time.perf_counter() - start


# -- report ------------------------------------------------------------------------------------


def rank(run: Run) -> float:
    """Sort key: (1−ROCA)%, diverged runs last."""
    return math.inf if math.isnan(run.one_minus_roca_pct) else run.one_minus_roca_pct


def best_by_peer(runs: Sequence[Run]) -> dict[str, Run]:
    """The best run of each system (pegasos_stream's have one each), best first."""
    best: dict[str, Run] = {}
    for run in sorted(runs, key=rank):
        best.setdefault(run.system, run)
    return best


def best_peer(runs: Sequence[Run]) -> Run:
    """The best run of any peer (a system not in `OWN`)."""
    return min((run for run in runs if run.system not in OWN), key=rank)


def kind_cell(runs: Sequence[Run], system: str) -> str:
    """The system's best (1−ROCA)% on each kind of representation, 'customary / ours / words + 4-grams'."""
    values = []
    for kind in KINDS:
        labels = {r.label for r in REPRESENTATIONS.values() if r.kind == kind}
        mine = [run for run in runs if run.system == system and run.representation in labels]
        values.append(fmt(min(map(rank, mine)), ".3f") if mine else "–")
    return " / ".join(values)


def stream_section(name: str, stream: Stream, runs: Sequence[Run], quick: bool, figures: Sequence[str]) -> dict:
    """Per stream: pegasos_stream and each peer's best run."""
    spam = sum(y for _, y in stream)
    rows = [
        [
            run.system,
            run.representation,
            run.setting,
            fmt(run.one_minus_roca_pct, ".3f"),
            fmt(run.events_per_s, ",.0f"),
            kind_cell(runs, run.system),
        ]
        for run in best_by_peer(runs).values()
    ]
    settings = "one setting per peer (--quick)" if quick else "the best setting of each peer's grid"
    notes = [
        f"{describe(name)}: {len(stream):,} messages, {spam:,} spam ({100 * spam / len(stream):.1f}%). Each peer's "
        f"row is its best representation with {settings}; the last column is its best (1−ROCA)% on each kind of "
        "representation (customary / spam.yaml features / binary words + 4-grams)."
    ]
    columns = ["system", "representation", "setting", ">(1−ROCA)%", ">events/s", "(1−ROCA)% by representation"]
    return section(f"Stream `{name}`", columns, rows, notes, figures)


def paired_interval(mine: Run, peer: Run, labels: Sequence[bool]) -> tuple[float, float, float] | None:
    """Ours − the peer in (1−ROCA)% points and its 95% interval (DeLong's paired test on the same messages); None
    when a run diverged or a class has fewer than two messages."""
    diverged = math.isnan(mine.one_minus_roca_pct) or math.isnan(peer.one_minus_roca_pct)
    if diverged or min(sum(labels), len(labels) - sum(labels)) < 2:
        return None
    comparison = compare_roc_auc(peer.scores, mine.scores, labels)  # AUC(peer) − AUC(ours) = ours − peer in 1−AUC
    low, high = comparison.interval()
    return 100 * comparison.difference, 100 * low, 100 * high


def beyond(interval: tuple[float, float, float] | None) -> str:
    """Who is ahead beyond the 95% interval: 'ours' (it lies below 0), 'peer' (above 0), 'neither' or '–' (none)."""
    if interval is None:
        return "–"
    return "ours" if interval[2] < 0 else "peer" if interval[1] > 0 else "neither"


def interval_cell(interval: tuple[float, float, float] | None) -> str:
    """'-0.102 (-0.215 to +0.011)'."""
    return "–" if interval is None else f"{interval[0]:+.3f} ({interval[1]:+.3f} to {interval[2]:+.3f})"


def summary_section(streams: dict[str, Stream], results: dict[str, list[Run]], notes: Sequence[str]) -> dict:
    """The stress table: per stream, configs/spam.yaml, its Pegasos alone and the best peer, and who leads."""
    rows = []
    for name, runs in results.items():
        best = best_by_peer(runs)
        mine, alone, peer = best[OURS], best[PEGASOS], best_peer(runs)
        spam = sum(y for _, y in streams[name])
        interval = paired_interval(mine, peer, [y for _, y in streams[name]])
        rows.append(
            [
                name,
                f"{len(streams[name]):,}",
                f"{100 * spam / len(streams[name]):.1f}",
                fmt(mine.one_minus_roca_pct, ".3f"),
                fmt(alone.one_minus_roca_pct, ".3f"),
                peer.name,
                fmt(peer.one_minus_roca_pct, ".3f"),
                fmt(peer.one_minus_roca_pct / mine.one_minus_roca_pct, ".2f"),
                yes(rank(mine) < rank(peer)),
                interval_cell(interval),
                "**peer**" if beyond(interval) == "peer" else beyond(interval),
                fmt(mine.events_per_s, ",.0f"),
                fmt(mine.end_to_end_events_per_s, ",.0f"),
                fmt(peer.events_per_s, ",.0f"),
            ]
        )
    columns = [
        "stream", ">messages", ">spam %", ">configs/spam.yaml (1−ROCA)%", ">its Pegasos alone (1−ROCA)%",
        "best peer · representation · setting", ">peer (1−ROCA)%", ">peer ÷ configs/spam.yaml",
        "configs/spam.yaml leads", ">ours − peer, (1−ROCA)% points (95% interval)", "ahead beyond the interval",
        ">configs/spam.yaml events/s", ">its own loop, events/s", ">peer events/s",
    ]  # fmt: skip
    return section(
        "Stress table: configs/spam.yaml, its Pegasos alone and the best peer, per stream", columns, rows, notes
    )


def fixed_settings(
    results: dict[str, list[Run]], ours: dict[str, float]
) -> dict[str, tuple[str, str, dict[str, float]]]:
    """Each peer at one representation and setting for every stream, as configs/spam.yaml is (its (1−ROCA)% on
    each stream ``ours``): the one of least geometric mean of peer ÷ ours over the streams (a diverged run counts as
    infinitely worse; a stream where either is 0 is left out of the mean). By peer: (representation, setting, its
    (1−ROCA)% on each stream)."""
    grids: dict[str, dict[tuple[str, str], dict[str, float]]] = {}
    for name, runs in results.items():
        for run in runs:
            if run.system not in OWN:
                grids.setdefault(run.system, {}).setdefault((run.representation, run.setting), {})[name] = rank(run)
    chosen = {}
    for peer, grid in grids.items():
        whole = {key: values for key, values in grid.items() if len(values) == len(results)}
        if whole:
            (representation, setting), values = min(whole.items(), key=lambda item: mean_log_ratio(item[1], ours))
            chosen[peer] = (representation, setting, values)
    return chosen


def mean_log_ratio(peer: dict[str, float], ours: dict[str, float]) -> float:
    """The mean over the streams of log(peer ÷ ours), inf when the peer diverged on one."""
    if any(math.isinf(value) for value in peer.values()):
        return math.inf
    logs = [math.log(value / ours[name]) for name, value in peer.items() if value > 0 and ours[name] > 0]
    return sum(logs) / len(logs) if logs else 0.0


def fixed_section(results: dict[str, list[Run]]) -> dict:
    """configs/spam.yaml against each peer at its one representation and setting best over every stream."""
    ours = {name: best_by_peer(runs)[OURS].one_minus_roca_pct for name, runs in results.items()}
    chosen = sorted(fixed_settings(results, ours).items(), key=lambda item: mean_log_ratio(item[1][2], ours))
    rows = []
    for peer, (representation, setting, values) in chosen:
        worst = min(values, key=lambda name: values[name] / ours[name] if ours[name] > 0 else math.inf)
        rows.append(
            [
                peer,
                representation,
                setting,
                fmt(math.exp(mean_log_ratio(values, ours)), ".2f"),
                f"{values[worst] / ours[worst]:.2f} ({worst})" if ours[worst] > 0 else "–",
                f"{sum(values[name] > ours[name] for name in values)} of {len(values)}",
            ]
        )
    notes = [
        "Each peer held to one representation and setting for every stream, as pegasos_stream is to "
        "configs/spam.yaml: the one whose (1−ROCA)% divided by configs/spam.yaml's has the least geometric mean over "
        "the streams (chosen on these very streams, which still favours the peer). Above 1, configs/spam.yaml ranks "
        "better."
    ]
    columns = [
        "peer", "representation", "setting", ">peer ÷ configs/spam.yaml, geometric mean", ">smallest (its stream)",
        ">configs/spam.yaml leads on",
    ]  # fmt: skip
    title = "One configuration each: every peer at its one setting best over all the streams"
    return section(title, columns, rows, notes)


def line_style(run: Run) -> dict:
    """How a run's curve is drawn: configs/spam.yaml thick, its Pegasos alone solid, peers dashed."""
    return {OURS: {"linewidth": 2.5}, PEGASOS: {"linewidth": 1.5}}.get(
        run.system, {"linestyle": "--", "linewidth": 1.2}
    )


def plot_roc(runs: Sequence[Run], labels: np.ndarray, path: Path) -> None:
    """ROC curves, false-positive rate on a log axis (the low-FPR end is what matters for spam)."""
    fig = Figure(figsize=(9, 6.5), layout="tight")
    ax = fig.subplots()
    for run in runs:
        fpr, tpr, _ = roc_curve(labels, run.scores)
        ax.step(fpr, tpr, where="post", label=f"{run.name} ({run.one_minus_roca_pct:.3f})", **line_style(run))
    ax.set_xscale("log")
    ax.set_xlim(1.0 / (~labels).sum(), 1.0)
    ax.set_ylim(0.5, 1.001)
    ax.set_xlabel("false-positive rate (ham flagged as spam), log scale")
    ax.set_ylabel("true-positive rate (spam caught)")
    ax.set_title(f"SpamAssassin as is, prequential ROC ({len(labels):,} messages); legend: (1−ROCA)%")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)
    fig.savefig(path, dpi=120)


def plot_rolling_error(runs: Sequence[Run], labels: np.ndarray, path: Path) -> None:
    """Error rate (spam when the score is > 0) over the last WINDOW messages, along the stream."""
    window = min(WINDOW, len(labels))
    fig = Figure(figsize=(10, 5.5), layout="tight")
    ax = fig.subplots()
    for run in runs:
        errors = ((run.scores > 0.0) != labels).astype(float)
        rolling = 100.0 * np.convolve(errors, np.ones(window) / window, mode="valid")
        ax.plot(np.arange(window, len(labels) + 1), rolling, label=run.name, **line_style(run))
    ax.set_xlabel("message index (chronological)")
    ax.set_ylabel(f"error rate over the last {window} messages (%)")
    ax.set_title("SpamAssassin as is, prequential rolling error rate (score > 0 is spam)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=120)


def shown(section: dict) -> str:
    """A configuration section as ``key=value, ...``."""
    return ", ".join(f"{key}={value}" for key, value in section.items())


def corpus_seconds(seconds: dict[str, float]) -> str:
    """The wall seconds of the streams of each corpus, summed: "spamassassin 1,234 s, lingspam 567 s"."""
    totals: dict[str, float] = {}
    for name, value in seconds.items():
        corpus = name.split("/")[0]
        totals[corpus] = totals.get(corpus, 0.0) + value
    return ", ".join(f"{corpus} {value:,.0f} s" for corpus, value in totals.items())


def notes(
    args: argparse.Namespace,
    configs: dict[str, dict],
    results: dict[str, list[Run]],
    seconds: dict[str, float],
    single: Sequence[str],
) -> list[str]:
    """What was measured and how."""
    config, alone = configs[OURS], configs[PEGASOS]
    grid = "; ".join(f"{peer.label}: {', '.join(peer.settings(args.quick))}" for peer in PEERS.values())
    lines = [
        "Prequential, immediate feedback: each message is scored, then learnt; (1−ROCA)% = 100·(1 − exact ROC AUC of "
        "all the scores of the run), spam positive, ties count one half. pegasos_stream runs only configs/spam.yaml "
        f"as it stood when the run started (model: {shown(config['model'])}; features: {shown(config['features'])}), "
        "the same for every stream, built by `build_model`/`build_features` and scored by `decision_function_one`. "
        f"'its Pegasos alone': the same file with its model section overridden to {shown(alone['model'])} (a "
        "`PegasosClassifier`, the committee's Pegasos member), on the same features.",
        "Peers are scored by a ranking score that does not saturate: river LogisticRegression by `_raw_dot_one` "
        "(w·x + b, before the sigmoid), PAClassifier by w·x + b, ALMAClassifier by `_raw_dot` (w·x), MultinomialNB by "
        "its log-odds `joint_log_likelihood(x)[True] − [False]`; SGDClassifier by `decision_function` before its "
        "`partial_fit`; Vowpal Wabbit by `get_partial_prediction()` after `predict` (the margin before VW clamps it to "
        "the label range), then `learn`.",
        "Representations: customary — river `BagOfWords()` (lowercased word counts), scikit-learn "
        "`HashingVectorizer(alternate_sign=False, n_features=2**20)` (lowercased words, l2-normalised), Vowpal "
        "Wabbit whitespace tokens, lowercased or raw (counts); 'spam.yaml features' — exactly pegasos_stream's "
        "(`build_features(config).transform_one`, one message at a time); 'binary words + 4-grams' — unnormalised "
        "binary words and character 4-grams of the lowercased first 3,000 characters of `message_text(text)` "
        "(subject, sender and decoded body of a message, a plain text as it is: the text of the 'email' reader; the "
        "'bytes' reader reads about the same text as bytes). "
        "Customary features of a message stream see the raw message, headers included.",
        "'ours − peer': the difference of the two (1−ROCA)% on the stream (negative: configs/spam.yaml ranks "
        "better) and its 95% interval by DeLong, DeLong & Clarke-Pearson's paired test (Biometrics 1988): the "
        "messages of the stream counted as a sample, both systems' scores of each message as given. 'ahead beyond "
        "the interval' names the system the interval excludes a tie in favour of; 'neither' where it holds 0. The "
        "interval does not count the choice of the peer's best among its grid on the very stream it is scored on.",
        f"Grids ({'only the first setting of each, --quick' if args.quick else 'every setting'}): {grid}. Each "
        "peer's best representation and setting per stream is reported: chosen on the very stream it is scored on, "
        "which favours the peers (pegasos_stream gets one fixed configuration).",
        "Events/s = messages / (extraction + learning seconds), one thread per process: each representation of a "
        "stream is extracted once (timed) into a cache of column ids and values shared by every system and setting "
        "on it; learning is the timed prequential loop on that cache, which rebuilds each message's input (dict, CSR "
        "row, VW example) — a small cost every system pays. String features are numbered in order of first "
        "appearance for the cache (river gets int keys, scikit-learn and VW those numbers as columns, collision-free)"
        + (f"; {args.jobs} streams ran at once, one per process." if args.jobs > 1 else "."),
    ]
    mine = [run for runs in results.values() for run in runs if run.system == OURS]
    same = all(run.end_to_end_identical for run in mine)
    lines.append(
        "'its own loop': pegasos_stream's end-to-end loop on the texts (`transform_one`, `decision_function_one`, "
        "`learn_one`), timed right after the cached run, in the same process; its scores are "
        + ("identical to the cached run's on every stream." if same else "NOT identical to the cached run's.")
    )
    lines.append(
        f"Wall time of every run on the streams of each corpus (summed over its streams): {corpus_seconds(seconds)}."
    )
    if single:
        lines.append(f"Left out, a single class in their first {args.limit:,} messages: {', '.join(single)}.")
    if any(name.split("/")[0] in ("lingspam", BOTH) for name in results):
        lines.append(
            "Ling-Spam: Androutsopoulos et al., 'An Evaluation of Naive Bayesian Anti-Spam Filtering', ECML 2000 "
            "workshop; its bare version (no lemmatiser, no stop-list), in the order of the shared data."
        )
    return lines


def headline_row(
    streams: dict[str, Stream], results: dict[str, list[Run]], corpus: str, limit: int | None
) -> list[str]:
    """The headline's row of a corpus: ours and the best tuned peer on it as is, and how the best tuned peer of each
    of its stress streams compares."""
    ratios, verdicts = [], []
    for name, runs in results.items():
        if name.startswith(f"{corpus}/"):
            mine, peer = best_by_peer(runs)[OURS], best_peer(runs)
            ratios.append(peer.one_minus_roca_pct / mine.one_minus_roca_pct)
            verdicts.append(beyond(paired_interval(mine, peer, [y for _, y in streams[name]])))
    ahead = sum(ratio > 1 for ratio in ratios)
    first = f"the first {limit:,} messages of each stream; " if limit else ""
    label = (
        f"spam filtering, (1−ROCA)%, {CORPORA[corpus]} as is (lower is better; {first}the best tuned peer of each of"
        f" {len(ratios)} {CORPORA[corpus]} stress streams ÷ ours: {min(ratios):.2f}–{max(ratios):.2f}, ours ahead on"
        f" {ahead} of {len(ratios)}; beyond DeLong's 95% interval, ours ahead on {verdicts.count('ours')}, the peer"
        f" on {verdicts.count('peer')})"
    )
    runs = results[f"{corpus}/asis"]
    mine, peer = best_by_peer(runs)[OURS], best_peer(runs)
    return [label, fmt(mine.one_minus_roca_pct, ".3f"), peer.name, fmt(peer.one_minus_roca_pct, ".3f")]


def parse_arguments() -> argparse.Namespace:
    """The command line; ``--out`` resolved to its default for the corpus when not given."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=[*CORPORA, BOTH], default="spamassassin",
                        help="the corpus whose streams run ('both': both, and the stream mixing them)")  # fmt: skip
    add_data_argument(parser)
    add_lingspam_argument(parser)
    parser.add_argument("--out", type=Path, help="JSON result file (default: reports/spam.json for --corpus "
                        "spamassassin, else reports/spam_stress.json, in the repository)")  # fmt: skip
    parser.add_argument("--limit", type=int, help="only the first N messages of each stream (after building it)")
    parser.add_argument("--streams", nargs="+", choices=list(SHAPES), default=list(SHAPES), metavar="SHAPE",
                        help=f"shapes of the streams to run, each on the corpora it applies to (default: all of "
                        f"{', '.join(SHAPES)})")  # fmt: skip
    parser.add_argument("--peers", nargs="+", choices=list(PEERS), default=list(PEERS), metavar="PEER",
                        help=f"peers to run (default: all of {', '.join(PEERS)})")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="one setting per peer (the first of its grid)")
    parser.add_argument("--jobs", type=int, default=2, help="streams run at once, one process each (default: 2)")
    args = parser.parse_args()
    if args.out is None:
        args.out = REPO / "reports" / ("spam.json" if args.corpus == "spamassassin" else "spam_stress.json")
    return args


def run_streams(
    args: argparse.Namespace, streams: dict[str, Stream], configs: dict[str, dict]
) -> dict[str, tuple[list[Run], float]]:
    """The runs of every stream and their wall seconds, ``--jobs`` streams at once (the longest first)."""
    if args.jobs <= 1:
        return {name: run_stream(name, stream, configs, args.peers, args.quick) for name, stream in streams.items()}
    order = sorted(streams, key=lambda name: -sum(len(text) for text, _ in streams[name]))
    with ProcessPoolExecutor(max_workers=args.jobs, mp_context=get_context("fork")) as pool:
        futures = {
            name: pool.submit(run_stream, name, streams[name], configs, args.peers, args.quick) for name in order
        }
        return {name: futures[name].result() for name in streams}


def asis_figures(args: argparse.Namespace, stream: Stream, runs: Sequence[Run]) -> list[str]:
    """Draw the ROC curves and the rolling error rate of SpamAssassin as is next to the JSON; their file names."""
    labels = np.array([y for _, y in stream])
    best = list(best_by_peer(runs).values())
    names = [f"{args.out.stem}_roc.png", f"{args.out.stem}_rolling_error.png"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    plot_roc(best, labels, args.out.parent / names[0])
    plot_rolling_error(best, labels, args.out.parent / names[1])
    return names


def main() -> None:
    args = parse_arguments()
    prepare_timing()
    config = load_config(SPAM_CONFIG)  # once: every stream gets the same configuration
    configs = {OURS: config, PEGASOS: pegasos_config(config)}
    streams, single = build_streams(args, args.streams)
    timed = run_streams(args, streams, configs)
    results = {name: runs for name, (runs, _) in timed.items()}
    seconds = {name: wall for name, (_, wall) in timed.items()}

    figures = {}
    asis = "spamassassin/asis"
    if asis in results:
        figures[asis] = asis_figures(args, streams[asis], results[asis])
    headline = [headline_row(streams, results, corpus, args.limit) for corpus in CORPORA if f"{corpus}/asis" in results]
    sections = [summary_section(streams, results, notes(args, configs, results, seconds, single))]
    sections.append(fixed_section(results))
    for name in streams:
        sections.append(stream_section(name, streams[name], results[name], args.quick, figures.get(name, [])))
    corpora = " and ".join(label for corpus, label in CORPORA.items() if args.corpus in (corpus, BOTH))
    write_results(
        args,
        f"Spam filtering under stress ({corpora}): pegasos_stream against tuned peers",
        sections,
        headline=headline,
        config={"model": config["model"], "features": config["features"]},
        pegasos_alone={"model": configs[PEGASOS]["model"]},
        stream_seconds=seconds,
        runs=[run.to_json() for runs in results.values() for run in runs],
    )


if __name__ == "__main__":
    main()
