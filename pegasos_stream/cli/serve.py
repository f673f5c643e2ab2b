"""``pegasos-stream serve``: predictions of a trained model, which never learns.

Models come from checkpoints of ``run`` (`CheckpointProvider`): ``--model FILE``, or ``--model DIR`` for
the newest valid checkpoint of a directory, which is looked at again every ``--reload-s`` seconds for a newer
one; or from the checkpoints ``run`` publishes to a model topic (`TopicProvider`, ``--model-topic TOPIC``,
read again as often). A newer model is taken up only if it is of the job served (its `learning_hash`), its
state is sound and, with a checkpoint key, it is signed with it. Each model is served with the configuration
its checkpoint holds less the paths it names (`without_paths`: a checkpoint is data, and only the files the
command line names are opened), under the command's overrides (``--set``, ``--input``, ``--output``...), with a
Kafka source in a consumer group of its own (the training group's id + ".serve", unless ``--set
source.group_id=...``). Without ``--http`` it predicts a stream (standard
input, a file, Kafka) to the configured output, as ``run`` writes predictions, each with ``model_version``
and ``model_age_s``; ``--input - --output -`` answers each line as it arrives (a co-process). With
``--http HOST:PORT`` (or a Unix socket's path) it answers requests (`serve.http_api`), only those that carry
the token of ``--http-token-file`` or ``--http-token-env`` when one is given; with ``--spamd HOST:PORT`` (or a
Unix socket's path), spamd's protocol for ``spamc`` and the mail servers set up for it (`serve.spamd`); with ``--milter
HOST:PORT``, the milter protocol of Postfix's and Sendmail's mail filters (`serve.milter`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..persist.checkpoint import (
    CheckpointError,
    checkpoint_sequence,
    checkpoints,
    model_digest,
    read_checkpoint,
    read_checkpoint_bytes,
)
from ..serve.feedback import NO_FEEDBACK, Feedback, FeedbackLog, FeedbackSpool
from ..serve.serving import Refusal, ServedModel, Serving, Watcher, serve_stream
from ..serve.spamd import REQUIRED_SCORE, SpamdService
from . import options
from .assemble import (
    build_model,
    build_parser,
    build_predictor,
    build_sinks,
    build_source,
    metrics_extra_missing,
    start_metrics,
)
from .checks import StartupError, check_files, secret
from .config import (
    ConfigError,
    config_file,
    learning_hash,
    load_config,
    override_config,
    without_paths,
)
from .predict import stored_config
from .settings import JobSettings, KafkaConnection, settings_of

if TYPE_CHECKING:
    from ..distribute.publishing import ModelTopicReader

__all__ = [
    "CheckpointProvider",
    "TopicProvider",
    "add_serve_command",
    "command_serve",
    "model_topic_reader",
    "served_configuration",
]

#: Records predicted at most at a time in a stream (a batch is what the source has at hand, up to this).
BATCH_RECORDS = 1000
#: How often, while no model is there yet, the stream form looks whether the watcher found one.
WAIT_SECONDS = 0.1
#: The most bytes of a checkpoint file ``serve`` reads, unless ``--max-model-bytes`` says otherwise.
MAX_MODEL_BYTES = 4 << 30

_log = logging.getLogger(__name__)

#: Builds the validated configuration a model is served with from the one its checkpoint holds; a
#: ConfigError names ``where`` (the second argument) or the override at fault.
Configure = Callable[[dict, str], dict]


def served_model(model: Any, config: dict, version: int, written_at: float | None, about: dict) -> ServedModel:
    """``model`` to serve under ``config``."""
    return ServedModel(build_predictor(config, model), build_parser(config, model), version, written_at, about)


def _checkpoint_model(
    configure: Configure, where: str, state: dict, manifest: dict, version: int, written_at: float, about: dict
) -> tuple[ServedModel, dict]:
    """The model of the checkpoint ``where`` (its ``state`` and ``manifest``) to serve, and its configuration: the
    one the checkpoint holds less the paths it names (`without_paths`), under ``configure``."""
    config = configure(without_paths(stored_config(where, manifest)), f"{where}: its configuration")
    model = state["model"]
    written = manifest.get("written_at")
    if not isinstance(written, (int, float)):  # a checkpoint written before the manifest said when
        written = written_at
    about = {**about, "model_t": model.t, "model_sha256": model_digest(model)}
    return served_model(model, config, version, written, about), config


class _Provider:
    """What both providers share: the model served (``empty``, the untrained one, until one comes) and the
    configuration it is served with, the job served (the `learning_hash` of that configuration: a model of another
    job is refused), the checkpoint key (a model not signed with it is refused) and the last refusal."""

    #: Where the models come from, for people.
    origin: str

    def __init__(self, configure: Configure, empty: tuple[ServedModel, dict] | None, key: bytes | None) -> None:
        self._configure = configure
        self._key = key
        self._current: ServedModel | None = None
        self.config: dict | None = None  # the configuration the current model is served with
        self.job: str | None = None  # the learning hash of that configuration
        self.last_refusal: Refusal | None = None
        if empty is not None:
            self._take(*empty)
        self._lock = threading.Lock()  # one refresh at a time

    @property
    def current(self) -> ServedModel | None:
        return self._current

    def _take(self, served: ServedModel, config: dict) -> None:
        """Serve ``served`` under ``config`` from now on."""
        self._current, self.config, self.job = served, config, learning_hash(config)

    def _model(
        self, where: str, state: dict, manifest: dict, version: int, written_at: float, about: dict
    ) -> tuple[ServedModel, dict]:
        """`_checkpoint_model`; a StartupError when the model is of another job than the one served."""
        served, config = _checkpoint_model(self._configure, where, state, manifest, version, written_at, about)
        job = learning_hash(config)
        if self.job is not None and job != self.job:
            raise StartupError(
                f"{where}: a model of another job (its model, features or labels differ: learning hash"
                f" {job[:12]}..., the job served {self.job[:12]}...)"
            )
        return served, config

    def _refuse(self, reason: str) -> None:
        """Say that a newer model is refused and why; keep it as the last refusal."""
        self.last_refusal = Refusal(reason, time.time())
        _log.warning("refusing %s; %s", reason, _going_on(self._current))


class CheckpointProvider(_Provider):
    """Models from checkpoints of ``run`` (a `ModelProvider`): the checkpoint file ``path``, or the newest valid
    checkpoint of the directory ``path``, and then each newer one that ``refresh`` finds there.

    A model's version is its checkpoint's sequence number (``checkpoint-000000000042.pgs``: 42, the order in
    which its run wrote it; 0 for a file named otherwise), its age counts from when it was written (the
    manifest's ``written_at``, else the file's modification time). Only a regular file of at most ``max_bytes``
    is read, opened without waiting (a FIFO or a device named like a checkpoint is refused unread). A newer
    checkpoint that cannot be served (truncated, corrupted, a state no learner leaves, not signed with ``key``
    when one is set, of another job, or with a configuration the overrides make invalid) is refused with a
    warning, once until the file changes, and the model served goes on. ``empty`` (version 0) is served until a
    checkpoint is found. A StartupError when ``path`` does not exist, or is a file that cannot be served.
    """

    def __init__(
        self,
        path: Path,
        configure: Configure,
        empty: tuple[ServedModel, dict] | None = None,
        key: bytes | None = None,
        max_bytes: int | None = MAX_MODEL_BYTES,
    ) -> None:
        if not path.exists():
            raise StartupError(f"--model {path}: no such file or directory")
        super().__init__(configure, empty, key)
        self.path = path
        self.origin = f"a checkpoint in {path}" if path.is_dir() else str(path)
        self._max_bytes = max_bytes
        self._refused: dict[Path, tuple[int, int] | None] = {}  # checkpoint -> its _identity when refused
        if path.is_dir():
            self.refresh()
        else:
            try:
                self._take(*self._load(path))
            except (CheckpointError, ConfigError, StartupError) as error:
                raise StartupError(f"--model {_reason(path, error)}") from None

    def refresh(self) -> bool:
        """Take up the newest valid checkpoint of the directory that is newer than the model served."""
        if not self.path.is_dir():
            return False
        with self._lock:
            served = self._current.version if self._current is not None else 0
            for path in checkpoints(self.path):
                if (checkpoint_sequence(path) or 0) <= served:
                    break
                if path in self._refused and self._refused[path] == _identity(path):
                    continue  # refused, and unchanged since
                try:
                    current, config = self._load(path)
                except (CheckpointError, ConfigError, StartupError, OSError) as error:
                    self._refuse_file(path, error)
                    continue
                self._take(current, config)
                _log.info("serving model version %d: %s (t=%s)", current.version, path, current.about.get("model_t"))
                return True
            return False

    def _load(self, path: Path) -> tuple[ServedModel, dict]:
        state, manifest = read_checkpoint(path, self._key, self._max_bytes)
        version, modified = checkpoint_sequence(path) or 0, path.stat().st_mtime
        return self._model(str(path), state, manifest, version, modified, {"model_file": path.name})

    def _refuse_file(self, path: Path, error: Exception) -> None:
        """Say that ``path`` is refused and why; it is not read again until it changes."""
        identity = _identity(path)
        if identity is None:  # removed since (a run keeps only its newest checkpoints)
            return
        self._refused[path] = identity
        self._refuse(f"the checkpoint {_reason(path, error)}")


class TopicProvider(_Provider):
    """Models published by ``run`` to a model topic (a `ModelProvider`; see `distribute.publishing`), read by
    ``reader``: the newest complete snapshot whose digest matches, and then each newer one that ``refresh``
    finds. A version is its checkpoint's sequence number, its age counts from when the checkpoint was written.
    A newer snapshot that cannot be served (chunks missing, a digest that does not match, a checkpoint that
    does not decode, or a configuration the overrides make invalid) is refused with a warning, and the model
    served goes on; so is one of another job, a state no learner leaves, or not signed with ``key`` when one is
    set. ``empty`` (version 0) is served until a snapshot is found.
    """

    def __init__(
        self,
        reader: ModelTopicReader,
        configure: Configure,
        empty: tuple[ServedModel, dict] | None = None,
        key: bytes | None = None,
    ) -> None:
        super().__init__(configure, empty, key)
        self.reader = reader
        self.origin = f"model topic {reader.topic}"
        self.refresh()

    def refresh(self) -> bool:
        """Read what was published since; take up the newest snapshot if it is newer and can be served."""
        with self._lock:
            snapshot, refused = self.reader.read()
            served = self._current.version if self._current is not None else 0
            for error in refused:
                if error.version > served:
                    self._refuse(f"{error} in {self.origin}")
            if snapshot is None or snapshot.version <= served:
                return False
            where = f"model version {snapshot.version}"
            written = snapshot.manifest.get("written_at")
            about = {"model_topic": self.reader.topic}
            try:
                state, manifest = read_checkpoint_bytes(snapshot.data, where, self._key)
                self._take(*self._model(where, state, manifest, snapshot.version, written or time.time(), about))
            except (CheckpointError, ConfigError, StartupError) as error:
                self._refuse(f"{_reason(where, error)} in {self.origin}")
                return False
            _log.info("serving model version %d from %s (t=%s)", snapshot.version, self.origin, state["model"].t)
            return True


def _going_on(current: ServedModel | None) -> str:
    """What serves while a newer model is refused."""
    return "waiting for one" if current is None else f"model version {current.version} goes on serving"


def _identity(path: Path) -> tuple[int, int] | None:
    """(size, modification time) of the file ``path``: it changed when they did (None: it is gone)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _reason(path: Path | str, error: Exception) -> str:
    """``path: reason`` from the error that refused the checkpoint ``path``."""
    text = str(error).removeprefix("--model ")
    return text if text.startswith(str(path)) else f"{path}: {text}"


