#!/usr/bin/env python3
"""Personal filters on a shared model: the shared model alone, a model per user alone, and the shared model plus
a personal offset per user (`PersonalPegasos`), prequential (1−ROCA)% per user and overall, on multi-user streams
built from the two shared corpora.

The streams (deterministic; no other corpus):

- ``two-corpora``: SpamAssassin and Ling-Spam as two users' mail, in a seeded interleaving that keeps each
  corpus's order (``_stress.interleaved``);
- ``recipients``: SpamAssassin split by the local part of its ``Delivered-To`` address (``yyyy``, ``zzzz``,
  the rest as ``other``), in time order;
- ``disagreeing``: SpamAssassin dealt to four users in a seeded order, one of whom (``dana``) calls the mail of
  one mailing list (``fork``, its ham) spam: one user's newsletter is another's spam;
- ``few-labels``: SpamAssassin as ``two-corpora`` but Ling-Spam cut to its first 150 messages, a user with few
  labels beside one with many.

Every model of ours reads the features of configs/spam.yaml; the shared model and each per-user model is its
mixture. Beside them, the peer a user would otherwise pick, on the representation and setting the held-back
mailboxes found best for it: Vowpal Wabbit logistic on lowercased whitespace tokens (``-b 20 -l 2``), one model for
the stream and one per user, scored by its raw margin.

    python scripts/bench_personal.py [--limit N] [--streams two-corpora recipients ...] [--offsets JSON]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
from _harness import (
    REPO,
    Message,
    add_data_argument,
    add_lingspam_argument,
    add_out_argument,
    load_messages,
    prequential_metrics,
    section,
    write_results,
)
from _stress import SEED, header, interleaved
from vowpalwabbit import pyvw

from pegasos_stream.cli.assemble import build_features, build_model
from pegasos_stream.cli.config import load_config
from pegasos_stream.learners import PersonalPegasos

SPAM_CONFIG = REPO / "configs" / "spam.yaml"
PERSONAL_CONFIG = REPO / "configs" / "personal.yaml"
#: A user's stream: (text, is_spam, user).
Stream = list[tuple[str, bool, str]]
_ADDRESS = re.compile(r"([\w.+-]+)@[\w.-]+")


def two_corpora(spamassassin: Sequence[Message], lingspam: Sequence[Message]) -> Stream:
    """SpamAssassin and Ling-Spam as the users ``sa`` and ``ls``."""
    users = {id(m): "sa" for m in spamassassin} | {id(m): "ls" for m in lingspam}
    corpora = {"spamassassin": spamassassin, "lingspam": lingspam}
    return [(m.text, m.is_spam, users[id(m)]) for m in interleaved(corpora)]


def recipients(spamassassin: Sequence[Message], _: Sequence[Message]) -> Stream:
    """SpamAssassin by the local part of ``Delivered-To``: yyyy, zzzz or other."""
    stream = []
    for m in spamassassin:
        found = _ADDRESS.search(header(m.text, "delivered-to").lower())
        local = found.group(1) if found else ""
        stream.append((m.text, m.is_spam, local if local in ("yyyy", "zzzz") else "other"))
    return stream


def disagreeing(spamassassin: Sequence[Message], _: Sequence[Message]) -> Stream:
    """SpamAssassin dealt to four users; dana calls the fork list's mail spam."""
    users = np.random.default_rng(SEED).choice(["ann", "bob", "cat", "dana"], size=len(spamassassin)).tolist()
    stream = []
    for m, user in zip(spamassassin, users, strict=True):
        fork = "fork@" in (header(m.text, "to") + " " + header(m.text, "cc")).lower()
        stream.append((m.text, m.is_spam or (user == "dana" and fork), user))
    return stream


def few_labels(spamassassin: Sequence[Message], lingspam: Sequence[Message]) -> Stream:
    """``two_corpora`` with Ling-Spam's first 150 messages only."""
    return two_corpora(spamassassin, lingspam[:150])


STREAMS: dict[str, Callable[[Sequence[Message], Sequence[Message]], Stream]] = {
    "two-corpora": two_corpora,
    "recipients": recipients,
    "disagreeing": disagreeing,
    "few-labels": few_labels,
}


# -- the three models ----------------------------------------------------------------------------


def shared_scores(config: dict, xs: list[dict], stream: Stream) -> np.ndarray:
    """The shared model alone: one mixture learns every user's labels."""
    model = build_model(config)
    scores = np.empty(len(xs))
    for i, (x, (_, y, _)) in enumerate(zip(xs, stream, strict=True)):
        scores[i] = model.decision_function_one(x)
        model.learn_one(x, y)
    return scores


def per_user_scores(config: dict, xs: list[dict], stream: Stream) -> np.ndarray:
    """A model per user alone: each user's mixture learns that user's labels only."""
    models: dict[str, object] = {}
    scores = np.empty(len(xs))
    for i, (x, (_, y, user)) in enumerate(zip(xs, stream, strict=True)):
        model = models.get(user) or models.setdefault(user, build_model(config))
        scores[i] = model.decision_function_one(x)  # type: ignore[attr-defined]
        model.learn_one(x, y)  # type: ignore[attr-defined]
    return scores


