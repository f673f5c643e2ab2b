"""PersonalPegasos: a shared learner plus a sparse offset per user, held to a dense reference step by step."""

from __future__ import annotations

import copy
import gzip
import json
import os
import struct
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from river import checks

from pegasos_stream import cli
from pegasos_stream.cli.serve import served_model
from pegasos_stream.io.records import Record
from pegasos_stream.learners import PegasosClassifier, PegasosMixture, PersonalPegasos
from pegasos_stream.learners.personal_offset import PersonalOffset, column, feature_columns
from pegasos_stream.parse.parsing import Event, EventParser
from pegasos_stream.persist import codec
from pegasos_stream.persist.checkpoint import latest_valid
from pegasos_stream.run.evaluation import BinaryReport
from pegasos_stream.run.pending import PendingLabels
from pegasos_stream.run.runner import Runner
from pegasos_stream.serve.serving import Refusal, ServedModel, Serving
from pegasos_stream.serve.spamd import SpamdService, score_of

DIM = 12


def _stream(seed: int, n: int, users: tuple[str, ...] = ("ann", "bob", "cat")) -> list[tuple[dict, bool, str]]:
    """Sparse examples over DIM int columns; a user's label follows a direction of their own half the time."""
    rng = np.random.default_rng(seed)
    personal = {user: rng.normal(size=DIM) for user in users}
    shared = rng.normal(size=DIM)
    events = []
    for _ in range(n):
        user = users[rng.integers(len(users))]
        columns = rng.choice(DIM, size=rng.integers(1, 6), replace=False)
        x = {int(c): float(rng.normal()) for c in columns}
        direction = personal[user] if rng.random() < 0.5 else shared
        events.append((x, bool(sum(direction[c] * v for c, v in x.items()) > 0), user))
    return events


