"""Predictions: what a learner predicts for an event, and the form in which `run` and `predict` write it.

A prediction is ``{"id", "predicted", "score", "proba"}``: the event's id, the class predicted, named
as the configuration names the labels (``source.labels``: e.g. "spam" or "ham"; without a mapping
true or false, or a multiclass learner's class), the margin (binary) or the predicted class's
probability (multiclass), and the calibrated probability of the positive class (binary) or of the
class predicted (multiclass). The true label of the event, even when it is known, is not part of it.

A binary prediction names the positive class when its probability is above 1/2 (`binary_prediction`), so the
two never disagree. For a learner whose probability is a calibration of its margin (a Platt-scaled SVM), that
is not always the margin's sign, by which the learner's own ``predict_one`` and the run's accuracy decide.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping
from typing import Any, cast

from ..features import DictHasher, EmailFeatures
from ..io.records import Record
from ..learners.attribution import contributions, top_contributions
from ..learners.personal import PersonalPegasos
from ..learners.protocols import BinaryLearner, MulticlassLearner
from ..parse.parsing import BadRecord, Event, EventParser

__all__ = [
    "Predictor",
    "binary_classes",
    "binary_prediction",
    "forwarded_event",
    "prediction_output",
    "record_features",
]


#: How many features an explanation names.
EXPLAINED = 10


def prediction_output(event_id: Hashable, predicted: object, score: float, proba: float) -> dict:
    """The prediction written for one event (see the module's docstring)."""
    return {"id": event_id, "predicted": predicted, "score": score, "proba": proba}


def forwarded_event(
    record: bytes | str,
    fields: Mapping[str, str],
    event_id: Hashable,
    shared_score: float,
    label: bool | None,
    shared_t: int,
) -> dict:
    """The event of a JSON ``record`` as ``run`` forwards it (``output.forward``) to the instances that learn the
    users' offsets: its ``id``, ``user`` (the string of ``fields["user"]``, else null), input (``text``, or the
    features ``x``, as the record has them), ``label`` (true for the positive class, false for the negative one;
    absent without a label), ``shared_score``, the shared learner's f(x) before it learned the event, and
    ``shared_t``, the examples it had learned then."""
    obj = json.loads(record)
    user = obj.get(fields["user"])
    forwarded: dict[str, Any] = {"id": event_id, "user": user if isinstance(user, str) else None}
    text = obj.get(fields["text"])
    if text is not None:
        forwarded["text"] = text
    else:
        forwarded["x"] = obj.get(fields["x"])
    if label is not None:
        forwarded["label"] = label
    forwarded["shared_score"] = shared_score
    forwarded["shared_t"] = shared_t
    return forwarded


def binary_prediction(classes: tuple[object, object], proba: float) -> object:
    """The class of ``classes`` (negative, positive) that a binary prediction of probability ``proba`` names."""
    return classes[proba > 0.5]


def binary_classes(labels: Mapping[str, object] | None) -> tuple[object, object]:
    """(negative, positive): the names of a binary learner's classes, the label values mapped to
    them (``source.labels``), else false and true."""
    if labels and labels.get("positive") is not None:
        return labels["negative"], labels["positive"]
    return False, True


class Predictor:
    """Predicts events with a learner, which it does not change.

    Parameters
    ----------
    model
        A learner of this package, binary or multiclass.
    features
        What turns an event into features (see `Runner`); None: events carry ``x``, used as it is.
    classes
        (negative, positive): the names a binary learner's predictions are given (`binary_classes`).
    multiclass
        Whether ``model`` is predicted as a multiclass learner.

    """

    def __init__(
        self,
        model: BinaryLearner | MulticlassLearner,
        features: EmailFeatures | DictHasher | None,
        classes: tuple[object, object] = (False, True),
        multiclass: bool = False,
    ) -> None:
        self.model = model
        self.features = features
        self.classes = classes
        self.multiclass = multiclass

    def features_of(self, event: Event) -> dict:
        """The features of an event with input; a BadRecord for a text without text features."""
        if event.x is not None:
            return self.features.transform_one(event.x) if isinstance(self.features, DictHasher) else event.x
        if not isinstance(self.features, EmailFeatures):
            raise BadRecord(event.position, "a text event needs features.type: email")
        return self.features.transform_one(event.text)

    def predict(self, x: dict, user: str | None = None) -> tuple[float, float, object, Any]:
        """(score, proba, the class predicted) of ``x`` (for ``user``, with a learner of personal models), and what
        its label is later scored against: the margin (binary), the class predicted (multiclass; None while no
        class is known, when the score and probability are 0)."""
        if self.multiclass:
            probas = cast(MulticlassLearner, self.model).predict_proba_one(x)
            if not probas:
                return 0.0, 0.0, None, None
            label = max(probas, key=probas.__getitem__)
            return probas[label], probas[label], label, label
        model = cast(BinaryLearner, self.model)
        if user is not None and isinstance(model, PersonalPegasos):
            score = model.decision_function_one(x, user)
        else:
            score = model.decision_function_one(x)
        proba = model.probability(score)
        return score, proba, binary_prediction(self.classes, proba), score

    def explain(self, event: Event, x: dict, k: int = EXPLAINED) -> list[tuple[str, float]]:
        """The ``k`` features of ``event`` (its features ``x``) that weigh most in its score, with their parts of it
        (`learners.attribution`), largest first: named as the features name them (``w:free``), else by their key."""
        parts = contributions(self.model, x, event.user)
        names: Mapping[Any, str] = {}
        if isinstance(self.features, EmailFeatures) and event.text is not None:
            names = self.features.feature_names(event.text)
        return [(names.get(key, str(key)), part) for key, part in top_contributions(parts, k)]


def record_features(parser: EventParser, predictor: Predictor, record: Record) -> tuple[Event, dict] | None:
    """The event in ``record`` and its features, or None when it has nothing to predict (a comment, a label-only
    event); a BadRecord when it is no event, or a ValueError for features the predictor cannot take."""
    event = parser.parse(record)
    if event is None or not event.has_input:
        return None
    return event, predictor.features_of(event)
