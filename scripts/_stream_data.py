"""Files for the stream benchmarks: a large synthetic svmlight log, its Vowpal Wabbit twin, JSON events.

The synthetic stream has the distribution of ``_data.synthetic_rcv1_like`` (Zipf-like terms, positive
tf-idf-like values, unit L2 norm, a fixed linear concept with 5% label noise) but is generated in
numpy chunks and written straight to disk, so 200,000 lines take seconds and little memory. Feature
``j`` is written as the svmlight index ``j + 1`` (indices ascending, as scikit-learn's loader wants).
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import numpy as np

#: Rows generated (and formatted) per numpy chunk.
CHUNK = 10_000


def add_stream_arguments(parser: argparse.ArgumentParser, mean_nnz: float, seed: int) -> None:
    """Add ``--features``, ``--nnz`` and ``--seed``, the shape of the synthetic stream, to ``parser``."""
    parser.add_argument("--features", type=int, default=47_236, help="features of the synthetic stream")
    parser.add_argument("--nnz", type=float, default=mean_nnz, help="mean feature draws per example")
    parser.add_argument("--seed", type=int, default=seed, help="seed of the synthetic stream")


def _open_text(path: Path, mode: str) -> TextIO:
    """A text file, gzip-compressed (level 1: fast) when the name ends in ``.gz``."""
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", encoding="ascii", compresslevel=1)
    return open(path, mode, encoding="ascii")


def rcv1_like_rows(
    n: int, n_features: int = 47_236, mean_nnz: float = 75.0, seed: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray, bool]]:
    """(sorted column indices, values, label) for each of ``n`` examples, generated in chunks.

    Per example ``max(Poisson(mean_nnz), 1)`` draws from p_j ∝ 1/(j + 10); repeated draws of a column
    merge into one feature; values idf_j·U(0.5, 1.5), scaled to unit L2 norm. Label: sign of
    ⟨w*, x⟩ with w*_j ~ N(0, 1)·√(p_j/p_0), flipped with probability 0.05.
    """
    rng = np.random.default_rng(seed)
    term_p = 1.0 / (np.arange(n_features) + 10.0)
    term_p /= term_p.sum()
    idf = np.log(1.0 / term_p) / np.log(n_features)
    true_w = rng.normal(size=n_features) * np.sqrt(term_p / term_p[0])
    cumulative = np.cumsum(term_p)
    for start in range(0, n, CHUNK):
        rows = min(CHUNK, n - start)
        nnz = np.maximum(rng.poisson(mean_nnz, size=rows), 1)
        row_of = np.repeat(np.arange(rows), nnz)
        columns = np.minimum(np.searchsorted(cumulative, rng.random(row_of.size), side="right"), n_features - 1)
        values = idf[columns] * rng.uniform(0.5, 1.5, size=columns.size)
        flips = rng.random(rows) < 0.05
        order = np.lexsort((columns, row_of))
        row_of, columns, values = row_of[order], columns[order], values[order]
        keep = np.ones(columns.size, dtype=bool)  # one feature per (row, column): the last draw
        keep[:-1] = (row_of[1:] != row_of[:-1]) | (columns[1:] != columns[:-1])
        row_of, columns, values = row_of[keep], columns[keep], values[keep]
        norms = np.sqrt(np.bincount(row_of, weights=values * values, minlength=rows))
        values = values / norms[row_of]
        scores = np.bincount(row_of, weights=true_w[columns] * values, minlength=rows)
        labels = (scores > 0) != flips
        bounds = np.searchsorted(row_of, np.arange(rows + 1))
        for i in range(rows):
            a, b = bounds[i], bounds[i + 1]
            yield columns[a:b], values[a:b], bool(labels[i])


def write_svmlight(path: Path, n: int, n_features: int, mean_nnz: float, seed: int) -> dict:
    """Write the synthetic stream as svmlight lines ``+1 3:0.125 17:0.5``; returns its shape."""
    total_nnz = positives = 0
    with _open_text(path, "w") as out:
        lines = []
        for columns, values, label in rcv1_like_rows(n, n_features, mean_nnz, seed):
            pairs = " ".join(f"{j}:{v:.6g}" for j, v in zip((columns + 1).tolist(), values.tolist(), strict=True))
            lines.append(("+1 " if label else "-1 ") + pairs + "\n")
            total_nnz += len(columns)
            positives += label
            if len(lines) >= CHUNK:
                out.writelines(lines)
                lines.clear()
        out.writelines(lines)
    return {"n": n, "n_features": n_features, "mean_nnz": total_nnz / n, "positive_fraction": positives / n}


def svmlight_to_vw(source: Path, target: Path) -> None:
    """The same examples in Vowpal Wabbit's text format: ``1 |f 3:0.125 17:0.5`` (labels ±1)."""
    with _open_text(source, "r") as lines, open(target, "w", encoding="ascii") as out:
        for line in lines:
            label, _, pairs = line.partition(" ")
            out.write(("1 |f " if float(label) > 0 else "-1 |f ") + pairs)


def iter_svmlight_lines(path: Path) -> Iterator[bytes]:
    """The raw lines of a (possibly gzipped) svmlight file, without their line ends."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as lines:
        for line in lines:
            yield line.rstrip(b"\r\n")


def write_feature_events(path: Path, n: int, n_features: int, mean_nnz: float, seed: int) -> list[bytes]:
    """``n`` JSON feature events ``{"id", "x": {"f<j>": value}, "label": bool}``, also written to ``path``.

    Returns the encoded events (one per line of the file, without the newline), ready to produce.
    """
    events = [
        json.dumps(
            {
                "id": f"e{i}",
                "x": {f"f{j}": round(v, 6) for j, v in zip(columns.tolist(), values.tolist(), strict=True)},
                "label": label,
            }
        ).encode()
        for i, (columns, values, label) in enumerate(rcv1_like_rows(n, n_features, mean_nnz, seed))
    ]
    with open(path, "wb") as out:
        out.writelines(event + b"\n" for event in events)
    return events
