"""The compiled module's boundary: malformed arrays are refused before anything is learned, and Python
code run from inside a compiled pass (a key's __eq__ or __hash__, a value's __float__) neither breaks it
nor changes what the Python expression it stands for gives.

``learn_csr`` and the raw ``_loops.learn_rows``, ``learn_logistic_rows``, ``learn_pegasos_logistic_rows`` and
``learn_hinge_rows`` entries get each malformed input in turn: each is a ValueError saying what is wrong, and the model
(or every array the raw entry writes) is left as it was.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import platform
from collections.abc import Callable
from itertools import repeat
from operator import add, mul
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pegasos_stream import AdaGradLogistic, NormalizedHinge, PegasosClassifier, PegasosLogistic, _compiled
from pegasos_stream.cli.main import HEAP_BLOCK, HEAP_SLACK
from pegasos_stream.io import sources
from pegasos_stream.learners import compiled, weights
from pegasos_stream.learners.rows import Rows
from pegasos_stream.learners.schedule import MAX_NORM

if _compiled.LOOPS is None or _compiled.BLOCKS is None:
    pytest.skip(
        "the compiled modules are not in use (not built, or PEGASOS_STREAM_PURE_PYTHON is set)", allow_module_level=True
    )
_loops = _compiled.LOOPS
_blocks = _compiled.BLOCKS


def _trained(n_features: int | None = None) -> PegasosClassifier:
    model = PegasosClassifier(lambda_=1e-2, fit_intercept=True, average=True, n_features=n_features)
    model.learn_csr([0, 2, 3, 5], [0, 1, 1, 0, 2], [1.0, -2.0, 0.5, 3.0, 1.0], [True, False, True])
    return model


MALFORMED_CSR = {
    "indptr past indices": (([0, 4000], [0], [1.0], [True]), {}, r"^indptr: runs from 0 to 4000, outside 0\.\.1 "),
    "indices longer than data": (([0, 3], [0, 1, 2], [1.0], [True]), {}, r"^indices and data: 3 and 1 entries"),
    "decreasing indptr": (
        ([0, 2, 1, 3], [0, 1, 2], [1.0, 1.0, 1.0], [True, False, True]),
        {},
        r"^indptr: row 1: indptr\[2\] = 1 decreases from indptr\[1\] = 2$",
    ),
    "negative column": (([0, 2], [0, -1], [1.0, 2.0], [True]), {}, r"^row 0: column -1 is out of range"),
    "column past the columns": (
        ([0, 1, 2], [0, 3], [1.0, 2.0], [True, False]),
        {"columns": ["a", "b", "c"]},
        r"^row 1: column 3 is out of range: expected 0 <= column < 3$",
    ),
    "no indptr": (([], [], [], []), {}, r"^indptr: expected the n \+ 1 bounds of n rows, got none$"),
    "more labels than rows": (([0, 1], [0], [1.0], [True, False]), {}, r"^learn_csr: 1 rows but labels of shape"),
    "fewer sample weights than rows": (
        ([0, 1, 2], [0, 1], [1.0, 1.0], [True, False]),
        {"sample_weight": [1.0]},
        r"^learn_csr: 2 rows but sample weights of shape \(1,\)$",
    ),
    "repeated column": (
        ([0, 1, 3], [0, 2, 2], [1.0, 2.0, 3.0], [True, False]),
        {},
        r"^row 1: column 2 appears more than once \(.*sum_duplicates",
    ),
    "repeated named column": (
        ([0, 1, 3], [0, 2, 2], [1.0, 2.0, 3.0], [True, False]),
        {"columns": ["a", "b", "c"]},
        r"^row 1: column 'c' appears more than once",
    ),
    "float64 indptr": ((np.array([0.0, 1.0]), [0], [1.0], [True]), {}, r"^indptr: expected a 1-d array of integers"),
    "float indices": (([0, 1], np.array([0.5]), [1.0], [True]), {}, r"^indices: expected a 1-d array of integers"),
    "2-d indices": (
        ([0, 2], np.array([[0, 1]]), [1.0, 2.0], [True]),
        {},
        r"^indices: expected a 1-d array of integers, got a 2-d",
    ),
    "2-d data": (([0, 2], [0, 1], np.array([[1.0, 2.0]]), [True]), {}, r"^data: expected a 1-d array of numbers"),
    "text data": (([0, 1], [0], np.array(["1.0"]), [True]), {}, r"^data: expected a 1-d array of numbers"),
    "2-d labels": (([0, 1], [0], [1.0], np.array([[True]])), {}, r"^learn_csr: 1 rows but labels of shape \(1, 1\)$"),
    "unknown label": (([0, 1, 2], [0, 1], [1.0, 1.0], np.array([1, 2])), {}, r"^unknown label 2: a binary label is"),
    "NaN label": (([0, 1], [0], [1.0], np.array([math.nan])), {}, r"^unknown label nan"),
    "negative sample weight": (
        ([0, 1, 2], [0, 1], [1.0, 1.0], [True, False]),
        {"sample_weight": np.array([1.0, -1.0])},
        r"^sample weight -1\.0: expected a finite number >= 0$",
    ),
    "infinite sample weight": (
        ([0, 1], [0], [1.0], [True]),
        {"sample_weight": np.array([math.inf])},
        r"^sample weight inf: expected",
    ),
}


@pytest.mark.parametrize("n_features", [None, 4], ids=["dicts", "arrays"])
@pytest.mark.parametrize("case", MALFORMED_CSR, ids=list(MALFORMED_CSR))
def test_learn_csr_refuses_a_malformed_matrix_and_learns_nothing(case, n_features):
    """Alike with weights in dicts (the matrix's columns numbered) and in arrays (the columns as they are)."""
    args, kwargs, message = MALFORMED_CSR[case]
    model = _trained(n_features)
    before = pickle.dumps(model)
    with pytest.raises(ValueError, match=message):
        model.learn_csr(*args, **kwargs)
    assert pickle.dumps(model) == before


def test_learn_csr_over_arrays_refuses_a_column_past_them_and_learns_nothing():
    model = _trained(4)
    before = pickle.dumps(model)
    with pytest.raises(ValueError, match=r"^row 1: column 4 is out of range: expected 0 <= column < 4$"):
        model.learn_csr([0, 1, 2], [3, 4], [1.0, 1.0], [True, False])
    assert pickle.dumps(model) == before


def test_learn_csr_takes_any_integer_and_number_arrays_strided_or_not():
    """The checks refuse what is wrong, not what converts exactly: int32 and strided indices, float32 data."""
    indptr, indices, data = [0, 2, 3, 5], [0, 1, 1, 0, 2], [1.0, -2.0, 0.5, 3.0, 1.0]
    expected = PegasosClassifier()
    expected.learn_csr(indptr, indices, data, [True, False, True])
    model = PegasosClassifier()
    strided = np.repeat(np.array(indices, dtype=np.uint16), 2)[::2]
    model.learn_csr(np.array(indptr, dtype=np.int32), strided, np.array(data, dtype=np.float32), [1, -1, 1])
    assert pickle.dumps(model) == pickle.dumps(expected)


# -- the raw entry -----------------------------------------------------------------------------

ARRAYS = (
    "indptr", "indices", "data", "signs", "weights", "v", "offset", "prior", "present_v", "present_offset",
    "new_v", "new_offset", "state", "istate", "params", "decisions", "probas",
)  # fmt: skip


def _raw_arguments() -> dict:
    """Valid arguments of ``_loops.learn_rows`` (a model past its first step, three rows), by name, and ``start``."""
    model = PegasosClassifier(lambda_=1e-4, average=True)
    model.learn_one({"a": 1.0}, True)
    rows = Rows.from_dicts([{"a": 1.0, "b": 2.0}, {"b": -1.0}, {"a": 0.5, "c": 1.0}])
    n, m = len(rows), len(rows.keys)
    state, istate = compiled.state_arrays(model._loop_state())
    return {
        "indptr": rows.indptr.copy(),
        "indices": rows.indices.copy(),
        "data": rows.data.copy(),
        "signs": np.array([1.0, -1.0, 1.0]),
        "weights": np.ones(n),
        "v": np.zeros(m),
        "offset": np.zeros(m),
        "prior": np.zeros(m),
        "present_v": np.zeros(m, dtype=bool),
        "present_offset": np.zeros(m, dtype=bool),
        "new_v": np.zeros(m, dtype=np.int64),
        "new_offset": np.zeros(m, dtype=np.int64),
        "state": state,
        "istate": istate,
        "params": compiled.settings_array(model._loop_settings()),
        "decisions": np.zeros(n),
        "probas": np.zeros(n),
        "start": 0,
    }


def _call(arguments: dict) -> int:
    return _loops.learn_rows(*(arguments[name] for name in ARRAYS), arguments["start"])


def _read_only(array: np.ndarray) -> np.ndarray:
    array = array.copy()
    array.flags.writeable = False
    return array


def _set(name: str, index: int, value: float) -> Callable[[dict], None]:
    def change(arguments: dict) -> None:
        arguments[name][index] = value

    return change


def _replace(name: str, make: Callable[[np.ndarray], object]) -> Callable[[dict], None]:
    def change(arguments: dict) -> None:
        arguments[name] = make(arguments[name])

    return change


def _istate(name: str, value: int) -> Callable[[dict], None]:
    return _set("istate", _loops.ISTATE.index(name), value)


def _param(name: str, value: float) -> Callable[[dict], None]:
    return _set("params", _loops.PARAMS.index(name), value)


RAW_CASES = {
    "int64 signs": (_replace("signs", lambda a: a.astype(np.int64)), r"signs: expected a 1-d C-contiguous float64"),
    "float64 indptr": (_replace("indptr", lambda a: a.astype(np.float64)), r"indptr: expected .* int64 array"),
    "int16 indices": (_replace("indices", lambda a: a.astype(np.int16)), r"indices: expected .* int64 or int32 array"),
    "uint32 indices": (
        _replace("indices", lambda a: a.astype(np.uint32)),
        r"indices: expected .* int64 or int32 array",
    ),
    "big-endian data": (_replace("data", lambda a: a.astype(">f8")), r"data: expected .* format '>d'"),
    "uint8 presence": (_replace("present_v", lambda a: a.astype(np.uint8)), r"present_v: expected .* bool array"),
    "a list of signs": (_replace("signs", lambda a: a.tolist()), r"signs: expected a 1-d C-contiguous float64 array"),
    "strided data": (_replace("data", lambda a: np.repeat(a, 2)[::2]), r"data: .*\(ndarray is not C-contiguous\)"),
    "2-d weights": (_replace("v", lambda a: a.reshape(1, -1)), r"v: expected a writable 1-d .* got 2-d"),
    "read-only decisions": (_replace("decisions", _read_only), r"decisions: expected a writable 1-d"),
    "indptr past indices": (_set("indptr", -1, 99), r"row 2: indptr\[3\] = 99 is past the end of indices"),
    "decreasing indptr": (_set("indptr", 2, 1), r"row 1: indptr\[2\] = 1 decreases from indptr\[1\] = 2"),
    "negative first bound": (_set("indptr", 0, -1), r"indptr\[0\] = -1 is outside 0\.\.5"),
    "negative column": (_set("indices", 0, -1), r"row 0: column -1 is out of range: expected 0 <= column < 3"),
    "column past v": (_set("indices", 4, 3), r"row 2: column 3 is out of range"),
    "repeated column": (_set("indices", 1, 0), r"row 0: column 0 appears more than once"),
    "data shorter than indices": (_replace("data", lambda a: a[:-1]), r"data: 4 items, expected 5"),
    "more signs than rows": (_replace("signs", lambda a: np.append(a, 1.0)), r"indptr: 4 items, expected 5"),
    "fewer weights than rows": (_replace("weights", lambda a: a[:-1]), r"weights: 2 items, expected 3"),
    "fewer probas than rows": (
        _replace("probas", lambda a: a[:-1]),
        r"probas: 2 items, expected 3 \(one per row of signs, or none\)",
    ),
    "short prior": (_replace("prior", lambda a: a[:-1]), r"prior: 2 items, expected 3 \(one per column, as v\)"),
    "short new_offset": (_replace("new_offset", lambda a: a[:-1]), r"new_offset: 2 items, expected 3"),
    "presence without a list of new columns": (
        _replace("new_v", lambda a: a[:0]),
        r"present_v and new_v, present_offset and new_offset: expected both empty .* or both one per column",
    ),
    "no average offset while averaging": (_replace("offset", lambda a: a[:0]), r"offset: 0 items, expected 3"),
    "short params": (_replace("params", lambda a: a[:-1]), r"params: 20 items, expected 21 \(the names of PARAMS\)"),
    "long state": (_replace("state", lambda a: np.append(a, 0.0)), r"state: 11 items, expected 10"),
    "fractional horizon": (_param("horizon", 2.5), r"params: horizon, t0 and average_from must be whole numbers"),
    "negative t0": (_param("t0", -1.0), r"params: horizon, t0 and average_from must be whole numbers"),
    "negative step count": (_istate("t", -1), r"istate: t = -1 is outside"),
    "no room for new columns": (_istate("n_new_v", 1), r"istate: n_new_v = 1 leaves no room for the 3 absent columns"),
    "start past the rows": (_replace("start", lambda _: 4), r"start = 4 is outside 0\.\.3"),
}


@pytest.mark.parametrize("distinct", [False, True])
def test_int32_indices_learn_what_int64_ones_do_and_are_checked_alike(distinct):
    """Index arrays of int32 (scipy's CSR indices as they are) are read as they are: the same model and decisions
    as int64 ones, and the same refusals, out-of-range and negative columns included."""

    def pegasos(arguments: dict) -> object:
        return _loops.learn_rows(*(arguments[name] for name in ARRAYS), 0, distinct)

    def logistic(arguments: dict) -> object:
        return _loops.learn_logistic_rows(*(arguments[name] for name in LOGISTIC_ARRAYS), 0.5, 1e-6, False, 0, distinct)

    for call, make in ((pegasos, _raw_arguments), (logistic, _logistic_arguments)):
        wide, narrow = make(), make()
        narrow["indices"] = narrow["indices"].astype(np.int32)
        assert call(narrow) == call(wide)
        assert not np.array_equal(wide["v" if call is pegasos else "w"], make()["v" if call is pegasos else "w"])
        for name, array in wide.items():
            if isinstance(array, np.ndarray) and name != "indices":
                assert np.array_equal(narrow[name], array, equal_nan=True), name
    for index, value, message in ((4, 3, r"row 2: column 3 is out of range"), (0, -1, r"row 0: column -1 is out")):
        arguments = _raw_arguments()
        arguments["indices"] = arguments["indices"].astype(np.int32)
        arguments["indices"][index] = value
        with pytest.raises(ValueError, match=r"^learn_rows: " + message):
            _loops.learn_rows(*(arguments[name] for name in ARRAYS), 0, distinct)
    long_rows = np.array([0, 1, 10], dtype=np.int64)  # a second row long enough for the checks' four-lane passes
    for dtype in (np.int32, np.int64):
        for columns, message in (
            ([0, 0, 1, 2, 3, 4, 5, 6, 7, 7], r"^row 1: column 7 appears more than once"),
            ([0, 3, 4, 1, 2, 6, 5, 9, 8, 7], None),  # not sorted, no repeat
            ([0, 0, 1, 2, 3, 4, 5, 6, 7, 10], r"^row 1: column 10 is out of range: expected 0 <= column < 10"),
            ([0, -1, 1, 2, 3, 4, 5, 6, 7, 8], r"^row 1: column -1 is out of range"),
        ):
            indices = np.array(columns, dtype=dtype)
            if message is None:
                _loops.check_rows(long_rows, indices, 10)
            else:
                with pytest.raises(ValueError, match=message):
                    _loops.check_rows(long_rows, indices, 10)
    for extreme in (np.iinfo(np.int64).min, np.iinfo(np.int64).max):  # after a column: no overflow in the check
        with pytest.raises(ValueError, match=rf"^row 0: column {extreme} is out of range"):
            _loops.check_rows(np.array([0, 3]), np.array([0, 5, extreme], dtype=np.int64), 10)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 1 << 12), st.lists(st.sets(st.integers(0, (1 << 13) - 1), max_size=9), min_size=1, max_size=5))
