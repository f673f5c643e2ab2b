"""The compiled loops of the learners (pegasos_stream/learners/_loops.c)."""

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from numpy.typing import NDArray

#: The names of the entries of the settings, float state and int state arrays of ``learn_rows``, in order.
PARAMS: tuple[str, ...]
STATE: tuple[str, ...]
ISTATE: tuple[str, ...]

_Array = NDArray[Any]

def learn_rows(
    indptr: _Array,
    indices: _Array,
    data: _Array,
    signs: _Array,
    weights: _Array,
    v: _Array,
    offset: _Array,
    prior: _Array,
    present_v: _Array,
    present_offset: _Array,
    new_v: _Array,
    new_offset: _Array,
    state: _Array,
    istate: _Array,
    params: _Array,
    decisions: _Array,
    probas: _Array,
    start: int,
    distinct: bool = ...,
    margins: _Array = ...,
    /,
) -> int: ...
def learn_logistic_rows(
    indptr: _Array,
    indices: _Array,
    data: _Array,
    signs: _Array,
    weights: _Array,
    columns: _Array | None,
    w: _Array,
    g2: _Array,
    present: _Array,
    new: _Array,
    decisions: _Array,
    learning_rate: float,
    initial_accumulator: float,
    compensated: bool,
    start: int,
    distinct: bool = ...,
    /,
) -> tuple[int, int]: ...
def learn_pegasos_logistic_rows(
    indptr: _Array,
    indices: _Array,
    data: _Array,
    signs: _Array,
    weights: _Array,
    columns: _Array | None,
    v: _Array,
    present: _Array,
    new: _Array,
    decisions: _Array,
    scale: float,
    sq_norm: float,
    t: int,
    lambda_: float,
    t0: int,
    min_scale: float,
    max_norm: float,
    compensated: bool,
    start: int,
    distinct: bool = ...,
    /,
) -> tuple[int, int, float, float]: ...
def learn_hinge_rows(
    indptr: _Array,
    indices: _Array,
    data: _Array,
    signs: _Array,
    weights: _Array,
    columns: _Array | None,
    w: _Array,
    g2: _Array,
    scales: _Array,
    present: _Array,
    new: _Array,
    decisions: _Array,
    learning_rate: float,
    compensated: bool,
    start: int,
    distinct: bool = ...,
    /,
) -> tuple[int, int]: ...
def platt_rows(
    margins: _Array, signs: _Array, probas: _Array, state: _Array, istate: _Array, params: _Array, /
) -> None: ...
def mix_rows(
    log_p: _Array,
    log_q: _Array,
    decisions: _Array,
    log_weights: _Array,
    signs: _Array,
    weights: _Array,
    losses: _Array,
    learned: int,
    share: float,
    update: bool,
    /,
) -> None: ...
def dense_dot(w: _Array, columns: _Array, values: _Array, compensated: bool, /) -> float: ...
def logistic_step(
    w: _Array, columns: _Array, values: _Array, g2: _Array, coef: float, learning_rate: float, /
) -> None: ...
def dense_axpy(w: _Array, columns: _Array, values: _Array, c: float, compensated: bool, /) -> float: ...
def dense_dict_dot(w: _Array, x: Mapping[Any, Any], compensated: bool, /) -> float | None: ...
def dense_dict_axpy(w: _Array, x: Mapping[Any, Any], c: float, compensated: bool, /) -> float | None: ...
def check_rows(indptr: _Array, indices: _Array, keys: Sequence[Hashable] | int, /) -> None: ...
def rows_from_dicts(
    dicts: list[Any], vocabulary: dict[Any, int], keys: list[Any], /
) -> tuple[bytes, bytes, bytes] | None: ...
def sparse_dot(v: Mapping[Any, Any], x: Mapping[Any, Any], compensated: bool, /) -> float | None: ...
def axpy_sq_norm(v: dict[Any, Any], x: Mapping[Any, Any], c: float, compensated: bool, /) -> float | None: ...
def gather(weights: dict[Any, Any], keys: list[Any], values: _Array, present: _Array, /) -> None: ...
def scatter(weights: dict[Any, Any], keys: list[Any], values: _Array, columns: _Array, /) -> None: ...