def served_configuration(args: argparse.Namespace) -> Configure:
    """The configuration a model is served with: its own, in a consumer group of its own (the training
    group's id + ".serve"), under the overrides of the command line."""
    sets = options.overrides(args)

    def configure(stored: dict, where: str) -> dict:
        group = json.dumps(f"{stored.get('source', {}).get('group_id', 'pegasos-stream')}.serve")
        texts = [f"source.group_id={group}", *(text for text, _ in sets)]
        flags = ["serve (the training group's id + .serve)", *(flag for _, flag in sets)]
        return override_config(stored, where, texts, flags)

    return configure


def _untrained(args: argparse.Namespace, configure: Configure) -> tuple[ServedModel, dict] | None:
    """With ``--allow-empty``, the untrained model of ``--config`` to serve until a checkpoint comes."""
    if args.config is None:
        if args.allow_empty:
            raise ConfigError("--allow-empty needs --config: the configuration of the untrained model to serve")
        return None
    if not args.allow_empty:
        if args.model_topic:
            return None
        raise ConfigError(
            "--config is for --allow-empty or --model-topic: a checkpoint holds the configuration of its model"
        )
    path = config_file(args.config)
    config = configure(load_config(path), str(path))
    return served_model(build_model(config), config, 0, None, {"model_file": None, "model_t": 0}), config