def test_distinct_int64_columns_are_refused_exactly_when_one_is_out_of_range(n_columns, rows):
    """Distinct rows of wide (int64) columns, the weights' own: a bound check that first takes the bitwise or of
    every column, and looks at each one only when that is not below the bound, refuses the rows, learning
    nothing, exactly when a column is outside 0..n_columns - 1."""
    indptr = np.cumsum([0] + [len(row) for row in rows], dtype=np.int64)
    indices = np.array([column for row in rows for column in sorted(row, reverse=True)], dtype=np.int64)
    w, g2 = np.zeros(n_columns), np.full(n_columns, 1e-6)
    arguments = (indptr, indices, np.ones(len(indices)), np.ones(len(rows)), np.ones(len(rows)), None, w, g2)
    outputs = (np.empty(0, dtype=bool), np.empty(0, dtype=np.int64), np.zeros(len(rows)), 0.5, 1e-6, False, 0, True)
    if all(column < n_columns for row in rows for column in row):
        assert _loops.learn_logistic_rows(*arguments, *outputs) == (len(rows), 0)
    else:
        with pytest.raises(ValueError, match=r"^learn_logistic_rows: row \d+: column \d+ is out of range"):
            _loops.learn_logistic_rows(*arguments, *outputs)
        assert not w.any() and (g2 == 1e-6).all()