class DenseReference:
    """The personal offsets as dense vectors, each step written out as the class docstring states it."""

    def __init__(self, lambda_: float, t0: float, max_weights: int) -> None:
        self.lambda_, self.t0, self.max_weights = lambda_, t0, max_weights
        self.d: dict[str, np.ndarray] = {}
        self.t: dict[str, int] = {}
        self.order: dict[str, list[int]] = {}  # columns in the order they first got a weight

    def margin(self, x: dict, user: str) -> float:
        d = self.d.get(user, np.zeros(DIM))
        return float(sum(d[c] * v for c, v in x.items()))

    def learn(self, x: dict, y: bool, user: str, shared_margin: float, shared_t: int) -> None:
        d = self.d.setdefault(user, np.zeros(DIM))
        order = self.order.setdefault(user, [])
        sign = 1.0 if y else -1.0
        violated = sign * (shared_margin + self.margin(x, user)) < 1.0
        self.t[user] = t = self.t.get(user, 0) + 1
        eta = 1.0 / (self.lambda_ * (t + self.t0))
        d *= 1.0 - eta * self.lambda_
        if violated:
            for c, v in x.items():
                d[c] += eta * sign * v
                if c not in order:
                    order.append(c)
            self.keep_largest(user)

    def keep_largest(self, user: str, *others: np.ndarray) -> None:
        """Past ``max_weights`` weights, the user's largest four fifths kept (by |d|, the lower column of a tie), the
        others set to 0, in d and in each of ``others``."""
        order, d = self.order[user], self.d[user]
        if len(order) > self.max_weights:
            kept = sorted(sorted(order), key=lambda c: -abs(d[c]))[: max(1, self.max_weights * 4 // 5)]
            for c in order:
                if c not in kept:
                    d[c] = 0.0
                    for other in others:
                        other[c] = 0.0
            self.order[user] = [c for c in order if c in kept]


class DenseAdaGradReference(DenseReference):
    """AdaGrad's steps on the logistic loss, as the class docstring states them, on dense vectors: the decay by
    the user's share of the shared learner's labels, then the step."""

    def __init__(self, rate: float, max_weights: int, share_decay: float) -> None:
        super().__init__(1.0, 1.0, max_weights)
        self.rate, self.share_decay = rate, share_decay
        self.sums: dict[str, np.ndarray] = {}

    def learn(self, x: dict, y: bool, user: str, shared_margin: float, shared_t: int) -> None:
        d, sums = self.d.setdefault(user, np.zeros(DIM)), self.sums.setdefault(user, np.zeros(DIM))
        order = self.order.setdefault(user, [])
        sign = 1.0 if y else -1.0
        c = -sign / (1.0 + np.exp(sign * (shared_margin + self.margin(x, user))))
        self.t[user] = self.t.get(user, 0) + 1
        d *= 1.0 - self.share_decay * min(1.0, self.t[user] / (shared_t + 1)) ** 3
        for j, value in x.items():
            sums[j] += (c * value) ** 2
            d[j] -= self.rate * c * value / np.sqrt(sums[j] + 1e-6)
            if j not in order:
                order.append(j)
        self.keep_largest(user, sums)


STEPS = {
    "pegasos": (dict(step="pegasos", lambda_=0.05, t0=3.0), lambda most: DenseReference(0.05, 3.0, most)),
    "adagrad": (dict(step="adagrad", learning_rate=0.4), lambda most: DenseAdaGradReference(0.4, most, 0.01)),
    "adagrad, strong share decay": (
        dict(step="adagrad", learning_rate=0.4, share_decay=0.5),
        lambda most: DenseAdaGradReference(0.4, most, 0.5),
    ),
}


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("max_weights", [DIM, 3])
def test_the_offsets_follow_the_dense_reference_step_by_step(step, max_weights):
    settings, make_reference = STEPS[step]
    model = PersonalPegasos(PegasosClassifier(lambda_=0.01), **settings, max_weights=max_weights)
    shared = PegasosClassifier(lambda_=0.01)
    reference = make_reference(max_weights)
    for x, y, user in _stream(1, 600):
        shared_margin = shared.decision_function_one(x)
        expected = shared_margin + reference.margin(x, user)
        assert model.decision_function_one(x, user) == pytest.approx(expected, abs=1e-9)
        shared_t = shared.t
        model.learn_one(x, y, user=user)
        shared.learn_one(x, y)
        reference.learn(x, y, user, shared_margin, shared_t)
    for user, d in reference.d.items():
        offset = model.offset(user)
        dense = np.zeros(DIM)
        for c, v in offset.weights().items():
            dense[c] = offset.scale(model.t0) * v
        np.testing.assert_allclose(dense, d, atol=1e-9, rtol=0)
        assert offset.size <= max_weights and offset.t == reference.t[user]
        assert offset.g is None if step == "pegasos" else len(offset.g) == offset.size


def test_the_shared_model_learns_every_example_as_it_would_alone():
    model = PersonalPegasos(PegasosClassifier(lambda_=0.01))
    alone = PegasosClassifier(lambda_=0.01)
    for x, y, user in _stream(2, 300):
        model.learn_one(x, y, user=user)
        alone.learn_one(x, y)
    assert model.shared.weights == alone.weights


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 120))
def test_without_a_user_it_is_the_shared_model_bit_for_bit(seed, n):
    model = PersonalPegasos(PegasosMixture(n_features=DIM), lambda_=0.1)
    alone = PegasosMixture(n_features=DIM)
    for x, y, _ in _stream(seed, n):
        assert model.decision_function_one(x) == alone.decision_function_one(x)
        assert model.predict_proba_one(x) == alone.predict_proba_one(x)
        model.learn_one(x, y)
        alone.learn_one(x, y)
    assert model.users == 0


def test_a_user_without_labels_gets_the_shared_score():
    model = PersonalPegasos(PegasosClassifier(lambda_=0.01))
    for x, y, user in _stream(3, 100, users=("ann",)):
        model.learn_one(x, y, user=user)
    x = {0: 1.0, 5: -2.0}
    assert model.decision_function_one(x, "nobody") == model.shared.decision_function_one(x)
    assert model.offset("nobody") is None and model.users == 1


