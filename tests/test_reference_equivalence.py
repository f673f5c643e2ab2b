"""The optimised learners match the dense reference implementations (tests/reference.py) step by step.

At every step of a random sparse stream we compare, BEFORE learning, the decision value (binary) or
the scores of every class (multiclass) and, AFTER learning, t, the weights, the intercept(s) and,
with ``average=True``, the averaged weights and intercept.

Tolerance: ``close(a, b)`` is |a - b| <= 1e-9 * max(1, |a|, |b|), i.e. 1e-9 relative with an absolute
floor of 1e-9. The floor is needed because a value that is mathematically 0 or tiny (a weight that
cancels, ``(1 - 1/te) u`` at a coordinate that was just hit with the opposite sign, a dot product whose
terms cancel) carries the rounding error of the O(1)..O(1/lambda) terms it was computed from, not
of its own size: the lazily scaled package and the dense reference round differently (s*v versus
an explicitly shrunk vector), so such a value can only agree in absolute terms. The generators keep
those terms moderate (|x_j| <= 5, lambda in {1e-4, 0.03, 0.3, 1.7, 7}, costs <= ~50, at most 20
steps, or lambda = 0.1 and |x_j| ~ 10 in the long run), so a difference of a few ulps of them stays
far inside the floor: over the whole file the largest |a - b| seen is ~1% of the tolerance
(9.6e-12 against a mathematically-zero value). The floor is not a slack for a wrong update: every
deliberate one-line bug planted in the reference (eta without the horizon, no reset at te = 1,
balanced counts without the current example, eta instead of eta/k, wrong ball radius, u_0 in the
average, raw class_weight lookup, margin from the average, ball centred on 0, tie to the later
class, per-class projection, ignored sample weight) makes this file fail.

Branch points: ``margin < 1`` (and, for multiclass, the choice of the competitor) is a discontinuous
decision. When the reference margin is within rounding distance of 1 (or two competitor scores are
within rounding distance of each other but not provably equal), the float-level outcome is not
fixed by the algorithm, so the stream is cut there: everything up to that step has been compared.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from pegasos_stream import PegasosClassifier, PegasosMulticlass

try:  # tests/ as a package
    from .reference import DenseMulticlassReference, DenseReference, y_sign
except ImportError:  # tests/ as a plain directory: pytest puts it on sys.path
    from reference import DenseMulticlassReference, DenseReference, y_sign

REL = 1e-9

# A seed-stable profile: derandomize (same examples on every run and machine), no example database,
# no deadline (timings on CI are noisy).
EQ = settings(
    max_examples=40,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def close(a: float, b: float) -> bool:
    """1e-9 relative, with an absolute floor of 1e-9 (see the module docstring for why)."""
    return abs(a - b) <= REL * max(1.0, abs(a), abs(b))


def assert_close(got, want, what):
    assert close(got, want), f"{what}: got {got!r}, reference {want!r} (diff {got - want:.3g})"


def assert_dicts_close(got: dict, want: dict, what):
    """Weight dicts agree at every key of either (a missing key is a zero weight)."""
    for key in set(got) | set(want):
        g, w = got.get(key, 0.0), want.get(key, 0.0)
        assert close(g, w), f"{what}[{key!r}]: got {g!r}, reference {w!r} (diff {g - w:.3g})"


def vocabulary(*key_sources) -> dict:
    """{feature key: column}, in order of first appearance."""
    vocab: dict = {}
    for keys in key_sources:
        for key in keys:
            vocab.setdefault(key, len(vocab))
    return vocab


# -- strategies ----------------------------------------------------------------------------------

# Mixed key types. "1" and 1 are distinct features; bools and floats are avoided as keys because
# True == 1 == 1.0 hash alike in Python (that would be one feature, in both implementations).
KEYS = ["a", "b", "1", "xyz", 1, 2, 42, ("ng", "abc"), ("ng", "ab"), ("w", 3)]
VALUES = st.one_of(
    st.floats(-5.0, 5.0, allow_nan=False, allow_infinity=False),
    st.integers(-3, 3),
)
FEATURES = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=5)  # empty dicts included
POSITIVE = [True, 1, 1.0, np.True_]
NEGATIVE = [False, 0, -1, 0.0, -1.0, np.False_]
LABELS = st.sampled_from(POSITIVE + NEGATIVE)
# Label forms of a learn_many batch (one form per batch, so the Series has one dtype).
BATCH_FORMS = [(True, False), (1, 0), (1, -1), (1.0, -1.0)]
# Values of 1/lambda_ that are not small integers, so that margins rarely land exactly on 1.
LAMBDAS = [0.03, 0.3, 1.7, 7.0]
SAMPLE_WEIGHTS = st.one_of(st.none(), st.just(0.0), st.floats(0.0, 5.0))


@st.composite
def binary_ops(draw, sample_weight=False, batches=False, max_size=20, keys=tuple(KEYS)):
    """A stream of ("one", x, y, w) and (with batches) ("many", rows, ys, columns) operations."""
    columns = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=4, unique=True))
    features = st.dictionaries(st.sampled_from(keys), VALUES, max_size=5)
    ops = []
    for _ in range(draw(st.integers(1, max_size))):
        if batches and draw(st.booleans()):
            k = draw(st.integers(1, 5))
            rows = [{c: float(draw(VALUES)) for c in columns} for _ in range(k)]
            pos, neg = draw(st.sampled_from(BATCH_FORMS))
            ys = [pos if draw(st.booleans()) else neg for _ in range(k)]
            ops.append(("many", rows, ys, columns))
        else:
            w = draw(SAMPLE_WEIGHTS) if sample_weight else None
            ops.append(("one", draw(features), draw(LABELS), w))
    return ops


@st.composite
def class_weights(draw):
    """None, "balanced" or a dict keyed by any accepted label form (each class may be missing)."""
    kind = draw(st.sampled_from(["none", "balanced", "dict"]))
    if kind == "none":
        return None
    if kind == "balanced":
        return "balanced"
    cw = {}
    for forms in (POSITIVE, NEGATIVE):
        if draw(st.booleans()):
            cw[draw(st.sampled_from(forms))] = draw(st.sampled_from([0.0, 0.25, 0.5, 2.0, 3.0]))
    return cw


# -- binary runner -------------------------------------------------------------------------------


def frame(rows, columns):
    index = pd.Index(columns, dtype=object, tupleize_cols=False)
    return pd.DataFrame([[r[c] for c in columns] for r in rows], columns=index)


def near_margin_boundary(ref: DenseReference, x, s) -> bool:
    """The reference margin s(<w_r + u, x> + b) is within rounding distance of 1."""
    v = ref.vec(x)
    terms = np.abs((ref.w_r + ref.u) * v).sum() + abs(ref.b)
    return abs(s * ref.raw(x) - 1.0) <= REL * max(1.0, terms)


def check_decision(model, ref: DenseReference, x, what):
    got, want = model.decision_function_one(x), ref.decision(x)
    assert_close(got, want, f"{what}: decision_function_one")
    # predict_one is True exactly when the decision is > 0 (so it agrees with the reference's sign
    # whenever |decision| is above the 1e-9 floor).
    assert model.predict_one(x) == (got > 0), f"{what}: predict_one, decision {got!r}"


def check_state(model, ref: DenseReference, what):
    assert model.t == ref.t, f"{what}: t"
    assert_dicts_close(model.weights, ref.weights, f"{what}: weights")
    assert_close(model.intercept, ref.intercept, f"{what}: intercept")
    if ref.average:
        assert_dicts_close(model.average_weights, ref.average_weights, f"{what}: average_weights")
        assert_close(model.average_intercept, ref.average_intercept, f"{what}: average_intercept")


def run_binary(params: dict, ops, prior=None):
    """Feed ``ops`` to PegasosClassifier(**params) and to the reference, comparing at every step."""
    model = PegasosClassifier(**params)
    keys = []
    for op in ops:
        keys.extend(op[1] if op[0] == "one" else op[3])
    vocab = vocabulary(keys, prior or {})
    ref_params = {k: v for k, v in params.items() if k not in ("prior", "seed", "n_features")}
    ref = DenseReference(vocab, prior=prior, **ref_params)

    for step, op in enumerate(ops, start=1):
        what = f"step {step} ({op[0]})"
        if op[0] == "one":
            _, x, y, w = op
            check_decision(model, ref, x, what)
            if near_margin_boundary(ref, x, y_sign(y)):
                event("stream cut at a margin within rounding distance of 1")
                return
            if w is None:
                model.learn_one(x, y)
                ref.learn_one(x, y)
            else:
                model.learn_one(x, y, w=w)
                ref.learn_one(x, y, w)
        else:
            _, rows, ys, columns = op
            for i, x in enumerate(rows):
                check_decision(model, ref, x, f"{what} row {i}")
            if any(near_margin_boundary(ref, x, y_sign(y)) for x, y in zip(rows, ys)):
                event("stream cut at a margin within rounding distance of 1")
                return
            model.learn_many(frame(rows, columns), pd.Series(ys))
            ref.learn_many(rows, ys)
        check_state(model, ref, what)
    last = ops[-1][1] if ops[-1][0] == "one" else ops[-1][1][0]
    check_decision(model, ref, last, "after the last step")
    return model, ref


# Each variant forces some options on; every other option keeps its default.
BINARY_VARIANTS = {
    "plain": {},
    "fit_intercept": {"fit_intercept": True},
    "projection": {"projection": True},
    "average": {"average": True},
    "class_weight_dict": {"class_weight": "dict"},
    "class_weight_balanced": {"class_weight": "balanced"},
    "prior_dict": {"prior": True},
    "horizon": {"horizon": True},
    "t0": {"t0": True},
    "sample_weight": {"sample_weight": True},
    "learn_many": {"batches": True},
    "average_horizon_projection": {"average": True, "horizon": True, "projection": True},
    "average_fit_intercept_balanced": {"average": True, "fit_intercept": True, "class_weight": "balanced"},
    "learn_many_all": {
        "batches": True,
        "average": True,
        "horizon": True,
        "projection": True,
        "prior": True,
        "fit_intercept": True,
        "class_weight": "any",
    },
    "everything": {
        "average": True,
        "horizon": True,
        "t0": True,
        "projection": True,
        "prior": True,
        "fit_intercept": True,
        "class_weight": "any",
        "sample_weight": True,
    },
    "random": "random",
}


def draw_binary_case(data, variant, keys=tuple(KEYS)):
    """(constructor params, prior dict, ops) for a variant, its features named by ``keys``."""
    if variant == "random":
        variant = {
            name: data.draw(st.booleans(), label=name)
            for name in ("average", "horizon", "t0", "projection", "prior", "fit_intercept", "sample_weight", "batches")
        }
        variant["class_weight"] = "any"
    params = {}
    params["lambda_"] = data.draw(st.sampled_from(LAMBDAS), label="lambda_")  # exact Pegasos: an explicit λ
    for flag in ("fit_intercept", "projection"):
        if variant.get(flag):
            params[flag] = True
    if variant.get("average"):  # True averages from step 1, an integer k from step k
        params["average"] = data.draw(st.sampled_from([True, 1, 2, 5]), label="average")
    if variant.get("horizon"):
        params["horizon"] = data.draw(st.sampled_from([1, 2, 3, 7]), label="horizon")
    if variant.get("t0"):
        params["t0"] = data.draw(st.sampled_from([1, 5, 100]), label="t0")
    cw = variant.get("class_weight")
    if cw == "balanced":
        params["class_weight"] = "balanced"
    elif cw == "dict":
        params["class_weight"] = data.draw(class_weights().filter(lambda c: isinstance(c, dict)), label="cw")
    elif cw == "any":
        params["class_weight"] = data.draw(class_weights(), label="class_weight")
    prior = None
    if variant.get("prior"):
        only = "prior_only" if keys == tuple(KEYS) else len(keys)  # a feature only the prior has
        prior = data.draw(
            st.dictionaries(st.sampled_from([*keys, only]), st.floats(-3.0, 3.0), max_size=5), label="prior"
        )
        params["prior"] = prior
    ops = data.draw(
        binary_ops(sample_weight=variant.get("sample_weight", False), batches=variant.get("batches", False), keys=keys),
        label="ops",
    )
    return params, prior, ops


@pytest.mark.parametrize("variant", list(BINARY_VARIANTS))
@EQ
@given(data=st.data())
def test_binary_matches_reference(variant, data):
    params, prior, ops = draw_binary_case(data, BINARY_VARIANTS[variant])
    ref_params = dict(params)
    model = PegasosClassifier(**params)
    assert model.t == 0
    # Before any learning the decision is <w_r, x> + b0 (b0 = 0 for a dict prior).
    probe = ops[0][1] if ops[0][0] == "one" else ops[0][1][0]
    want = sum(float(v) * (prior or {}).get(k, 0.0) for k, v in probe.items())
    assert_close(model.decision_function_one(probe), want, "decision before any learning")
    run_binary(ref_params, ops, prior=prior)


@pytest.mark.parametrize("variant", ["everything", "learn_many_all", "random"])
@EQ
@given(data=st.data())
def test_binary_over_weight_arrays_matches_reference(variant, data):
    """``n_features``: the same comparison with int features, the weights in arrays."""
    params, prior, ops = draw_binary_case(data, BINARY_VARIANTS[variant], keys=tuple(range(10)))
    run_binary({**params, "n_features": 12}, ops, prior=prior)


@EQ
@given(data=st.data())
def test_binary_prior_model_matches_reference(data):
    """prior=<fitted PegasosClassifier>: w_r = its predicting weights (averaged if it averages), b starts at 0."""
    prior_params, _, prior_ops = draw_binary_case(
        data, {"fit_intercept": True, "average": data.draw(st.booleans(), label="prior average")}
    )
    prior_model = PegasosClassifier(**prior_params)
    for op in prior_ops:
        if op[0] == "one":
            prior_model.learn_one(op[1], op[2])
    w_r = prior_model.average_weights if prior_model.average else prior_model.weights

    params, _, ops = draw_binary_case(data, {"fit_intercept": True, "average": True, "projection": True})
    model = PegasosClassifier(prior=prior_model, **params)
    probe = ops[0][1] if ops[0][0] == "one" else ops[0][1][0]
    want = sum(float(v) * w_r.get(k, 0.0) for k, v in probe.items())
    assert_close(model.decision_function_one(probe), want, "decision before any learning")
    assert model.intercept == 0.0

    ref = DenseReference(vocabulary(w_r, *[op[1] for op in ops if op[0] == "one"]), prior=w_r, **params)
    for step, (_, x, y, _w) in enumerate((op for op in ops if op[0] == "one"), start=1):
        check_decision(model, ref, x, f"step {step}")
        if near_margin_boundary(ref, x, y_sign(y)):
            return
        model.learn_one(x, y)
        ref.learn_one(x, y)
        check_state(model, ref, f"step {step}")


def test_prior_model_covers_w_only():
    """A fitted prior hands over its weights; the intercept starts at 0 (the prior regularises w)."""
    prior = PegasosClassifier(lambda_=0.5, fit_intercept=True)
    prior.learn_one({"a": 1.0}, True)  # eta = 2: w = {"a": 2}, b = 2
    assert prior.weights == {"a": 2.0} and prior.intercept == 2.0
    model = PegasosClassifier(lambda_=0.5, prior=prior)
    assert model.intercept == 0.0
    assert model.decision_function_one({}) == 0.0
    assert model.decision_function_one({"a": 1.0}) == 2.0


def test_prior_model_uses_its_predicting_weights():
    """An averaging prior model hands over its averaged weights, the ones it predicts with."""
    prior = PegasosClassifier(lambda_=0.5, average=True)
    prior.learn_one({"a": 1.0}, True)  # u_1 = {"a": 2}
    prior.learn_one({"b": 1.0}, False)  # u_2 = {"a": 1, "b": -1}; average {"a": 1.5, "b": -0.5}
    assert prior.average_weights == pytest.approx({"a": 1.5, "b": -0.5}, abs=1e-15)
    model = PegasosClassifier(lambda_=0.5, prior=prior)
    assert model.weights == pytest.approx({"a": 1.5, "b": -0.5}, abs=1e-15)
    assert model.decision_function_one({"a": 1.0, "b": 1.0}) == pytest.approx(1.0, abs=1e-15)


def test_learn_many_batch_of_zero_rows_still_moves_the_intercept():
    """learn_many moves the bias by b += (eta/k) sum_{margin_i < 1} cost_i s_i, whatever the x_i are."""
    model = PegasosClassifier(lambda_=0.5, fit_intercept=True)
    model.learn_many(pd.DataFrame({"a": [0.0, 0.0]}), pd.Series([False, False]))
    # t = 1, eta = 2, both margins 0 < 1: b = (2/2) * (-1 - 1) = -2
    assert model.t == 1
    assert model.intercept == -2.0
    assert model.decision_function_one({"a": 0.0}) == -2.0


# -- first steps by hand (anchors the reference itself) ------------------------------------------


def test_first_steps_by_hand():
    """lambda = 0.5: step 1 has te = 1, eta = 2, u is reset to 0; step 2 has eta = 1, u halves."""
    x1, x2 = {"a": 2.0, 3: -1.0}, {"a": 1.0}
    for make in (lambda **kw: PegasosClassifier(**kw), lambda **kw: DenseReference({"a": 0, 3: 1}, **kw)):
        model = make(lambda_=0.5, fit_intercept=True, average=True)
        model.learn_one(x1, True)  # margin 0 < 1: u = 2 * x1 = (4, -2), b = 2
        assert model.t == 1
        assert model.weights == pytest.approx({"a": 4.0, 3: -2.0}, abs=0)
        assert model.intercept == 2.0
        assert model.average_weights == pytest.approx({"a": 4.0, 3: -2.0}, abs=0)
        model.learn_one(x2, -1)  # margin -(4 + 2) < 1: u = (2, -1) - (1, 0), b = 2 - 1
        assert model.t == 2
        assert model.weights == pytest.approx({"a": 1.0, 3: -1.0}, abs=1e-15)
        assert model.intercept == pytest.approx(1.0, abs=1e-15)
        assert model.average_weights == pytest.approx({"a": 2.5, 3: -1.5}, abs=1e-15)
        assert model.average_intercept == pytest.approx(1.5, abs=1e-15)
        decision = getattr(model, "decision_function_one", getattr(model, "decision", None))
        assert decision({"a": 1.0}) == pytest.approx(2.5 + 1.5, abs=1e-15)


def test_first_step_resets_u_and_horizon_one_resets_every_step():
    """At te == 1 the shrink factor is 0: with horizon=1 every step starts again from u = 0."""
    for step, (x, y) in enumerate([({"a": 1.0}, 1), ({"b": 2.0}, 0), ({"a": -1.0, "b": 1.0}, True)]):
        model = PegasosClassifier(lambda_=0.25, horizon=1, projection=False)
        ref = DenseReference({"a": 0, "b": 1}, lambda_=0.25, horizon=1)
        for xx, yy in [({"a": 1.0}, 1), ({"b": 2.0}, 0), ({"a": -1.0, "b": 1.0}, True)][: step + 1]:
            model.learn_one(xx, yy)
            ref.learn_one(xx, yy)
        assert_dicts_close(model.weights, ref.weights, f"horizon=1 after {step + 1} steps")
        # only the last example survives: u = 4 * s * x (if it violated), nothing else
        want = {k: 4.0 * y_sign(y) * v for k, v in x.items()}
        assert_dicts_close(ref.weights, want, "reference, horizon=1")


# -- multiclass ----------------------------------------------------------------------------------

CLASSES = ["cat", "dog", 7, ("t", 1)]


@st.composite
def multiclass_ops(draw, sample_weight=False, max_size=20):
    ops = []
    for _ in range(draw(st.integers(1, max_size))):
        w = draw(SAMPLE_WEIGHTS) if sample_weight else None
        ops.append((draw(FEATURES), draw(st.sampled_from(CLASSES)), w))
    return ops


def model_scores(model, x) -> dict:
    """score_k(x) = <w_k, x> + b_k: the package's scores_one when it has one, else computed from
    its public weights and intercepts."""
    if hasattr(model, "scores_one"):
        return model.scores_one(x)
    weights, intercepts = model.weights, model.intercepts
    return {c: sum(weights[c].get(k, 0.0) * float(v) for k, v in x.items()) + intercepts[c] for c in model.classes}


class Shadow:
    """Test bookkeeping that bounds the rounding error of each multiclass score.

    M[c] follows the reference's updates with absolute values (|w| eta |x| added on a violation,
    the same (1 - 1/te) shrink, the projection left out), so M[c] . |x| + MB[c] bounds the sum of
    the magnitudes of everything that went into score_c(x). Either implementation computes score_c
    with an error of a few ulps of that sum (a few dozen steps, each a handful of roundings), far
    below REL times it. ``written`` records the coordinates written since the last clear: a score
    built only from unwritten coordinates and an unwritten bias is an exact 0.0 in any
    implementation, so a tie between two such classes is exact and must go to the earlier class.
    """

    def __init__(self, ref: DenseMulticlassReference):
        self.ref = ref
        self.M: dict = {}
        self.MB: dict = {}
        self.written: dict = {}
        self.biased: set = set()

    def bound(self, c, x) -> float:
        if c not in self.M:
            return 0.0
        return float(self.M[c] @ np.abs(self.ref.vec(x))) + self.MB[c]

    def exact_zero(self, c, x) -> bool:
        nonzero = {k for k, v in x.items() if v != 0}  # a 0 value gives an exact 0 product anyway
        return not (self.written.get(c, set()) & nonzero) and c not in self.biased

    def tie_ambiguous(self, a, b, score_a, score_b, x) -> bool:
        """score_a and score_b are within rounding of each other without being provably equal."""
        if self.exact_zero(a, x) and self.exact_zero(b, x):
            return False  # both exactly 0.0: an exact tie
        # 1e-300: contributions that underflow in one implementation and not in the other
        return abs(score_a - score_b) <= REL * (self.bound(a, x) + self.bound(b, x)) + 1e-300

    def learn_one(self, x, y, w):
        """ref.learn_one(x, y, w), mirrored on the shadow."""
        ref = self.ref
        r = ref.competitor(x, y)
        sc = ref.scores(x)
        s_y = sc[ref.classes.index(y)] if y in ref.classes else 0.0
        violated = r is not None and s_y - sc[r] < 1
        rival = ref.classes[r] if r is not None else None
        margin = ref.learn_one(x, y, w)
        assert (margin is not None and margin < 1) == violated
        te = min(ref.t, ref.horizon) if ref.horizon else ref.t
        eta = 1.0 / (ref.lambda_ * te)
        for c in ref.classes:
            self.M.setdefault(c, np.zeros(len(ref.vocab)))
            self.MB.setdefault(c, 0.0)
            self.M[c] = (1.0 - 1.0 / te) * self.M[c]
        if te == 1:  # the shrink factor is 0: every weight is cleared (the biases are not)
            self.written = {}
        if violated and w != 0:
            for c in (y, rival):
                self.M[c] = self.M[c] + eta * w * np.abs(ref.vec(x))
                self.written.setdefault(c, set()).update(k for k, v in x.items() if v != 0)
                if ref.fit_intercept:
                    self.MB[c] += eta * w
                    self.biased.add(c)


def competitor_ambiguous(shadow: Shadow, x, y) -> bool:
    """The competitor or the margin test is within rounding distance of a tie / of 1."""
    ref = shadow.ref
    sc = ref.scores(x)
    others = [k for k, c in enumerate(ref.classes) if c != y]
    for i in others:
        for j in others:
            if i < j and shadow.tie_ambiguous(ref.classes[i], ref.classes[j], sc[i], sc[j], x):
                return True
    if others:
        r = ref.competitor(x, y)
        s_y = sc[ref.classes.index(y)] if y in ref.classes else 0.0  # a new class scores 0
        if abs(s_y - sc[r] - 1.0) <= REL * (shadow.bound(y, x) + shadow.bound(ref.classes[r], x)):
            return True
    return False


def check_multiclass_before(model, shadow: Shadow, x, what):
    ref = shadow.ref
    assert list(model.classes) == ref.classes, f"{what}: classes"
    if not ref.classes:
        assert model.predict_one(x) is None, f"{what}: predict_one before any class"
        assert model.predict_proba_one(x) == {}, f"{what}: predict_proba_one before any class"
        return
    got = model_scores(model, x)
    want = dict(zip(ref.classes, ref.scores(x).tolist()))
    assert set(got) == set(want), f"{what}: scored classes"
    for c in ref.classes:
        assert_close(got[c], want[c], f"{what}: score[{c!r}]")
    # argmax with ties -> earliest class (unless the top two are within rounding of each other
    # without being provably equal)
    sc = ref.scores(x)
    order = sorted(range(len(sc)), key=lambda k: (-sc[k], k))
    top = ref.classes[order[0]]
    if len(order) == 1 or not shadow.tie_ambiguous(top, ref.classes[order[1]], sc[order[0]], sc[order[1]], x):
        assert model.predict_one(x) == top, f"{what}: predict_one"
    # predict_proba_one = softmax of the scores
    z = np.exp(sc - sc.max())
    p = z / z.sum()
    proba = model.predict_proba_one(x)
    assert set(proba) == set(ref.classes), f"{what}: predict_proba_one keys"
    for c, pc in zip(ref.classes, p.tolist()):
        assert_close(proba[c], pc, f"{what}: predict_proba_one[{c!r}]")


def check_multiclass_after(model, ref: DenseMulticlassReference, what):
    assert model.t == ref.t, f"{what}: t"
    assert list(model.classes) == ref.classes, f"{what}: classes"
    weights, intercepts = model.weights, model.intercepts
    assert set(weights) == set(ref.classes) and set(intercepts) == set(ref.classes), f"{what}: class keys"
    for c, wc in ref.weights.items():
        assert_dicts_close(weights[c], wc, f"{what}: weights[{c!r}]")
        assert_close(intercepts[c], ref.intercepts[c], f"{what}: intercepts[{c!r}]")


MULTICLASS_VARIANTS = {
    "plain": {},
    "fit_intercept": {"fit_intercept": True},
    "projection": {"projection": True},
    "horizon": {"horizon": True},
    "sample_weight": {"sample_weight": True},
    "everything": {"fit_intercept": True, "projection": True, "horizon": True, "sample_weight": True},
    "random": "random",
}


@pytest.mark.parametrize("variant", list(MULTICLASS_VARIANTS))
@EQ
@given(data=st.data())
def test_multiclass_matches_reference(variant, data):
    variant = MULTICLASS_VARIANTS[variant]
    if variant == "random":
        variant = {
            n: data.draw(st.booleans(), label=n) for n in ("fit_intercept", "projection", "horizon", "sample_weight")
        }
    params = {"lambda_": data.draw(st.sampled_from([1e-4] + LAMBDAS), label="lambda_")}
    for flag in ("fit_intercept", "projection"):
        if variant.get(flag):
            params[flag] = True
    if variant.get("horizon"):
        params["horizon"] = data.draw(st.sampled_from([1, 2, 3, 7]), label="horizon")
    ops = data.draw(multiclass_ops(sample_weight=variant.get("sample_weight", False)), label="ops")

    model = PegasosMulticlass(**params)
    shadow = Shadow(DenseMulticlassReference(vocabulary(*[x for x, _, _ in ops]), **params))
    for step, (x, y, w) in enumerate(ops, start=1):
        what = f"step {step}"
        check_multiclass_before(model, shadow, x, what)
        if competitor_ambiguous(shadow, x, y):
            event("stream cut at a near tie / margin near 1")
            return
        if w is None:
            model.learn_one(x, y)
            shadow.learn_one(x, y, 1.0)
        else:
            model.learn_one(x, y, w=w)
            shadow.learn_one(x, y, w)
        check_multiclass_after(model, shadow.ref, what)
    check_multiclass_before(model, shadow, ops[-1][0], "after the last step")


# -- long run: the lazy scale is folded many times ----------------------------------------------

LONG_KEYS = ["f0", 1, ("ng", "ab"), "f3", 4, ("ng", "cd")]


def long_stream(n: int, seed: int = 20240611):
    """A small sparse stream: 6 features of mixed key types, ~half present, labels from a noisy
    linear rule, in the accepted label forms in turn."""
    rng = np.random.default_rng(seed)
    d = len(LONG_KEYS)
    X = rng.normal(0.0, 3.0, size=(n, d)) * (rng.random((n, d)) < 0.5)
    truth = rng.normal(size=d)
    signs = np.sign(X @ truth + rng.normal(0.0, 1.0, size=n))
    signs[signs == 0] = 1
    forms = [(True, False), (1, 0), (1, -1), (1.0, -1.0)]
    labels = [forms[i % 4][0] if s > 0 else forms[i % 4][1] for i, s in enumerate(signs.tolist())]
    dicts = [{LONG_KEYS[j]: v for j, v in enumerate(row) if v != 0.0} for row in X.tolist()]
    return X, dicts, labels


# (options, whether the lazy scale must be folded many times). Without horizon or projection the
# scale only decays like 1/t (>= 1e-5 after 1e5 steps), which is the long-run accuracy check proper;
# a saturated step size (horizon) decays it geometrically and the projection multiplies it by
# r/||u|| < 1 at every step where it is active, so those variants fold it over and over.
LONG_VARIANTS = [
    pytest.param({}, False, id="plain"),
    pytest.param({"average": True}, False, id="average"),
    pytest.param({"projection": True}, False, id="projection"),  # the ball is rarely hit once converged
    pytest.param({"horizon": 50}, True, id="horizon"),
    pytest.param({"average": True, "horizon": 50}, True, id="average-horizon"),
    pytest.param({"average": 5_000, "horizon": 50}, True, id="late-average-horizon"),
    pytest.param(
        {"average": True, "projection": True, "horizon": 200, "fit_intercept": True},
        True,
        id="average-projection-horizon-intercept",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("options, folds", LONG_VARIANTS)
def test_long_run_matches_reference(options, folds, monkeypatch):
    n, every = 100_000, 10_000
    X, dicts, labels = long_stream(n)
    probes_X, probes, _ = long_stream(20, seed=7)

    # Count the folds of the lazy scale, when the package exposes its weight vector class.
    from pegasos_stream.learners import weights as weights_module

    fold_count = [0]
    vector_class = getattr(weights_module, "WeightVector", None)
    if vector_class is not None and hasattr(vector_class, "fold_scale"):
        original = vector_class.fold_scale

        def counting_fold(self):
            fold_count[0] += 1
            return original(self)

        monkeypatch.setattr(vector_class, "fold_scale", counting_fold)

    model = PegasosClassifier(lambda_=0.1, **options)
    ref = DenseReference({k: j for j, k in enumerate(LONG_KEYS)}, lambda_=0.1, **options)
    for i in range(n):
        model.learn_one(dicts[i], labels[i])
        ref.learn_one(X[i], labels[i])
        if (i + 1) % every == 0:
            what = f"{options} after {i + 1} steps"
            check_state(model, ref, what)
            for x, xv in zip(probes, probes_X):
                assert_close(model.decision_function_one(x), ref.decision(xv), f"{what}: decision")
    assert model.t == ref.t == n
    if folds and vector_class is not None:
        assert fold_count[0] >= 20, f"the scale was folded only {fold_count[0]} times"
