"""DictHasher and feature_hash: fixed columns in every process, collisions summed, columns bounded."""

from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from river import base, checks

from pegasos_stream import PegasosClassifier
from pegasos_stream.features import DictHasher, EmailFeatures, feature_hash

FUZZ = settings(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])

#: Keys of every supported type, with their columns under DictHasher(20), pinned: a change of
#: the hash would silently change every hashed model and checkpoint.
PINNED = {"c:spam": 875601, "w:café": 893112, 7: 240883, ("a", 1): 884752, 0.5: 193100, b"\0x": 604508, None: 220832}

KEYS = st.one_of(
    st.text(max_size=12),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.binary(max_size=8),
    st.tuples(st.text(max_size=4), st.integers(-5, 5)),
)
VALUES = st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.integers(-1000, 1000))


def test_pinned_columns():
    hasher = DictHasher(20)
    assert hasher.transform_one(dict.fromkeys(PINNED, 1.0)) == dict.fromkeys(PINNED.values(), 1.0)
    assert list(hasher.transform_one(dict.fromkeys(PINNED, 1.0))) == list(PINNED.values())


def test_keys_equal_in_a_dict_share_a_column():
    """1, 1.0, True and np.int64(1) are one dict key: they must hash alike."""
    assert feature_hash(1) == feature_hash(1.0) == feature_hash(True) == feature_hash(np.int64(1))
    assert feature_hash(np.str_("ab")) == feature_hash("ab")
    assert feature_hash(np.float32(0.5)) == feature_hash(0.5) and feature_hash(-0.0) == feature_hash(0)
    assert feature_hash(1.5) != feature_hash(1)
    assert feature_hash("1") != feature_hash(1) != feature_hash(b"1")
    assert feature_hash(("a", "b")) != feature_hash(("ab",)) != feature_hash("ab")


def test_email_features_hash_with_the_same_function():
    text = "Subject: Cheap pills\n\nBuy cheap pills now"
    plain = EmailFeatures(words=True, normalize=False).transform_one(text)
    hashed = EmailFeatures(words=True, normalize=False, hash_bits=20).transform_one(text)
    assert hashed == DictHasher(20).transform_one(plain)


def _columns_in_subprocess(seed: str) -> list:
    code = (
        "import json\n"
        "from pegasos_stream.features import DictHasher\n"
        f"keys = {list(PINNED)!r} + [f'k{{i}}' for i in range(200)] + [('t', i) for i in range(50)]\n"
        "print(json.dumps(list(DictHasher(20).transform_one({k: 1.0 for k in keys}).items())))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_columns_are_the_same_in_every_process():
    runs = [_columns_in_subprocess(seed) for seed in ("1", "2", "3")]
    assert runs[0] == runs[1] == runs[2]
    assert runs[0][: len(PINNED)] == [[column, 1.0] for column in PINNED.values()]


def test_colliding_keys_are_summed_in_order_of_first_appearance():
    hasher = DictHasher(1)  # two columns: collisions guaranteed
    keys = [f"k{i}" for i in range(8)]
    columns = [feature_hash(key) & 1 for key in keys]
    x = {key: float(i + 1) for i, key in enumerate(keys)}
    want: dict[int, float] = {}
    for column, value in zip(columns, x.values()):
        want[column] = want.get(column, 0.0) + value
    got = hasher.transform_one(x)
    assert got == want and list(got) == list(dict.fromkeys(columns))
    assert sum(got.values()) == sum(x.values())


def test_a_single_key_keeps_its_value_object():
    assert DictHasher(8).transform_one({"a": 3})[feature_hash("a") & 255] == 3
    assert DictHasher(8).transform_one({}) == {}


@FUZZ
@given(bits=st.integers(1, 32), x=st.dictionaries(KEYS, VALUES, max_size=30))
def test_columns_bounded_and_values_conserved(bits, x):
    hashed = DictHasher(bits).transform_one(x)
    assert all(type(column) is int and 0 <= column < 2**bits for column in hashed)
    assert len(hashed) <= len(x)
    assert math.isclose(sum(hashed.values()), math.fsum(x.values()), rel_tol=1e-9, abs_tol=1e-6)
    assert hashed == DictHasher(bits).transform_one(dict(x))


@pytest.mark.parametrize("bits", [0, 33, -1, True, 20.0, "20", None])
def test_bad_hash_bits_refused(bits):
    with pytest.raises(ValueError, match="hash_bits"):
        DictHasher(bits)


@pytest.mark.parametrize("value", [math.nan, math.inf, "1.0", None, 10**400])
def test_bad_value_refused_naming_its_key(value):
    with pytest.raises(ValueError, match="'bad'"):
        DictHasher(8).transform_one({"a": 1.0, "bad": value})


@pytest.mark.parametrize("key", [frozenset({"a"}), ("a", object())], ids=["frozenset", "tuple with an object"])
def test_key_of_another_type_refused(key):
    with pytest.raises(ValueError, match="cannot be hashed"):
        DictHasher(8).transform_one({"a": 1.0, key: 1.0})


def test_is_a_river_transformer_passing_the_checks():
    hasher = DictHasher(12)
    assert isinstance(hasher, base.Transformer)
    checks.check_estimator(hasher)
    assert pickle.loads(pickle.dumps(hasher)).transform_one({"a": 1.0}) == hasher.transform_one({"a": 1.0})
    assert hasher.clone({"hash_bits": 4}).hash_bits == 4


def test_model_size_bounded_by_the_columns():
    """Ever-new feature names: the hashed model never holds more than 2^bits weights."""
    model = DictHasher(6) | PegasosClassifier()
    for i in range(300):
        model.learn_one({f"e{i}_{j}": 1.0 for j in range(5)}, i % 2 == 0)
    assert 0 < len(model["PegasosClassifier"].weights) <= 2**6