@pytest.mark.parametrize("step", ["pegasos", "adagrad"])
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), max_users=st.integers(1, 3))
def test_offsets_that_leave_memory_come_back_bit_for_bit(step, seed, max_users):
    users = ("ann", "bob", "cat", "dan", "eve")
    unbounded = PersonalPegasos(PegasosClassifier(lambda_=0.01), step, lambda_=0.05, max_weights=4)
    store: dict[str, bytes] = {}
    bounded = PersonalPegasos(
        PegasosClassifier(lambda_=0.01), step, lambda_=0.05, max_weights=4, max_users=max_users, store=store
    )
    for x, y, user in _stream(seed, 150, users):
        assert bounded.decision_function_one(x, user) == unbounded.decision_function_one(x, user)
        bounded.learn_one(x, y, user=user)
        unbounded.learn_one(x, y, user=user)
        assert bounded.users <= max_users
    for user in users:
        a, b = bounded.offset(user), unbounded.offset(user)
        assert (a is None and b is None) or a.to_bytes() == b.to_bytes()


@given(
    t=st.integers(0, 2**53),
    weights=st.one_of(
        st.dictionaries(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False, allow_infinity=False)),
        st.dictionaries(st.text(max_size=8), st.floats(allow_nan=False, allow_infinity=False), max_size=20),
        st.dictionaries(st.tuples(st.text(max_size=3), st.integers()), st.floats(-1e6, 1e6), max_size=20),
    ),
    adagrad=st.booleans(),
)
def test_an_offset_round_trips_through_its_bytes(t, weights, adagrad):
    sums = {k: abs(v) for k, v in weights.items()} if adagrad else None
    offset = PersonalOffset.of(t, weights, sums)
    back = PersonalOffset.from_bytes(offset.to_bytes())
    assert back.t == t and back.weights() == {column(k): v for k, v in weights.items()}
    assert (back.g is None) == (not adagrad)
    assert sums is None or back.g.tolist() == [sums[k] for k in _sorted(weights)]
    assert list(back.columns) == sorted(back.columns) and back.to_bytes() == offset.to_bytes()


def _sorted(weights: dict) -> list:
    """The keys of ``weights`` in the order of their columns."""
    return sorted(weights, key=column)


@given(
    weights=st.one_of(
        st.dictionaries(st.integers(-(2**63), 2**63 - 1), st.floats(-1e6, 1e6), max_size=20),
        st.dictionaries(st.text(max_size=8), st.floats(-1e6, 1e6), max_size=20),
    ),
    adagrad=st.booleans(),
)
def test_an_offset_stored_by_feature_key_reads_as_today(weights, adagrad):
    """The earlier bytes (weights, sums, then int64 keys or a JSON list of str keys) read into the same offset."""
    keys = list(weights)
    ints = all(isinstance(k, int) for k in keys)
    body = np.array(keys, np.int64).tobytes() if ints else json.dumps(keys).encode()
    sums = [abs(v) for v in weights.values()]
    data = struct.pack("<c?qq", b"i" if ints else b"s", adagrad, 7, len(keys))
    data += np.array(list(weights.values())).tobytes() + (np.array(sums).tobytes() if adagrad else b"") + body
    expected = PersonalOffset.of(7, weights, dict(zip(keys, sums, strict=True)) if adagrad else None)
    assert PersonalOffset.from_bytes(data).to_bytes() == expected.to_bytes()


def test_an_offset_checkpointed_by_feature_key_loads_as_today():
    """The earlier state (weights and sums in dicts by feature key) loads into the same offset."""
    offset = PersonalOffset.__new__(PersonalOffset)
    offset.__setstate__({"t": 3, "v": {5: 1.0, "a": 2.0, 2: -0.5}, "g": {5: 1.0, "a": 4.0, 2: 0.25}})
    expected = PersonalOffset.of(3, {2: -0.5, 5: 1.0, "a": 2.0}, {2: 0.25, 5: 1.0, "a": 4.0})
    assert offset.to_bytes() == expected.to_bytes() and offset.weights()[column("a")] == 2.0
    offset._check_state()