def test_distinct_rows_skip_the_repeat_search_but_not_the_bounds():
    """``distinct`` (rows this package built) spares the search for a column repeated within a row, never the
    checks that keep every read and write inside the arrays."""
    arguments = _raw_arguments()
    arguments["indices"][1] = 0  # row 0 then holds column 0 twice
    assert _loops.learn_rows(*(arguments[name] for name in ARRAYS), 0, True) == 3
    for index, value, message in ((4, 3, r"row 2: column 3 is out of range"), (0, -1, r"row 0: column -1 is out")):
        arguments = _raw_arguments()
        arguments["indices"][index] = value
        before = {name: np.array(arguments[name], copy=True) for name in ARRAYS}
        with pytest.raises(ValueError, match=r"^learn_rows: " + message):
            _loops.learn_rows(*(arguments[name] for name in ARRAYS), 0, True)
        assert all(np.array_equal(arguments[name], before[name]) for name in ARRAYS)
    logistic = _logistic_arguments()
    logistic["indices"][4] = 3
    with pytest.raises(ValueError, match=r"^learn_logistic_rows: row 2: column 3 is out of range"):
        _loops.learn_logistic_rows(
            *(logistic[name] for name in LOGISTIC_ARRAYS), 0.5, 1e-6, False, 0, True
        )  # fmt: skip


def test_the_raw_arguments_are_learned():
    arguments = _raw_arguments()
    assert _call(arguments) == 3
    assert arguments["istate"][_loops.ISTATE.index("t")] == 4


def _refused_writing_nothing(
    call: Callable[[dict], object],
    arguments: dict,
    names: tuple[str, ...],
    change: Callable[[dict], None],
    message: str,
) -> None:
    """``call`` on the changed ``arguments`` raises a ValueError matching ``message``; no array of ``names`` changed."""
    change(arguments)
    before = {name: np.array(arguments[name], copy=True) for name in names}
    with pytest.raises(ValueError, match=message):
        call(arguments)
    for name in names:
        assert np.array_equal(np.asarray(arguments[name]), before[name]), name