@contextlib.contextmanager
def _on_signals(handler: Callable[..., Any]) -> Iterator[None]:
    """SIGTERM and SIGINT call ``handler`` while the block runs."""
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def command_settings(config: str | None, sets: list[tuple[str, str]]) -> JobSettings:
    """The settings of the configuration ``config`` (None: the defaults) under the overrides ``sets`` ((override,
    the flag it came from)): the command's own sections (``kafka``, ``metrics``), whatever model it serves."""
    path = config_file(config) if config else None
    return settings_of(load_config(path, [text for text, _ in sets], [flag for _, flag in sets]))


def kafka_connection(config: str | None, sets: list[tuple[str, str]]) -> KafkaConnection:
    """The ``kafka`` section of `command_settings`."""
    return command_settings(config, sets).kafka


def _serve_metrics(serving: Serving, args: argparse.Namespace) -> None:
    """With ``metrics.port`` (``--set metrics.port=9100``, or ``--config``'s), the service's metrics served there
    (`serve.metrics`), told of each request its access log records; a ConfigError when ``prometheus_client`` is
    not installed or the address cannot be listened on."""
    section = command_settings(args.config, options.overrides(args)).metrics
    if section.port is None:
        return
    try:
        from ..serve.metrics import ServeMetrics
    except ModuleNotFoundError as error:
        raise metrics_extra_missing(error) from None
    metrics = ServeMetrics(serving)
    start_metrics(metrics.start, section.host, section.port)
    serving.access.observer = metrics
    _log.info("serving metrics on http://%s:%d/metrics", section.host, section.port)