def test_a_decayed_offset_multiplies_its_weights_out_before_its_scale_underflows():
    offset = PersonalOffset.of(5, {1: 2.0, 7: -4.0}, {1: 1.0, 7: 1.0})
    expected = {1: 2.0, 7: -4.0}
    nothing = np.empty(0, np.int64), np.empty(0)
    for _ in range(700):  # 0.5 ** 700 is far below 1e-100, above the smallest float
        offset.adagrad_step(*nothing, gradient=0.0, rate=0.3, decay=0.5)
        expected = {k: 0.5 * v for k, v in expected.items()}
        assert 1e-100 <= offset.s <= 1.0
        assert {k: offset.s * v for k, v in offset.weights().items()} == pytest.approx(expected, rel=1e-12, abs=0)
    assert offset.dot({1: 1.0, 7: 1.0}, 1.0) == pytest.approx(-2.0 * 0.5**700, rel=1e-12)
    back = PersonalOffset.from_bytes(offset.to_bytes())
    assert back.s == offset.s and back.weights() == offset.weights()
    back._check_state()


@pytest.mark.parametrize("step", ["pegasos", "adagrad"])
def test_a_step_that_would_overflow_is_refused_and_leaves_the_offset_as_it_was(step):
    """Values the shared learner may take but whose squares overflow: the offset's step is refused (ValueError),
    its weights, sums, scale and t unchanged, and what it holds still loads."""
    model = PersonalPegasos(PegasosClassifier(lambda_=0.01), step, lambda_=1e-6, t0=1.0)  # (Pegasos: η·w/s ≈ 1e6)
    model.learn_one({1: 1.0, 2: 0.5}, True, user="ann")
    offset = model.offset("ann")
    before = offset.to_bytes()
    with pytest.raises(ValueError, match="values too large for a personal offset"):
        model.learn_offset(offset, {3: 1e305, 4: -1e305}, False, 0.0, shared_t=1)
    assert offset.to_bytes() == before
    offset._check_state()


def test_feature_keys_of_every_kind_have_columns():
    x = {3: 1.0, "a": 2.0, ("a", 1): 3.0, 2**70: 4.0, True: 5.0}
    columns, values = feature_columns(x)
    assert columns.tolist() == [3, column("a"), column(("a", 1)), column(2**70), 1]
    assert values.tolist() == [1, 2, 3, 4, 5]
    assert len(set(columns.tolist())) == 5 and column(np.int64(3)) == 3


def test_a_checkpointed_model_goes_on_learning_as_the_original():
    model = PersonalPegasos(PegasosClassifier(lambda_=0.01), lambda_=0.05)
    stream = _stream(4, 200)
    for x, y, user in stream[:100]:
        model.learn_one(x, y, user=user)
    tree, arrays = codec.encode(model)
    copy_ = codec.decode(tree, arrays)
    for x, y, user in stream[100:]:
        assert copy_.decision_function_one(x, user) == model.decision_function_one(x, user)
        copy_.learn_one(x, y, user=user)
        model.learn_one(x, y, user=user)


def test_the_store_is_not_part_of_the_state():
    model = PersonalPegasos(PegasosClassifier(), max_users=1, store={})
    assert copy.deepcopy(model).store is None


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"lambda_": 0.0}, "lambda"),
        ({"t0": 0.5}, "t0"),
        ({"max_weights": 0}, "max_weights"),
        ({"max_users": True}, "max_users"),
        ({"step": "sgd"}, "step"),
        ({"learning_rate": 0.0}, "learning_rate"),
    ],
)
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        PersonalPegasos(PegasosClassifier(), **settings)


def test_check_estimator():
    for params in PersonalPegasos._unit_test_params():
        checks.check_estimator(PersonalPegasos(**params))


# -- in a run: the user field of JSON events -------------------------------------------------------


class _Collected:
    def __init__(self) -> None:
        self.lines: list[dict] = []

    def emit(self, obj: dict) -> None:
        self.lines.append(obj)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def _runner(model, sink=None) -> Runner:
    pending = PendingLabels(max_pending=1000, max_age_seconds=1e9, clock=lambda: 0.0)
    parser = EventParser("json", None, None, 1 << 20, users=True)
    return Runner(model, None, parser, sink or _Collected(), pending, BinaryReport(window=None))