@pytest.mark.parametrize("case", RAW_CASES, ids=list(RAW_CASES))
def test_the_raw_entry_refuses_malformed_arrays_and_writes_nothing(case):
    change, message = RAW_CASES[case]
    _refused_writing_nothing(_call, _raw_arguments(), ARRAYS, change, r"^learn_rows: " + message)


# -- learn_logistic_rows: AdaGradLogistic's loop --------------------------------------------------

LOGISTIC_ARRAYS = ("indptr", "indices", "data", "signs", "weights", "columns", "w", "g2", "present", "new", "decisions")


def _logistic_arguments() -> dict:
    """Valid arguments of ``_loops.learn_logistic_rows``: three rows over three local columns mapped to weight
    columns 4, 0 and 2 of five, the first two present."""
    return {
        "indptr": np.array([0, 2, 3, 5], dtype=np.int64),
        "indices": np.array([0, 1, 2, 0, 2], dtype=np.int64),
        "data": np.array([1.0, -0.5, 2.0, 0.25, 1.0]),
        "signs": np.array([1.0, -1.0, 1.0]),
        "weights": np.ones(3),
        "columns": np.array([4, 0, 2], dtype=np.int64),
        "w": np.array([0.1, 0.0, 0.0, 0.0, -0.2]),
        "g2": np.array([0.5, 1e-6, 1e-6, 1e-6, 0.25]),
        "present": np.array([True, False, False, False, True]),
        "new": np.zeros(3, dtype=np.int64),
        "decisions": np.zeros(3),
        "learning_rate": 0.5,
        "initial_accumulator": 1e-6,
        "start": 0,
    }


def _logistic_call(arguments: dict) -> tuple[int, int]:
    return _loops.learn_logistic_rows(
        *(arguments[name] for name in LOGISTIC_ARRAYS),
        arguments["learning_rate"], arguments["initial_accumulator"], False, arguments["start"],
    )  # fmt: skip


def test_the_logistic_loop_learns_the_raw_arguments_as_learn_one():
    arguments = _logistic_arguments()
    assert _logistic_call(arguments) == (3, 1)  # column 2 first written
    assert arguments["new"][0] == 2 and arguments["present"].tolist() == [True, False, True, False, True]
    model = AdaGradLogistic(learning_rate=0.5, n_features=5)
    model._w, model._g2 = _logistic_arguments()["w"], _logistic_arguments()["g2"]
    model._g2[2] = 1e-6
    expected = []
    for x, y in (({4: 1.0, 0: -0.5}, True), ({2: 2.0}, False), ({4: 0.25, 2: 1.0}, True)):
        expected.append(model.decision_function_one(x))
        model.learn_one(x, y)
    assert arguments["decisions"].tolist() == expected
    assert arguments["w"].tolist() == model._w.tolist() and arguments["g2"].tolist() == model._g2.tolist()


def test_the_logistic_loop_without_a_column_map_reads_the_rows_columns_as_the_weights():
    mapped, direct = _logistic_arguments(), _logistic_arguments()
    direct["indices"] = mapped["columns"][mapped["indices"]]  # the weight columns themselves
    direct["columns"], direct["new"] = None, np.zeros(5, dtype=np.int64)  # room for a new column per weight
    stop, n_new = _logistic_call(mapped)
    assert _logistic_call(direct) == (stop, n_new) and np.array_equal(mapped["new"][:n_new], direct["new"][:n_new])
    for name in ("w", "g2", "present", "decisions"):
        assert np.array_equal(mapped[name], direct[name]), name
    direct = _logistic_arguments()
    direct["columns"], direct["new"], direct["indices"][0] = None, np.zeros(5, dtype=np.int64), 5
    with pytest.raises(
        ValueError, match=r"^learn_logistic_rows: row 0: column 5 is out of range: expected 0 <= column < 5"
    ):
        _logistic_call(direct)


LOGISTIC_CASES = {
    "int32 columns": (_replace("columns", lambda a: a.astype(np.int32)), r"columns: expected .* int64 array"),
    "read-only g2": (_replace("g2", _read_only), r"g2: expected a writable 1-d"),
    "uint8 presence": (_replace("present", lambda a: a.astype(np.uint8)), r"present: expected .* bool array"),
    "short g2": (_replace("g2", lambda a: a[:-1]), r"g2: 4 items, expected 5"),
    "short new": (_replace("new", lambda a: a[:-1]), r"new: 2 items, expected 3"),
    "fewer weights than rows": (_replace("weights", lambda a: a[:-1]), r"weights: 2 items, expected 3"),
    "column past the weights": (_set("columns", 1, 5), r"columns\[1\] = 5 is outside 0\.\.4 \(the weights\)"),
    "negative column": (_set("columns", 0, -1), r"columns\[0\] = -1 is outside"),
    "local column past columns": (_set("indices", 4, 3), r"row 2: column 3 is out of range"),
    "repeated column": (_set("indices", 1, 0), r"row 0: column 0 appears more than once"),
    "decreasing indptr": (_set("indptr", 2, 1), r"row 1: indptr\[2\] = 1 decreases"),
    "no learning rate": (_replace("learning_rate", lambda _: 0.0), r"learning_rate = 0\.0, .*: expected finite"),
    "infinite accumulator": (
        _replace("initial_accumulator", lambda _: math.inf),
        r"learning_rate = 0\.5, initial_accumulator = inf",
    ),
    "start past the rows": (_replace("start", lambda _: 4), r"start = 4 is outside 0\.\.3"),
}


@pytest.mark.parametrize("case", LOGISTIC_CASES, ids=list(LOGISTIC_CASES))
def test_the_logistic_loop_refuses_malformed_arrays_and_writes_nothing(case):
    change, message = LOGISTIC_CASES[case]
    _refused_writing_nothing(
        _logistic_call, _logistic_arguments(), LOGISTIC_ARRAYS, change, r"^learn_logistic_rows: " + message
    )


# -- learn_pegasos_logistic_rows: PegasosLogistic's loop --------------------------------------------

PEGASOS_LOGISTIC_ARRAYS = (
    "indptr", "indices", "data", "signs", "weights", "columns", "v", "present", "new", "decisions",
)  # fmt: skip


