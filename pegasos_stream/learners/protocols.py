"""The learners as types: what a stream needs of a learner, and what the modules below `linear` use of a
`PegasosClassifier`.

`BinaryLearner`, `CompiledLearner` and `MulticlassLearner` are what `run` and `serve` predict and learn with.
`LoopModel` and `PegasosModel` name what `compiled` (the glue to the compiled loop), `members` and `steps` use
of an explicit-λ `PegasosClassifier`, so that they need not import `linear`, which imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np
    from river.base.typing import ClfTarget

    from .batch import LearnBatch
    from .weights import DenseWeightVector, WeightVector

__all__ = ["BinaryLearner", "CompiledLearner", "LoopModel", "ModelT", "MulticlassLearner", "PegasosModel"]


@runtime_checkable
class BinaryLearner(Protocol):
    """A binary learner: a margin and its calibrated probability; it learns positive or negative."""

    @property
    def t(self) -> int: ...

    def decision_function_one(self, x: dict) -> float: ...

    def probability(self, score: float) -> float: ...

    def learn_one(self, x: dict, y: bool) -> None: ...


@runtime_checkable
class CompiledLearner(BinaryLearner, Protocol):
    """A binary learner with a compiled loop over CSR rows (see `PegasosClassifier.learn_rows`)."""

    def learn_rows(self, batch: LearnBatch) -> tuple[int, ValueError | None]: ...


@runtime_checkable
class MulticlassLearner(Protocol):
    """A learner of classes: a probability per class known; it checks the labels it learns."""

    @property
    def t(self) -> int: ...

    def predict_proba_one(self, x: dict) -> dict[Any, float]: ...

    def learn_one(self, x: dict, y: object) -> None: ...


class LoopModel(Protocol):
    """What `compiled` reads and writes of a `PegasosClassifier` with an explicit λ: its settings and state by
    the compiled module's names (``_loop_settings``, ``_loop_state``, ``_set_loop_state``), its weights and
    prior, and its ``learn_one`` for the rows the loop leaves to it."""

    _last_scored: tuple[int, dict, tuple[float, float]] | None

    @property
    def horizon(self) -> int | None: ...

    @property
    def t0(self) -> int | None: ...

    @property
    def n_features(self) -> int | None: ...

    @property
    def max_features(self) -> int | None: ...

    @property
    def _u(self) -> WeightVector | DenseWeightVector: ...

    @property
    def _t(self) -> int: ...

    @property
    def _prior(self) -> dict: ...

    def _prior_array(self) -> np.ndarray: ...

    def _loop_settings(self) -> dict[str, float]: ...

    def _loop_state(self) -> dict[str, float | int]: ...

    def _set_loop_state(self, values: Mapping[str, float | int]) -> None: ...

    def _margins(self, x: Mapping) -> tuple[float, float]: ...

    def probability(self, margin: float) -> float: ...

    def learn_one(self, x: Mapping, y: ClfTarget, w: float = 1.0) -> None: ...

    def learn_rows(self, batch: LearnBatch) -> tuple[int, ValueError | None]: ...


class PegasosModel(LoopModel, Protocol):
    """`LoopModel`, and what `members` (a member of ``lambda_="auto"`` or of a grid) and `steps` (the model a
    `StepRecorder` records) use besides."""

    @property
    def lambda_(self) -> float | str: ...

    @property
    def average(self) -> bool | int | None: ...

    @property
    def t(self) -> int: ...

    @property
    def norm(self) -> float: ...

    def decision_function_one(self, x: Mapping) -> float: ...

    def predict_one(self, x: Mapping) -> bool: ...

    def predict_proba_one(self, x: Mapping) -> dict: ...

    def _remembered_margins(self, x: Mapping) -> tuple[float, float]: ...

    def _largest_step(self) -> float: ...

    def _margins_pair_many(self, values: np.ndarray, columns: list) -> tuple[np.ndarray, np.ndarray]: ...

    def _learn_matrix(self, values: np.ndarray, columns: list, signs: np.ndarray) -> None: ...


#: A `PegasosModel`: the type of the members of `Members` and of the model of a `StepRecorder`.
ModelT = TypeVar("ModelT", bound=PegasosModel)