def _records(events: list[dict]) -> list[Record]:
    return [Record(json.dumps(e).encode(), f"<test>:{i + 1}") for i, e in enumerate(events)]


def _json_events(stream) -> list[dict]:
    return [
        {"id": i, "x": {str(k): v for k, v in x.items()}, "label": y, **({"user": u} if i % 4 else {})}
        for i, (x, y, u) in enumerate(stream)
    ]


def test_a_run_predicts_and_learns_each_event_as_its_users():
    events = _json_events(_stream(5, 200))
    sink = _Collected()
    runner = _runner(PersonalPegasos(PegasosClassifier(lambda_=0.01), lambda_=0.05), sink)
    users = runner.report_users()
    for record in _records(events):
        runner.process(record)
    by_hand = PersonalPegasos(PegasosClassifier(lambda_=0.01), lambda_=0.05)
    for event, line in zip(events, sink.lines, strict=True):
        x, user = {k: float(v) for k, v in event["x"].items()}, event.get("user")
        assert line["score"] == by_hand.decision_function_one(x, user)
        by_hand.learn_one(x, event["label"], user=user)
    summary = users.summary()
    assert set(summary) == {"ann", "bob", "cat"}
    assert sum(s["n"] for s in summary.values()) == sum("user" in e for e in events)
    assert summary["ann"]["positives"] == sum(e["label"] for e in events if e.get("user") == "ann")
    assert runner.report.n == len(events)


def test_a_delayed_label_is_learned_as_its_users_after_a_checkpoint():
    model = PersonalPegasos(PegasosClassifier(lambda_=0.01), lambda_=0.05)
    runner = _runner(model)
    runner.process(Record(b'{"id": "a", "x": {"f": 1.0}, "user": "ann"}', "<test>:1"))
    restored = _runner(codec.decode(*codec.encode(model)))
    restored.restore(codec.decode(*codec.encode(runner.snapshot())))
    restored.process(Record(b'{"id": "a", "label": false}', "<test>:2"))
    assert restored.model.offset("ann").t == 1 and restored.model.users == 1


@pytest.mark.parametrize("user", ["", 7, ["ann"]])
def test_a_user_that_is_no_name_is_a_bad_record(user):
    runner = _runner(PersonalPegasos(PegasosClassifier()))
    runner.process(Record(json.dumps({"id": 1, "x": {"f": 1.0}, "label": True, "user": user}).encode(), "<t>:1"))
    assert runner.stats.rejected == 1 and runner.model.users == 0 and runner.report.n == 0


# -- the shipped configuration, end to end ---------------------------------------------------------


@dataclass
class _Provider:
    """One model, served as it is."""

    current: ServedModel
    origin: str = "a test"
    last_refusal: Refusal | None = None

    def refresh(self) -> bool:
        return False


@pytest.fixture(scope="module")
def personal_checkpoint(tmp_path_factory) -> Path:
    """A checkpoint of the shipped `personal` configuration on its bundled sample (three users)."""
    directory = tmp_path_factory.mktemp("personal") / "ck"
    assert (
        cli.main(["run", "--config", "personal", "--set", f"checkpoint.dir={directory}", "--output", os.devnull]) == 0
    )
    return directory