def personal_scores(config: dict, xs: list[dict], stream: Stream, offsets: dict) -> np.ndarray:
    """The shared model plus a personal offset per user (`PersonalPegasos` with the settings ``offsets``)."""
    model = PersonalPegasos(build_model(config), **offsets)
    scores = np.empty(len(xs))
    for i, (x, (_, y, user)) in enumerate(zip(xs, stream, strict=True)):
        scores[i] = model.decision_function_one(x, user)
        model.learn_one(x, y, user=user)
    return scores


def vw_scores(stream: Stream, per_user: bool) -> np.ndarray:
    """Vowpal Wabbit logistic (``-b 20 -l 2``) on lowercased whitespace tokens and their counts, one workspace for
    the stream or one per user: its unclamped margin (``get_partial_prediction``) before it learns each message."""
    workspaces: dict[str, pyvw.Workspace] = {}
    vocabulary: dict[str, int] = {}  # tokens numbered in order of first appearance (below 2**20: no collision)
    scores = np.empty(len(stream))
    for i, (text, y, user) in enumerate(stream):
        owner = user if per_user else ""
        if owner not in workspaces:
            workspaces[owner] = pyvw.Workspace("--loss_function logistic -l 2 -b 20 --quiet")
        workspace = workspaces[owner]
        counts = Counter(text.lower().split())
        features = [(vocabulary.setdefault(token, len(vocabulary)), float(n)) for token, n in counts.items()]
        example = workspace.example({"x": features})
        example.set_label_string("1" if y else "-1")
        workspace.predict(example)
        scores[i] = example.get_partial_prediction()
        workspace.learn(example)
        workspace.finish_example(example)
    for workspace in workspaces.values():
        workspace.finish()
    return scores


def roca(scores: np.ndarray, labels: Sequence[bool]) -> float:
    return prequential_metrics(scores, list(labels))[1] if len(set(labels)) == 2 else float("nan")


def stream_rows(name: str, stream: Stream, runs: dict[str, np.ndarray]) -> list[list[str]]:
    """One row per user and one for the whole stream: n, spam, each model's (1−ROCA)% and whether shared +
    personal leads."""
    users = list(dict.fromkeys(user for _, _, user in stream))
    labels = np.array([y for _, y, _ in stream])
    owners = np.array([user for _, _, user in stream])
    rows = []
    for user in [*users, None]:
        mask = np.ones(len(stream), bool) if user is None else owners == user
        figures = {kind: roca(scores[mask], labels[mask].tolist()) for kind, scores in runs.items()}
        ours = figures["shared + personal"]
        best_other = min(figures["shared"], figures["per user"])
        best_peer = min(figures["VW shared"], figures["VW per user"])
        rows.append(
            [
                name,
                "all" if user is None else user,
                f"{int(mask.sum()):,}",
                f"{int(labels[mask].sum()):,}",
                *(f"{value:.3f}" for value in figures.values()),
                "yes" if ours < best_other else "**no**",
                "yes" if ours < best_peer else "**no**",
            ]
        )
    return rows


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(parser)
    add_lingspam_argument(parser)
    add_out_argument(parser, "personal.json")
    parser.add_argument("--limit", type=int, default=None, help="the first N messages of each stream")
    parser.add_argument("--streams", nargs="+", default=list(STREAMS), choices=list(STREAMS))
    parser.add_argument(
        "--offsets",
        default="{}",
        type=json.loads,
        help='the offsets\' settings as JSON, e.g. \'{"step": "pegasos", "lambda_": 1e-3}\' (default: the shipped'
        " personal configuration's)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_arguments()
    spamassassin, lingspam = load_messages(args.data, "--data"), load_messages(args.lingspam_data, "--lingspam-data")
    config = load_config(SPAM_CONFIG, [])
    transform = build_features(config).transform_one
    shipped = load_config(PERSONAL_CONFIG, [])["model"]
    offsets = {key: value for key, value in shipped.items() if key not in ("kind", "shared")} | args.offsets
    rows = []
    for name in args.streams:
        stream = STREAMS[name](spamassassin, lingspam)[: args.limit]
        xs = [transform(text) for text, _, _ in stream]
        started = time.perf_counter()
        runs = {
            "shared": shared_scores(config, xs, stream),
            "per user": per_user_scores(config, xs, stream),
            "shared + personal": personal_scores(config, xs, stream, offsets),
            "VW shared": vw_scores(stream, per_user=False),
            "VW per user": vw_scores(stream, per_user=True),
        }
        rows += stream_rows(name, stream, runs)
        print(f"[{name}] done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    columns = ["stream", "user", ">messages", ">spam", ">shared alone", ">per user alone", ">shared + personal",
               ">VW shared", ">VW per user", "shared + personal leads ours", "leads VW"]  # fmt: skip
    notes = [
        "(1−ROCA)% of the prequential scores (lower is better), each user's scores and the stream's as a whole.",
        "Every model of ours on the features of configs/spam.yaml, its mixture as the shared and the per-user model;"
        f" the personal offsets with {json.dumps(offsets)}.",
        "VW: Vowpal Wabbit logistic -b 20 -l 2 on lowercased whitespace tokens (counts), one model for the stream"
        " (shared) or one per user, scored by its raw margin: the peer and setting that led on held-back mailboxes.",
    ]
    title = "Per user (1−ROCA)%: shared alone, per user alone, shared + personal, and Vowpal Wabbit"
    table = section(title, columns, rows, notes)
    write_results(args, "Personal filters on a shared model", [table], offsets=offsets)


if __name__ == "__main__":
    main()