def _pegasos_logistic_arguments() -> dict:
    """Valid arguments of ``_loops.learn_pegasos_logistic_rows``: three rows over three local columns mapped to weight
    columns 4, 0 and 2 of five, the first two present, w = 0.5·v after 7 steps."""
    v = np.array([0.2, 0.0, 0.0, 0.0, -0.4])
    return {
        "indptr": np.array([0, 2, 3, 5], dtype=np.int64),
        "indices": np.array([0, 1, 2, 0, 2], dtype=np.int64),
        "data": np.array([1.0, -0.5, 2.0, 0.25, 1.0]),
        "signs": np.array([1.0, -1.0, 1.0]),
        "weights": np.array([1.0, 2.0, 0.5]),
        "columns": np.array([4, 0, 2], dtype=np.int64),
        "v": v,
        "present": np.array([True, False, False, False, True]),
        "new": np.zeros(3, dtype=np.int64),
        "decisions": np.zeros(3),
        "scale": 0.5,
        "sq_norm": math.fsum((v * v).tolist()),
        "t": 7,
        "lambda_": 0.1,
        "t0": 3,
        "min_scale": weights.MIN_SCALE,
        "max_norm": MAX_NORM,
        "start": 0,
    }


def _pegasos_logistic_call(arguments: dict, distinct: bool = False) -> tuple[int, int, float, float]:
    return _loops.learn_pegasos_logistic_rows(
        *(arguments[name] for name in PEGASOS_LOGISTIC_ARRAYS),
        *(arguments[name] for name in ("scale", "sq_norm", "t", "lambda_", "t0", "min_scale", "max_norm")),
        weights.COMPENSATED_SUM, arguments["start"], distinct,
    )  # fmt: skip


def test_the_pegasos_logistic_loop_learns_the_raw_arguments_as_learn_one():
    arguments = _pegasos_logistic_arguments()
    stop, n_new, scale, sq_norm = _pegasos_logistic_call(arguments)
    assert (stop, n_new) == (3, 1) and arguments["new"][0] == 2  # column 2 first written
    assert arguments["present"].tolist() == [True, False, True, False, True]
    model = PegasosLogistic(lambda_=0.1, t0=3, n_features=5)
    start = _pegasos_logistic_arguments()
    model._u.v, model._u.scale, model._u.sq_norm, model._t = start["v"], start["scale"], start["sq_norm"], start["t"]
    expected = []
    for x, y, w in (({4: 1.0, 0: -0.5}, True, 1.0), ({2: 2.0}, False, 2.0), ({4: 0.25, 2: 1.0}, True, 0.5)):
        expected.append(model.decision_function_one(x))
        model.learn_one(x, y, w)
    assert arguments["decisions"].tolist() == expected and arguments["v"].tolist() == model._u.v.tolist()
    assert (scale, sq_norm, 7 + stop) == (model._u.scale, model._u.sq_norm, model.t)


def test_the_pegasos_logistic_loop_reads_int32_indices_and_the_rows_columns_as_the_weights():
    mapped, narrow, direct = (_pegasos_logistic_arguments() for _ in range(3))
    narrow["indices"] = narrow["indices"].astype(np.int32)
    direct["indices"] = mapped["columns"][mapped["indices"]]  # the weight columns themselves
    direct["columns"], direct["new"] = None, np.zeros(5, dtype=np.int64)  # room for a new column per weight
    result = _pegasos_logistic_call(mapped)
    assert _pegasos_logistic_call(narrow) == _pegasos_logistic_call(direct) == result
    for name in ("v", "present", "decisions"):
        assert np.array_equal(narrow[name], mapped[name]) and np.array_equal(direct[name], mapped[name]), name
    assert np.array_equal(direct["new"][: result[1]], mapped["new"][: result[1]])
    direct = _pegasos_logistic_arguments()
    direct["columns"], direct["new"], direct["indices"][0] = None, np.zeros(5, dtype=np.int64), 5
    with pytest.raises(ValueError, match=r"^learn_pegasos_logistic_rows: row 0: column 5 is out of range"):
        _pegasos_logistic_call(direct, distinct=True)  # (distinct rows are spared the repeat search, not the bounds)


def test_the_pegasos_logistic_loop_stops_before_the_rows_learn_one_takes():
    """The first step of t0 = 0, a fold of the scale, a margin that is not finite, a step past the norm bound."""
    changes = [
        (lambda a: a.update(t=0, t0=0), 0),
        (lambda a: a.update(scale=weights.MIN_SCALE * 1.25), 2),  # shrinks by 10/11, 11/12, 12/13: below at row 2
        (lambda a: a["data"].__setitem__(2, math.nan), 1),
        (lambda a: a["data"].__setitem__(3, 1e200), 2),
    ]
    _assert_stops(_pegasos_logistic_arguments, _pegasos_logistic_call, changes)


def _assert_stops(arguments_of: Callable[[], dict], call: Callable[[dict], tuple], changes: list) -> None:
    """For each (change, stop): the loop called on fresh arguments so changed stops before row ``stop``, with no
    decision written from it on."""
    for change, stop in changes:
        arguments = arguments_of()
        change(arguments)
        assert call(arguments)[0] == stop
        assert not arguments["decisions"][stop:].any()


PEGASOS_LOGISTIC_CASES = {
    "int32 columns": (_replace("columns", lambda a: a.astype(np.int32)), r"columns: expected .* int64 array"),
    "read-only v": (_replace("v", _read_only), r"v: expected a writable 1-d"),
    "uint8 presence": (_replace("present", lambda a: a.astype(np.uint8)), r"present: expected .* bool array"),
    "short present": (_replace("present", lambda a: a[:-1]), r"present: 4 items, expected 5"),
    "short new": (_replace("new", lambda a: a[:-1]), r"new: 2 items, expected 3"),
    "fewer weights than rows": (_replace("weights", lambda a: a[:-1]), r"weights: 2 items, expected 3"),
    "column past the weights": (_set("columns", 1, 5), r"columns\[1\] = 5 is outside 0\.\.4 \(the weights\)"),
    "negative column": (_set("columns", 0, -1), r"columns\[0\] = -1 is outside"),
    "local column past columns": (_set("indices", 4, 3), r"row 2: column 3 is out of range"),
    "repeated column": (_set("indices", 1, 0), r"row 0: column 0 appears more than once"),
    "decreasing indptr": (_set("indptr", 2, 1), r"row 1: indptr\[2\] = 1 decreases"),
    "no lambda": (_replace("lambda_", lambda _: 0.0), r"lambda = 0\.0, min_scale = .*: expected finite numbers"),
    "infinite norm bound": (_replace("max_norm", lambda _: math.inf), r"lambda = 0\.1, .*, max_norm = inf: expected"),
    "no scale": (_replace("scale", lambda _: 0.0), r"scale = 0\.0, sq_norm = .*: expected a finite scale > 0"),
    "NaN norm": (_replace("sq_norm", lambda _: math.nan), r"scale = 0\.5, sq_norm = nan: expected a finite scale"),
    "negative step count": (_replace("t", lambda _: -1), r"t = -1, t0 = 3: expected whole numbers from 0 to 2\*\*53"),
    "t0 past 2**53": (_replace("t0", lambda _: 2**53 + 1), r"t = 7, t0 = 9007199254740993: expected whole numbers"),
    "start past the rows": (_replace("start", lambda _: 4), r"start = 4 is outside 0\.\.3"),
}