def open_feedback(directory: str | None, topic: str | None, connection: Callable[[], KafkaConnection]) -> Feedback:
    """Where taught messages go: the Maildir spool ``directory`` (``--feedback``), or the Kafka topic ``topic``
    (``--feedback-topic``, on the broker ``connection()`` gives); a StartupError when it cannot be opened."""
    if directory is not None:
        try:
            return FeedbackSpool(directory)
        except OSError as error:
            raise StartupError(f"--feedback {directory}: {error.strerror or error}") from None
    from ..kafka.python_client import BrokerUnreachable, TopicAppender

    kafka = connection()
    try:
        return FeedbackLog(TopicAppender(kafka.bootstrap_servers, str(topic), kafka.client_settings()))
    except BrokerUnreachable as error:
        raise StartupError(f"--feedback-topic {topic}: {error}") from None


def model_topic_reader(args: argparse.Namespace) -> ModelTopicReader:
    """The reader of ``--model-topic``, connected as the ``kafka`` section of ``--config`` and the overrides say."""
    from ..distribute.publishing import ModelTopicReader
    from ..kafka.python_client import BrokerUnreachable

    kafka = kafka_connection(args.config, options.overrides(args))
    try:
        return ModelTopicReader(kafka.bootstrap_servers, args.model_topic, kafka.client_settings())
    except BrokerUnreachable as error:
        raise StartupError(f"--model-topic {args.model_topic}: {error}") from None


def _serve_stream(serving: Serving, provider: CheckpointProvider | TopicProvider, args: argparse.Namespace) -> int:
    stop = threading.Event()
    with _on_signals(lambda *_: stop.set()):
        while provider.config is None:
            if stop.wait(WAIT_SECONDS):
                return 0
        settings = settings_of(provider.config)
        if args.input is None and settings.source.type == "stdin":
            _log.info("reading standard input (a checkpoint's paths are never opened: --input FILE names a file)")
        check_files(settings, options.flags_of_paths(args))
        with contextlib.ExitStack() as opened:
            sink, dead_letters = build_sinks(settings)
            opened.callback(sink.close)
            if dead_letters is not None:
                opened.callback(dead_letters.close)
            source = build_source(settings)
            opened.callback(source.close)
            run = settings.run
            events = serve_stream(
                serving,
                source,
                sink,
                dead_letters,
                BATCH_RECORDS,
                run.max_events,
                run.stop_when_idle,
                stop,
                settings.errors.on_error,
                settings.source.type == "stdin" and settings.output.type == "stdout",  # a co-process
            )
    current = provider.current
    summary = {
        "events": events,
        "served": serving.served,
        "errors": serving.errors,
        "model_version": None if current is None else current.version,
    }
    print(json.dumps(summary), file=sys.stderr)
    return 0


