"""Feature extraction and an in-memory synthetic stream, shared by the benchmark scripts.

Features are plain ``dict`` objects (river's input format): string keys for words and for the synthetic
stream, hashed column numbers for character n-grams. Loading the SpamAssassin stream is ``_harness``'s.
"""

from __future__ import annotations

import email
import email.policy
import math
import re
from collections.abc import Sequence

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import HashingVectorizer

Features = dict[str, float]

_WORD = re.compile(r"[a-z0-9]+")


def subject_and_body(raw: str) -> str:
    """The Subject header and every text/* part of a raw RFC 822 message (transfer encodings undone).

    Payload bytes are decoded as Latin-1, which never fails; the tokenizer only keeps ASCII letters and
    digits, so the declared charset would not change the tokens.
    """
    message = email.message_from_string(raw, policy=email.policy.compat32)
    pieces = [str(message.get("Subject", ""))]
    for part in message.walk():
        if part.get_content_maintype() != "text":
            continue
        payload = part.get_payload(decode=True)
        if isinstance(payload, bytes):
            pieces.append(payload.decode("latin-1"))
    return "\n".join(pieces)


def word_features(raw: str) -> Features:
    """Binary bag of words: {token: 1.0} for the lowercase ``[a-z0-9]+`` tokens of subject and body."""
    return dict.fromkeys(_WORD.findall(subject_and_body(raw).lower()), 1.0)


def l2_normalise(x: Features) -> Features:
    """``x / ||x||`` (``x`` itself if it is all zero)."""
    norm = math.sqrt(sum(v * v for v in x.values()))
    return {k: v / norm for k, v in x.items()} if norm else x


def char_ngram_vectorizer(n: int = 4, n_features: int = 2**20) -> HashingVectorizer:
    """Binary hashed character n-grams, case kept, rows L2-normalised.

    The representation of Sculley & Wachman (2007), "Relaxed online SVMs for spam filtering": binary
    4-mers of the raw message (headers included), unit Euclidean norm. Hashing is scikit-learn's signed
    32-bit MurmurHash3, deterministic across runs and machines.
    """
    return HashingVectorizer(
        analyzer="char",
        ngram_range=(n, n),
        lowercase=False,
        binary=True,
        norm="l2",
        alternate_sign=False,
        n_features=n_features,
    )


def char_ngram_matrix(
    texts: Sequence[str], n: int = 4, prefix: int = 3000, n_features: int = 2**20
) -> sparse.csr_matrix:
    """``char_ngram_vectorizer`` rows of the first ``prefix`` characters of each text."""
    return char_ngram_vectorizer(n, n_features).transform([text[:prefix] for text in texts]).tocsr()


def csr_rows(matrix: sparse.csr_matrix) -> list[dict[int, float]]:
    """Each row of a CSR matrix as a dict {column: value}."""
    indptr, indices, data = matrix.indptr, matrix.indices.tolist(), matrix.data.tolist()
    return [
        dict(zip(indices[a:b], data[a:b], strict=True))
        for a, b in zip(indptr[:-1].tolist(), indptr[1:].tolist(), strict=True)
    ]


def synthetic_rcv1_like(
    n: int, n_features: int = 47_236, mean_nnz: float = 75.0, seed: int = 0
) -> list[tuple[Features, bool]]:
    """A sparse text-like binary classification stream shaped like RCV1 (Lewis et al. 2004).

    Per example: ``Poisson(mean_nnz)`` feature draws (at least one; repeats merge, so the mean number
    of distinct features is a little below ``mean_nnz``) from a Zipf-like term distribution
    (p_j ∝ 1/(j + 10)), positive tf-idf-like values, unit L2 norm (RCV1 is cosine-normalised).
    Label: sign of a fixed linear score whose Gaussian weights shrink with term rarity (∝ √p_j: frequent
    terms carry most of the signal, as topic words do), with 5% of the labels flipped (not separable).
    """
    rng = np.random.default_rng(seed)
    term_p = 1.0 / (np.arange(n_features) + 10.0)
    term_p /= term_p.sum()
    idf = np.log(1.0 / term_p) / np.log(n_features)
    true_w = rng.normal(size=n_features) * np.sqrt(term_p / term_p[0])
    nnz = np.maximum(rng.poisson(mean_nnz, size=n), 1)
    columns = rng.choice(n_features, size=int(nnz.sum()), p=term_p)
    values = idf[columns] * rng.uniform(0.5, 1.5, size=columns.size)
    flips = rng.random(n) < 0.05
    names = [f"f{j}" for j in range(n_features)]
    stream = []
    start = 0
    for i, k in enumerate(nnz.tolist()):
        draws = dict(zip(columns[start : start + k].tolist(), values[start : start + k].tolist(), strict=True))
        start += k
        norm = math.sqrt(sum(v * v for v in draws.values()))
        score = sum(true_w[j] * v for j, v in draws.items())
        x = {names[j]: v / norm for j, v in draws.items()}
        stream.append((x, bool(score > 0) != bool(flips[i])))
    return stream