@pytest.mark.parametrize("case", PEGASOS_LOGISTIC_CASES, ids=list(PEGASOS_LOGISTIC_CASES))
def test_the_pegasos_logistic_loop_refuses_malformed_arguments_and_writes_nothing(case):
    change, message = PEGASOS_LOGISTIC_CASES[case]
    _refused_writing_nothing(
        _pegasos_logistic_call,
        _pegasos_logistic_arguments(),
        PEGASOS_LOGISTIC_ARRAYS,
        change,
        r"^learn_pegasos_logistic_rows: " + message,
    )


# -- learn_hinge_rows: NormalizedHinge's loop -------------------------------------------------------

HINGE_ARRAYS = (
    "indptr", "indices", "data", "signs", "weights", "columns", "w", "g2", "scales", "present", "new", "decisions",
)  # fmt: skip


def _hinge_arguments() -> dict:
    """Valid arguments of ``_loops.learn_hinge_rows``: three rows over three local columns mapped to weight columns
    4, 0 and 2 of five, the first two stepped on before."""
    return {
        "indptr": np.array([0, 2, 3, 5], dtype=np.int64),
        "indices": np.array([0, 1, 2, 0, 2], dtype=np.int64),
        "data": np.array([1.0, -0.5, 2.0, 0.25, 1.0]),
        "signs": np.array([1.0, -1.0, 1.0]),
        "weights": np.array([1.0, 2.0, 0.5]),
        "columns": np.array([4, 0, 2], dtype=np.int64),
        "w": np.array([0.2, 0.0, 0.0, 0.0, -0.4]),
        "g2": np.array([0.25, 0.0, 0.0, 0.0, 1.0]),
        "scales": np.array([0.5, 0.0, 0.0, 0.0, 1.0]),
        "present": np.array([True, False, False, False, True]),
        "new": np.zeros(3, dtype=np.int64),
        "decisions": np.zeros(3),
        "learning_rate": 0.5,
        "start": 0,
    }


def _hinge_call(arguments: dict, distinct: bool = False) -> tuple[int, int]:
    return _loops.learn_hinge_rows(
        *(arguments[name] for name in HINGE_ARRAYS), arguments["learning_rate"], weights.COMPENSATED_SUM,
        arguments["start"], distinct,
    )  # fmt: skip


def _hinge_model(arguments: dict) -> NormalizedHinge:
    """The dense NormalizedHinge whose arrays are those of ``arguments``."""
    model = NormalizedHinge(arguments["learning_rate"], n_features=5)
    model._w, model._g2, model._scales = (arguments[name].copy() for name in ("w", "g2", "scales"))
    return model


def test_the_hinge_loop_learns_the_raw_arguments_as_learn_one():
    arguments = _hinge_arguments()
    model = _hinge_model(arguments)
    assert _hinge_call(arguments) == (3, 1) and arguments["new"][0] == 2  # column 2 first stepped on
    assert arguments["present"].tolist() == [True, False, True, False, True]
    expected = []
    for x, y, w in (({4: 1.0, 0: -0.5}, True, 1.0), ({2: 2.0}, False, 2.0), ({4: 0.25, 2: 1.0}, True, 0.5)):
        expected.append(model.decision_function_one(x))
        model.learn_one(x, y, w)
    assert arguments["decisions"].tolist() == expected
    for name in ("w", "g2", "scales"):
        assert arguments[name].tolist() == getattr(model, "_" + name).tolist(), name


def test_the_hinge_loop_reads_int32_indices_and_the_rows_columns_as_the_weights():
    mapped, narrow, direct = (_hinge_arguments() for _ in range(3))
    narrow["indices"] = narrow["indices"].astype(np.int32)
    direct["indices"] = mapped["columns"][mapped["indices"]]  # the weight columns themselves
    direct["columns"], direct["new"] = None, np.zeros(5, dtype=np.int64)
    result = _hinge_call(mapped)
    assert _hinge_call(narrow) == _hinge_call(direct) == result
    for name in ("w", "g2", "scales", "present", "decisions"):
        assert np.array_equal(narrow[name], mapped[name]) and np.array_equal(direct[name], mapped[name]), name


def test_the_hinge_loop_stops_before_the_rows_learn_one_refuses():
    """A margin that is not finite, a square that overflows."""
    changes = [
        (lambda a: a["data"].__setitem__(2, math.nan), 1),
        (lambda a: a["data"].__setitem__(3, 1e200), 2),
    ]
    _assert_stops(_hinge_arguments, _hinge_call, changes)


HINGE_CASES = {
    "read-only w": (_replace("w", _read_only), r"w: expected a writable 1-d"),
    "short scales": (_replace("scales", lambda a: a[:-1]), r"scales: 4 items, expected 5"),
    "short new": (_replace("new", lambda a: a[:-1]), r"new: 2 items, expected 3"),
    "column past the weights": (_set("columns", 1, 5), r"columns\[1\] = 5 is outside 0\.\.4 \(the weights\)"),
    "repeated column": (_set("indices", 1, 0), r"row 0: column 0 appears more than once"),
    "no learning rate": (_replace("learning_rate", lambda _: 0.0), r"learning_rate = 0\.0: expected a finite number"),
    "start past the rows": (_replace("start", lambda _: 4), r"start = 4 is outside 0\.\.3"),
}


@pytest.mark.parametrize("case", HINGE_CASES, ids=list(HINGE_CASES))
def test_the_hinge_loop_refuses_malformed_arguments_and_writes_nothing(case):
    change, message = HINGE_CASES[case]
    _refused_writing_nothing(_hinge_call, _hinge_arguments(), HINGE_ARRAYS, change, r"^learn_hinge_rows: " + message)