def _listen_address(text: str, flag: str = "--http") -> tuple[str, int]:
    """HOST:PORT (``[::1]:PORT`` for an IPv6 address) as (host, port)."""
    host, _, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"{flag} {text}: expected HOST:PORT (a port from 0 to 65535; 0: any free port)")
    return host, int(port)


def _mail_service(serving: Serving, args: argparse.Namespace) -> SpamdService:
    """What scores raw messages against ``--required-score`` and keeps those taught in ``--feedback`` or
    ``--feedback-topic``."""
    feedback = None
    if args.feedback or args.feedback_topic:
        connection = functools.partial(kafka_connection, args.config, options.overrides(args))
        feedback = open_feedback(args.feedback, args.feedback_topic, connection)
    return SpamdService(serving, args.required_score, feedback)


def _http_address(text: str) -> tuple[str, int] | str:
    """``--http``'s HOST:PORT as (host, port), or the path of a Unix socket (a text with a slash)."""
    return text if "/" in text else _listen_address(text)


def _serve_http(serving: Serving, address: tuple[str, int] | str, token: bytes | None, args: argparse.Namespace) -> int:
    try:
        from ..serve.http_api import HttpServer, PredictionApp
    except ModuleNotFoundError as error:
        if error.name not in ("waitress", "werkzeug"):
            raise
        raise StartupError("--http needs waitress and werkzeug: pip install 'pegasos-stream[serve]'") from None
    try:
        server = HttpServer(PredictionApp(serving, _mail_service(serving, args), token), address)
    except OSError as error:
        raise StartupError(f"--http {args.http}: cannot listen: {error.strerror or error}") from None
    _log.info("serving predictions on %s (POST /predict, /checkv2, /learnspam, /learnham; GET /health)", server.url)
    try:
        with _on_signals(signal.default_int_handler):  # a KeyboardInterrupt ends server.run()
            server.run()
    finally:
        server.close()
    return 0


def _serve_spamd(serving: Serving, args: argparse.Namespace) -> int:
    """Answer spamd's protocol on ``--spamd`` until a signal."""
    from ..serve.spamd_server import SpamdServer

    where = args.spamd if "/" in args.spamd else _listen_address(args.spamd, "--spamd")
    service = _mail_service(serving, args)
    try:
        server = SpamdServer(service, where)
    except OSError as error:
        raise StartupError(f"--spamd {args.spamd}: cannot listen: {error.strerror or error}") from None
    into = args.feedback or f"the topic {args.feedback_topic}"
    taught = f"; TELL delivers into {into}" if service.feedback else f"; TELL refused, {NO_FEEDBACK}"
    _log.info("answering spamd's protocol on %s (required score %g%s)", server.address, args.required_score, taught)
    try:
        with _on_signals(signal.default_int_handler):  # a KeyboardInterrupt ends serve_forever()
            server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def _check_serve_flags(args: argparse.Namespace) -> None:
    """Refuse flags that do not go together (a ConfigError)."""
    stream_flags = (args.input, args.output, args.max_events, args.stop_when_idle)
    given = (("--http", args.http), ("--spamd", args.spamd), ("--milter", args.milter))
    listeners = [flag for flag, value in given if value]
    if len(listeners) > 1:
        raise ConfigError("serve answers one protocol: --http, --spamd or --milter")
    if listeners and any(flag is not None for flag in stream_flags):
        raise ConfigError(
            f"{listeners[0]} answers requests: --input, --output, --max-events and --stop-when-idle are for a stream"
        )
    _check_http_and_feedback_flags(args)
    if not math.isfinite(args.required_score):
        raise ConfigError(f"--required-score {args.required_score}: expected a finite number")
    if (args.model is None) == (args.model_topic is None):
        raise ConfigError("serve needs either --model CHECKPOINT or --model-topic TOPIC")
    _check_milter_flags(args)