def test_eval_of_the_personal_configuration_gives_each_users_figures(capsys):
    assert cli.main(["eval", "--config", "personal", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    users = summary["users"]
    assert set(users) == {"yyyy", "zzzz", "other"}
    assert sum(figures["n"] for figures in users.values()) == summary["events"] == 404
    assert all(0.0 <= figures["one_minus_roca_pct"] <= 100.0 for figures in users.values())


def test_a_maildir_of_users_mail_is_learned_as_the_same_events_with_their_users(tmp_path, capsys):
    """The personal sample as each user's Maildir (ham in the INBOX, spam in .Spam, delivered in the sample's
    order), read with ``source.users: directories``: each user's figures those of the sample's JSON events."""
    sample = resources.files("pegasos_stream") / "data" / "personal-sample.jsonl.gz"
    events = [json.loads(line) for line in gzip.decompress(sample.read_bytes()).splitlines()]
    for number, event in enumerate(events):
        folder = tmp_path / "mail" / event["user"] / (".Spam" if event["label"] == "spam" else "") / "cur"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{1_000_000_000 + number}.M{number}.host:2,S").write_text(event["text"], encoding="utf-8")
    assert cli.main(["eval", "--config", "personal", "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)["users"]
    flags = ["--set", "source.users=directories", "--set", "source.folders={Spam: spam, INBOX: ham}"]
    assert cli.main(["eval", "--config", "personal", "--input", str(tmp_path / "mail"), *flags, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["users"] == expected
    assert cli.main(["eval", "--config", "personal", "--input", str(tmp_path / "mail" / "yyyy"), *flags]) == 2
    assert "is a Maildir itself" in capsys.readouterr().err
    assert cli.main(["eval", "--config", "spam", "--input", str(tmp_path / "mail"), *flags]) == 2
    assert "users are for personal models" in capsys.readouterr().err


MESSAGE = "Subject: cheap meds\n\nbuy now, limited offer, click here\n"


def _stored(directory: Path) -> tuple[PersonalPegasos, dict]:
    found = latest_valid(directory)
    assert found is not None
    return found[1]["model"], found[2]["config"]


def _features(model: PersonalPegasos, config: dict, text: str | bytes) -> dict:
    return served_model(model, config, 1, None, {}).predictor.features_of(Event("m", "m", text=text))


def test_predict_scores_an_event_for_its_user(personal_checkpoint, tmp_path, capsys):
    model, config = _stored(personal_checkpoint)
    events = tmp_path / "events.jsonl"
    lines = [{"id": user or "nobody", "text": MESSAGE, **({"user": user} if user else {})}
             for user in ("yyyy", "zzzz", None, "stranger")]  # fmt: skip
    events.write_text("".join(json.dumps(line) + "\n" for line in lines))
    capsys.readouterr()
    assert cli.main(["predict", "--model", str(personal_checkpoint), str(events)]) == 0
    scores = {p["id"]: p["score"] for p in map(json.loads, capsys.readouterr().out.splitlines())}
    x = _features(model, config, MESSAGE)
    assert scores["nobody"] == scores["stranger"] == model.shared.decision_function_one(x)
    assert scores["yyyy"] == model.decision_function_one(x, "yyyy") != scores["nobody"]
    assert model.users == 3 and model.personal_weights > 0


def test_a_served_spamd_verdict_is_the_users(personal_checkpoint):
    model, config = _stored(personal_checkpoint)
    service = SpamdService(Serving(_Provider(served_model(model, config, 1, None, {}))))
    message = MESSAGE.encode()
    x = _features(model, config, message)
    assert service.verdict(message).proba == model.probability(model.shared.decision_function_one(x))
    for user in ("yyyy", "zzzz", "other"):
        verdict = service.verdict(message, user)
        assert verdict.proba == model.probability(model.decision_function_one(x, user))
        assert verdict.proba != service.verdict(message).proba


def test_rspamds_user_and_deliver_to_headers_name_the_user_over_http(personal_checkpoint):
    werkzeug_test = pytest.importorskip("werkzeug.test")
    from pegasos_stream.serve.http_api import PredictionApp

    model, config = _stored(personal_checkpoint)
    client = werkzeug_test.Client(PredictionApp(Serving(_Provider(served_model(model, config, 1, None, {})))))
    x = _features(model, config, MESSAGE.encode())
    probas: list[str] = []
    for headers, user in [({}, None), ({"User": "yyyy"}, "yyyy"), ({"Deliver-To": "zzzz"}, "zzzz")]:
        answer = client.post("/checkv2", data=MESSAGE.encode(), headers=headers).get_json()
        proba = model.probability(
            model.decision_function_one(x) if user is None else model.decision_function_one(x, user)
        )
        assert answer["score"] == score_of(proba)
        probas.append(answer["symbols"]["PEGASOS_STREAM"]["description"])
        assert f"p = {proba:.4f}" in probas[-1]
    assert len(set(probas)) == 3  # each user's own