def test_the_one_example_passes_over_weight_arrays_refuse_malformed_arrays_and_write_nothing():
    w, g2 = np.array([0.5, -1.0, 2.0]), np.full(3, 1e-6)
    columns, values = np.array([2, 0], dtype=np.int64), np.array([1.0, 3.0])
    assert _loops.dense_dot(w, columns, values, False) == 2.0 * 1.0 + 0.5 * 3.0
    bad = {
        "columns\\[1\\] = 3 is outside 0\\.\\.2": (np.array([2, 3], dtype=np.int64), values),
        "columns\\[0\\] = -1 is outside": (np.array([-1, 0], dtype=np.int64), values),
        "values: 1 items, expected 2": (columns, values[:1]),
        "columns: expected .* int64 array": (columns.astype(np.int32), values),
    }
    for message, (cols, vals) in bad.items():
        with pytest.raises(ValueError, match="^dense_dot: " + message):
            _loops.dense_dot(w, cols, vals, False)
        before = (w.copy(), g2.copy())
        with pytest.raises(ValueError, match="^logistic_step: " + message):
            _loops.logistic_step(w, cols, vals, g2, -0.5, 0.7)
        assert np.array_equal(w, before[0]) and np.array_equal(g2, before[1])
    with pytest.raises(ValueError, match=r"^logistic_step: g2: 2 items, expected 3"):
        _loops.logistic_step(w, columns, values, g2[:2], -0.5, 0.7)
    with pytest.raises(ValueError, match=r"^logistic_step: w: expected a writable"):
        _loops.logistic_step(_read_only(w), columns, values, g2, -0.5, 0.7)


def test_the_calibration_pass_refuses_arrays_of_the_wrong_length():
    margins, signs, probas = np.array([0.5, -1.0]), np.array([1.0, -1.0]), np.zeros(2)
    state, istate, params = (
        np.zeros(len(_loops.STATE)),
        np.zeros(len(_loops.ISTATE), np.int64),
        np.zeros(len(_loops.PARAMS)),
    )
    for name, arrays in {
        "signs": (margins, signs[:1], probas, state, istate, params),
        "probas": (margins, signs, np.zeros(3), state, istate, params),
        "state": (margins, signs, probas, state[:-1], istate, params),
        "params": (margins, signs, probas, state, istate, np.zeros(len(_loops.PARAMS) + 1)),
    }.items():
        with pytest.raises(ValueError, match=f"^platt_rows: {name}: "):
            _loops.platt_rows(*arrays)
    assert not probas.any() and not state.any()


def test_the_mixing_loop_refuses_arrays_of_the_wrong_length_and_bad_settings():
    log_p, log_q = np.log(np.full(6, 0.25)), np.log(np.full(6, 0.75))  # 2 members, 3 examples
    decisions, log_weights, signs, weights, losses = (
        np.zeros(3),
        np.log([0.5, 0.5]),
        np.ones(3),
        np.ones(3),
        np.zeros(2),
    )
    good = (log_p, log_q, decisions, log_weights, signs, weights, losses, 0, 3.0, True)
    for name, index, array in [
        ("log_p", 0, log_p[:5]),
        ("log_q", 1, np.zeros(7)),
        ("decisions", 2, np.zeros(2)),
        ("log_weights", 3, np.zeros(0)),
        ("signs", 4, signs[:2]),
        ("weights", 5, np.ones(4)),
        ("losses", 6, np.zeros(3)),
    ]:
        with pytest.raises(ValueError, match=f"^mix_rows: {name}: "):
            _loops.mix_rows(*good[:index], array, *good[index + 1 :])
    for learned, share in ((-1, 3.0), (0, -1.0), (0, math.nan), (0, math.inf)):
        with pytest.raises(ValueError, match=r"^mix_rows: share = "):
            _loops.mix_rows(*good[:7], learned, share, True)
    with pytest.raises(ValueError, match=r"^mix_rows: decisions: expected a writable"):
        _loops.mix_rows(log_p, log_q, _read_only(decisions), *good[3:])
    assert not decisions.any() and not losses.any() and np.array_equal(log_weights, np.log([0.5, 0.5]))


# -- names of the arrays -----------------------------------------------------------------------


def test_the_compiled_names_cover_exactly_what_python_sends():
    model = PegasosClassifier(lambda_=1e-4, class_weight={True: 2.0}, prior={"a": 1.0})
    state = model._loop_state()
    for names, python in [
        (_loops.PARAMS, model._loop_settings()),
        (_loops.STATE, [name for name, value in state.items() if isinstance(value, float)]),
        (_loops.ISTATE, [*(name for name, value in state.items() if isinstance(value, int)), *compiled.LOOP_COUNTS]),
    ]:
        assert len(set(names)) == len(names)
        assert set(names) == set(python)


# -- Python code run from inside a compiled pass --------------------------------------------------


class CollidingKey:
    """A key that hashes as the str ``twin`` and, compared with anything, runs ``effect`` and says unequal."""

    def __init__(self, twin: str, effect: Callable[[], None]):
        self.twin, self.effect = twin, effect

    def __hash__(self) -> int:
        return hash(self.twin)

    def __eq__(self, other: object) -> bool:
        self.effect()
        return False

    def __repr__(self) -> str:
        return f"CollidingKey({self.twin!r})"


def _outcome(call: Callable[[], object]) -> tuple:
    try:
        result = call()
    except Exception as error:
        return type(error), str(error)
    return ("result", result.hex() if isinstance(result, float) else type(result).__name__)


def _contents(d: dict) -> list:
    return [(repr(key), repr(value)) for key, value in d.items()]


def _python_dot(v: dict, x: dict) -> float:
    return sum(map(mul, map(v.get, x, repeat(0.0)), x.values()))


def _python_axpy(v: dict, x: dict, c: float) -> float:
    old = list(map(v.get, x, repeat(0.0)))
    new = list(map(add, old, map(mul, repeat(c), x.values())))
    v.update(zip(x, new))
    return sum(map(mul, new, new)) - sum(map(mul, old, old))


def _replacing_in_x(key_in_v: bool) -> tuple[dict, dict]:
    """(v, x): a colliding key (in v, or in x) whose __eq__ gives x's entry of its twin (or its own) a new float
    object, while that entry is looked up in v, and adds keys to v."""
    v: dict = {"b": 2.0}
    x: dict = {}
    calls = []

    def effect() -> None:
        calls.append(None)
        x[replaced] = float(len(calls)) + 0.25  # the float a compiled pass might still hold is dropped
        v.update({f"grown{len(calls)}_{i}": 1.0 for i in range(40)})  # the weight dict grows (and is resized)

    key = CollidingKey("a", effect)
    replaced = "a" if key_in_v else key  # x's own entry: found by identity, without a comparison
    # the first key of v is met first by a lookup of either: key and "a" are both found in v, after a comparison
    v.update({key: 3.0, "a": 5.0} if key_in_v else {"a": 3.0, key: 5.0})
    x.update({replaced: 1.5, "b": -0.5})
    return v, x