def _check_http_and_feedback_flags(args: argparse.Namespace) -> None:
    """Refuse a token without ``--http``, and two places for taught messages or one without a service that
    takes them (a ConfigError)."""
    if (args.http_token_file or args.http_token_env) and not args.http:
        raise ConfigError("--http-token-file and --http-token-env are for --http")
    if args.feedback and args.feedback_topic:
        raise ConfigError("--feedback and --feedback-topic: give one place for taught messages")
    if (args.feedback or args.feedback_topic) and not (args.http or args.spamd):
        raise ConfigError(
            "--feedback and --feedback-topic keep the messages taught by TELL or /learnspam: they need --spamd or"
            " --http"
        )


def _check_milter_flags(args: argparse.Namespace) -> None:
    """Refuse ``--milter-*`` flags without ``--milter``, a bad ``--milter`` address or reject score (a ConfigError)."""
    if not args.milter:
        if args.milter_reject_score is not None or args.milter_fail is not None:
            raise ConfigError("--milter-reject-score and --milter-fail are for --milter")
        return
    _milter_socket(args.milter)
    reject = args.milter_reject_score
    if reject is not None and not (math.isfinite(reject) and reject >= args.required_score):
        raise ConfigError(
            f"--milter-reject-score {reject}: expected a finite score of at least --required-score "
            f"({args.required_score}): a message rejected is spam"
        )


def _milter_socket(text: str) -> str:
    """``--milter``'s HOST:PORT (``[::1]:PORT`` for an IPv6 address) in libmilter's form, ``inet:PORT@HOST``; one in
    that form (``inet:``, ``inet6:``, ``unix:``) as it is."""
    if text.startswith(("inet:", "inet6:", "unix:", "local:")):
        return text
    host, port = _listen_address(text, "--milter")
    if port == 0:
        raise ConfigError(f"--milter {text}: expected a port from 1 to 65535 (the mail server is told which)")
    return f"{'inet6' if ':' in host else 'inet'}:{port}@{host}"


def _serve_milter(serving: Serving, args: argparse.Namespace) -> int:
    """Filter mail for Postfix or Sendmail on ``--milter`` until a signal."""
    try:
        from ..serve.milter import MilterPolicy, MilterServer
    except ModuleNotFoundError as error:
        if error.name not in ("Milter", "milter"):
            raise
        raise StartupError("--milter needs pymilter: pip install 'pegasos-stream[milter]' (on libmilter)") from None
    policy = MilterPolicy(args.milter_reject_score, args.milter_fail or "accept")
    socket = _milter_socket(args.milter)
    try:
        server = MilterServer(_mail_service(serving, args), socket, policy)
    except OSError as error:
        raise StartupError(f"--milter {args.milter}: {error}") from None
    reject = "never" if policy.reject is None else f"from {policy.reject:g}"
    stop = threading.Event()
    with _on_signals(lambda *_: stop.set()):
        _log.info(
            "filtering mail as a milter on %s (required score %g; reject %s; without a verdict: %s)",
            socket,
            args.required_score,
            reject,
            policy.fail,
        )
        try:
            server.serve_until(stop)
        except OSError as error:
            raise StartupError(f"--milter {args.milter}: {error}") from None
    return 0


def command_serve(args: argparse.Namespace) -> int:
    """Serve predictions until the stream ends or a signal; 0."""
    _check_serve_flags(args)
    address = _http_address(args.http) if args.http else None
    token = secret(args.http_token_file, args.http_token_env, ("--http-token-file", "--http-token-env"), "token")
    if args.max_model_bytes < 1:
        raise ConfigError(f"--max-model-bytes {args.max_model_bytes}: expected a number of bytes >= 1")
    configure = served_configuration(args)
    key = options.key_of(args)
    provider: CheckpointProvider | TopicProvider
    with contextlib.ExitStack() as opened:
        if args.model_topic:
            reader = model_topic_reader(args)
            opened.callback(reader.close)
            provider = TopicProvider(reader, configure, _untrained(args, configure), key)
        else:
            empty = _untrained(args, configure)
            provider = CheckpointProvider(Path(args.model), configure, empty, key, args.max_model_bytes)
        if provider.current is None:
            missing = f"no model in {provider.origin}" if args.model_topic else f"no valid checkpoint in {args.model}"
            _log.info("%s yet: waiting for one (looking every %g s)", missing, args.reload_s)
        serving = Serving(provider, args.max_staleness_s)
        _serve_metrics(serving, args)
        watcher = Watcher(serving, args.reload_s)
        watcher.start()
        opened.callback(watcher.close)
        if args.spamd:
            return _serve_spamd(serving, args)
        if args.milter:
            return _serve_milter(serving, args)
        return _serve_http(serving, address, token, args) if address else _serve_stream(serving, provider, args)


def add_serve_command(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """The ``serve`` command's parser, with the common flags ``common``."""
    serve = commands.add_parser(
        "serve",
        parents=[common],
        help="predict with a trained model that never learns: a stream, a co-process, or HTTP",
        description="Predict with the model of a checkpoint of run (a file, or a directory's newest, looked at "
        "again for newer ones; or the newest complete one run published to --model-topic), which never learns: "
        "a stream (the configuration's source, --input FILE, or - for standard input: each line answered as it "
        "arrives) to the configured output or --output, or requests over HTTP (--http). Each prediction carries "
        "model_version and model_age_s.",
    )
    serve.add_argument("--model", metavar="CHECKPOINT", help="a checkpoint file, or a directory")
    serve.add_argument(
        "--model-topic",
        metavar="TOPIC",
        help="the Kafka topic run publishes its models to (publish.topic), on the broker of --config's kafka section",
    )
    serve.add_argument(
        "--http",
        metavar="HOST:PORT|SOCKET",
        help="answer POST /predict and GET /health on this address, or on a Unix socket at this path (mode 0660)",
    )
    serve.add_argument(
        "--http-token-file",
        metavar="FILE",
        help="with --http: answer only requests with the header 'Authorization: Bearer TOKEN', the token this file "
        "holds (at least 16 bytes; GET /health needs none)",
    )
    serve.add_argument("--http-token-env", metavar="NAME", help="as --http-token-file, the token of this variable")
    serve.add_argument(
        "--spamd",
        metavar="HOST:PORT|SOCKET",
        help="answer SpamAssassin's spamd protocol (spamc, and mail servers set up for it) on this address, or on "
        "a Unix socket at this path",
    )
    serve.add_argument(
        "--required-score",
        type=float,
        default=REQUIRED_SCORE,
        metavar="SCORE",
        help=f"with --spamd, --http or --milter: a message is spam from this score, the log-odds of spam ln(p/(1-p)) "
        f"(default {REQUIRED_SCORE}: p >= 0.82)",
    )
    serve.add_argument(
        "--milter",
        metavar="HOST:PORT",
        help="filter mail for Postfix (smtpd_milters = inet:HOST:PORT) or Sendmail as a milter on this address "
        "(or libmilter's inet:PORT@HOST, unix:PATH): the X-Spam-* headers of spamd's PROCESS added",
    )
    serve.add_argument(
        "--milter-reject-score",
        type=float,
        metavar="SCORE",
        help="with --milter: reject a message from this score at SMTP time (550 5.7.1; default: never)",
    )
    serve.add_argument(
        "--milter-fail",
        choices=("accept", "tempfail"),
        help="with --milter: without a model yet or when scoring fails, let a message go on unmarked (accept, the "
        "default: fail open) or have the client try again later (tempfail: 451 4.7.1)",
    )
    serve.add_argument(
        "--feedback",
        metavar="DIR",
        help="with --spamd or --http: keep the messages taught by TELL (spamc -L spam|ham) or POST /learnspam, "
        "/learnham in this Maildir (Spam/, Ham/), for run to learn",
    )
    serve.add_argument(
        "--feedback-topic",
        metavar="TOPIC",
        help="as --feedback, into this Kafka topic (on the broker of --config's kafka section), for a run over it "
        "(source.type: kafka, source.format: raw) to learn",
    )
    serve.add_argument(
        "--reload-s", type=float, default=5.0, metavar="SECONDS", help="look for a newer model this often"
    )
    serve.add_argument(
        "--max-staleness-s",
        type=float,
        metavar="SECONDS",
        help="a model older than this is stale: /health says so, and a warning goes to stderr",
    )
    serve.add_argument(
        "--allow-empty",
        action="store_true",
        help="with no checkpoint yet, serve the untrained model of --config instead of waiting",
    )
    serve.add_argument(
        "--max-model-bytes",
        type=int,
        default=MAX_MODEL_BYTES,
        metavar="BYTES",
        help=f"refuse a checkpoint file larger than this (default {MAX_MODEL_BYTES})",
    )
    options.add_key_options(serve)