def _growing_x() -> tuple[dict, dict]:
    """(v, x): a colliding key in v whose __eq__ adds keys to x while x is iterated."""
    v: dict = {}
    x: dict = {"a": 1.0, "b": 2.0}
    v[CollidingKey("a", lambda: x.update({f"more{len(x)}": 1.0}))] = 1.0
    return v, x


SETUPS = {
    "a colliding key of v replaces x's value": lambda: _replacing_in_x(key_in_v=True),
    "a colliding key of x replaces its own value": lambda: _replacing_in_x(key_in_v=False),
    "a colliding key of v grows x": _growing_x,
}


@pytest.mark.parametrize("setup", SETUPS, ids=list(SETUPS))
def test_a_key_that_runs_python_in_sparse_dot_gives_what_python_gives(setup):
    v, x = SETUPS[setup]()
    expected = _outcome(lambda: _python_dot(v, x)), _contents(v), _contents(x)
    v, x = SETUPS[setup]()
    assert (_outcome(lambda: weights.sparse_dot(v, x)), _contents(v), _contents(x)) == expected


@pytest.mark.parametrize("setup", SETUPS, ids=list(SETUPS))
def test_a_key_that_runs_python_in_axpy_gives_what_python_gives(setup):
    v, x = SETUPS[setup]()
    expected = _outcome(lambda: _python_axpy(v, x, 0.75)), _contents(v), _contents(x)
    v, x = SETUPS[setup]()
    assert (_outcome(lambda: weights._axpy_sq_norm(v, x, 0.75)), _contents(v), _contents(x)) == expected


class GrowingNumber:
    """A number whose conversion to float adds a feature to ``features``."""

    def __init__(self, features: dict):
        self.features = features

    def __float__(self) -> float:
        self.features[f"f{len(self.features)}"] = 1.0
        return 2.0


class GrowingKey:
    """A key whose hash adds a feature to ``features``."""

    def __init__(self, features: dict):
        self.features = features

    def __hash__(self) -> int:
        self.features[f"f{len(self.features)}"] = 1.0
        return 7


@pytest.mark.parametrize("grow", ["value", "key"])
def test_rows_from_dicts_of_objects_that_grow_their_dict_give_what_python_gives(grow):
    x: dict = {"a": 1.0}
    if grow == "value":
        x["b"] = GrowingNumber(x)
    else:
        x[GrowingKey(x)] = 1.0  # hashed once here, growing x to {"a", key, "f2"}

    def python_rows() -> list:
        vocabulary: dict = {}
        return [(vocabulary.setdefault(key, len(vocabulary)), float(value)) for key, value in x.items()]

    expected = _outcome(python_rows)
    assert expected[0] is RuntimeError  # Python's own iteration notices the dict changed size
    assert _outcome(lambda: Rows.from_dicts([x])) == expected


def test_gather_refuses_a_key_list_shortened_by_a_lookup():
    keys: list = ["a", "b", "c"]
    keys.insert(0, CollidingKey("a", lambda: keys.clear() if keys else None))
    values, present = np.empty(4), np.empty(4, dtype=bool)
    with pytest.raises(RuntimeError, match=r"^gather: the list of keys changed size$"):
        _loops.gather({"a": 1.0, "b": 2.0}, keys, values, present)


@pytest.mark.parametrize("sizes", [(-1, 0), (0, -1), (2**25 + 1, 0), (0, 2**25 + 1)])
def test_keep_freed_memory_refuses_sizes_outside_what_malloc_takes(sizes):
    with pytest.raises(ValueError, match=r"^keep_freed_memory: block and slack must be in \[0, 2\*\*25\] bytes$"):
        _blocks.keep_freed_memory(*sizes)


def test_keep_freed_memory_takes_the_sizes_a_run_sets_where_malloc_is_glibcs():
    glibc_malloc = platform.libc_ver()[0] == "glibc" and not os.environ.get("LD_PRELOAD")  # (not a sanitizer's)
    assert _blocks.keep_freed_memory(HEAP_BLOCK, HEAP_SLACK) is glibc_malloc


# -- reading a file in blocks --------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    content=st.lists(st.sampled_from([b"ab", b"c", b"\n", b"\n\n", b"defgh"]), max_size=30).map(b"".join),
    block=st.integers(1, 9),
    carry=st.integers(0, 9),
)
def test_the_compiled_block_reader_reads_what_the_python_one_reads(content, block, carry):
    """Blocks of ``block`` bytes, each starting with the carry of the one before: the compiled reader gives the
    Python one's blocks and carries; a block whole has its size, a carry is the block's end after its last line end,
    at most ``carry`` bytes, and the blocks less their carries are the file."""
    with mock.patch.object(sources, "READ_BUFFER", block), mock.patch.object(sources, "MAX_CARRY", carry):
        file, python_file = io.BytesIO(content), io.BytesIO(content)
        rest, text = b"", b""
        while True:
            piece, next_rest = _blocks.read_block(file, rest, block, carry)
            with mock.patch.object(sources, "_blocks", None):
                assert sources._read_block(python_file, rest) == (piece, next_rest)
            if not piece:
                break
            assert piece.startswith(rest) and (len(piece) == block or file.tell() == len(content))
            assert len(next_rest) <= carry and b"\n" not in next_rest and piece.endswith(next_rest)
            assert not next_rest or piece[: len(piece) - len(next_rest)].endswith(b"\n")
            text += piece[len(rest) :]
            rest = next_rest
        assert text == content and not rest


class _Counting(io.BytesIO):
    """A file whose readinto says it read ``said`` bytes."""

    def __init__(self, content: bytes, said: object) -> None:
        super().__init__(content)
        self.said = said

    def readinto(self, buffer) -> object:  # type: ignore[override]
        super().readinto(buffer)
        return self.said


@pytest.mark.parametrize("said", [-1, 5, None, "3"])
def test_the_compiled_block_reader_refuses_a_file_that_miscounts(said):
    with pytest.raises((ValueError, TypeError)):
        _blocks.read_block(_Counting(b"abcd", said), b"", 4, 2)


def test_the_compiled_block_reader_refuses_a_carry_longer_than_its_block():
    refusal = r"^read_block: expected 0 <= max_carry and a carry of at most size bytes$"
    for carry, max_carry in ((b"abcde", 2), (b"ab", -1)):
        with pytest.raises(ValueError, match=refusal):
            _blocks.read_block(io.BytesIO(b"xyz"), carry, 4, max_carry)
