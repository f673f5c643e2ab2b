"""The job of ``run`` and ``eval``: its settings, read from its configuration and checked; its pieces built from them
and opened (resumed from a checkpoint when asked), each closed once the job is done with it; its stream run; then
what it did."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from ..io.sources import Source
from ..learners.personal import PersonalPegasos
from ..persist.checkpoint import Checkpoints, latest_valid
from ..persist.checkpoint import checkpoints as checkpoint_files
from ..run.runner import Runner, RunStats, StateKeeper, check_resumable
from .assemble import build_checkpoints, build_cluster, build_metrics, build_publisher, build_runner, build_source
from .checks import check_files, check_mail_labels, check_plot, checkpoint_directory_error, checkpoint_key
from .config import ConfigError, check_kafka_checkpoints, config_file, load_config, written_for
from .inputs import resume_position
from .progress import ProgressBar
from .settings import JobSettings

if TYPE_CHECKING:
    from ..distribute.cluster import ClusterSync
    from ..kafka.group import GroupSource

__all__ = ["Job", "job_settings"]

_log = logging.getLogger(__name__)


def job_settings(
    config_name: str,
    overrides: Sequence[tuple[str, str]],
    paths_given_as: Mapping[str, str],
    *,
    evaluate: bool,
    plot: str | None = None,
    resume: bool = False,
) -> JobSettings:
    """The settings of a ``run`` job (an ``eval``'s, with ``evaluate``): the configuration file ``config_name`` (or
    the shipped configuration of that name) under ``overrides`` (each a ``--set`` text and the flag it came from),
    checked for the command (`_check_job`: ``paths_given_as`` names the flags of the file paths, ``plot`` is
    ``--plot``'s image, ``resume`` says ``--resume``)."""
    path = config_file(config_name)
    config = load_config(path, [text for text, _ in overrides], [flag for _, flag in overrides])
    settings = JobSettings.from_config(config)
    _check_job(settings, str(path), paths_given_as, evaluate, plot, resume)
    return settings


def _check_job(
    settings: JobSettings,
    where: str,
    paths_given_as: Mapping[str, str],
    evaluate: bool,
    plot: str | None,
    resume: bool,
) -> None:
    """The checks of a job's settings (from the file ``where``) before anything is opened: a run's Kafka checkpoints,
    the files it reads, mail labels, an eval's plot, and no --resume for a cluster learner."""
    if not evaluate:
        check_kafka_checkpoints(settings.raw, where)
    check_files(settings, paths_given_as)
    check_mail_labels(settings, evaluate)
    if plot:
        check_plot(plot, settings)
    if not evaluate and settings.cluster.delta_topic and resume:
        raise ConfigError(
            "--resume: a cluster learner (cluster.delta_topic) always starts from the cluster's newest snapshot and"
            " delta log, not from checkpoints"
        )


@dataclass
class Job:
    """A job built from its ``settings`` and opened: its runner and source, what keeps its state (``checkpoints``, or
    a cluster learner's ``cluster``; neither for an eval) and an eval's ``progress`` bar."""

    settings: JobSettings
    runner: Runner
    source: Source
    checkpoints: Checkpoints | None
    cluster: ClusterSync | None
    progress: ProgressBar | None

    @classmethod
    def open(
        cls,
        settings: JobSettings,
        evaluate: bool,
        opened: contextlib.ExitStack,
        resume: bool = False,
        accept_config: bool = False,
    ) -> Job:
        """The job of ``settings`` (an eval's, with ``evaluate``), each piece given to ``opened`` to close (in the
        reverse order of opening); with ``resume``, the learner and the position of the newest valid checkpoint
        (`_resume`, with ``accept_config``)."""
        checkpoints, cluster = _open_keepers(settings, evaluate, opened)
        state, position = _resume(settings, accept_config) if resume else (None, None)
        model = cluster.recorder if cluster is not None else state and state["model"]
        runner = _open_runner(settings, evaluate, model, opened)
        if evaluate and isinstance(runner.model, PersonalPegasos) and not settings.output.forward:
            runner.report_users()  # (every score kept, as an eval's report keeps them)
        if state:
            runner.restore(state["runner"])
        if checkpoints is not None:
            checkpoints.check_room(runner.model, runner.snapshot())
        source = build_source(settings, position)
        opened.callback(source.close)
        if cluster is not None:
            cluster.attach(cast("GroupSource", source))
        progress = ProgressBar(runner.stats, source) if evaluate else None
        metrics = None if evaluate else build_metrics(settings, runner, source, checkpoints)
        if metrics is not None:
            opened.callback(metrics.close)
        return cls(settings, runner, source, checkpoints, cluster, progress)

    @property
    def keeper(self) -> StateKeeper | None:
        """What the runner writes its checkpoints to: the cluster's sync, else the checkpoints."""
        return self.cluster if self.cluster is not None else self.checkpoints

    def run(self) -> RunStats:
        """Run the job's stream to its end (or ``run.max_events``, or ``run.stop_when_idle``), an eval's progress bar
        shown."""
        limits, progress = self.settings.run, self.progress
        with progress.shown() if progress is not None else contextlib.nullcontext():
            return self.runner.run(self.source, limits.max_events, limits.stop_when_idle, progress, self.keeper)

    def summary(self, stats: RunStats) -> dict[str, object]:
        """What the job did, once ``stats`` says its run ended: the report's metrics, the counts, the pace, the
        learner's steps (and a cluster's state); a NaN as None."""
        runner = self.runner
        summary: dict[str, object] = {
            **runner.report.summary(),
            "events": stats.events,
            "learned": stats.learned,
            "rejected": stats.rejected,
            "empty_bodies": runner.empty_bodies,
            "pending": len(runner.pending),
            "expired": runner.pending.expired + runner.pending.dropped,
            "unmatched_labels": runner.pending.unmatched,
            "examples_per_s": stats.rate(),
            "t": runner.model.t,
        }
        if self.cluster is not None:
            summary["cluster"] = self.cluster.summary()
        if runner.user_reports is not None:
            summary["users"] = {user: _without_nan(figures) for user, figures in runner.user_reports.summary().items()}
        return _without_nan(summary)


def _without_nan(figures: Mapping[str, object]) -> dict[str, object]:
    """``figures`` with a NaN as None (JSON has no NaN)."""
    return {key: None if isinstance(value, float) and math.isnan(value) else value for key, value in figures.items()}


def _open_keepers(
    settings: JobSettings, evaluate: bool, opened: contextlib.ExitStack
) -> tuple[Checkpoints | None, ClusterSync | None]:
    """(checkpoints, cluster): what keeps the job's state, opened: its checkpoints (and their publisher), or a cluster
    learner's sync (``cluster.delta_topic``); neither for an eval."""
    if evaluate:
        return None, None
    if settings.cluster.delta_topic:
        cluster, closers = build_cluster(settings)
        for close in reversed(closers):
            opened.callback(close)
        return None, cluster
    checkpoints = _checkpoints(settings)
    if checkpoints is not None:
        opened.callback(checkpoints.close)
        publisher = build_publisher(settings, checkpoints)
        if publisher is not None:
            opened.callback(publisher.close)
    return checkpoints, None


def _open_runner(settings: JobSettings, evaluate: bool, model: object, opened: contextlib.ExitStack) -> Runner:
    """The job's runner, learning with ``model`` (None: the configured learner), its outputs opened; an eval's
    reports the exact ROC AUC."""
    runner = build_runner(settings, model=model, exact_auc=True if evaluate else None)
    opened.callback(runner.sink.close)
    if runner.dead_letters is not None:
        opened.callback(runner.dead_letters.close)
    return runner


def _resume(settings: JobSettings, accept_config: bool = False) -> tuple[dict | None, dict | None]:
    """(state, source position) to resume from: the newest valid checkpoint's; without one, (None,
    None) for a new learner (files from the start, Kafka at its group's committed offsets, else
    ``source.start``), or (None, from the beginning) when checkpoints exist but none is usable (the
    model that learned what the group committed is lost). A checkpoint written with another
    configuration is refused (a ConfigError) unless ``accept_config``; its position applies only to
    the input it was taken from (`inputs.resume_position`). A checkpoint whose runner state or position a
    run could not take up (`check_resumable`), or not signed with ``checkpoint.key_file``/``key_env``'s key
    when one is set, is skipped as a corrupt one is."""
    section = settings.checkpoint
    directory = section.dir
    if not directory:
        raise ConfigError("--resume needs checkpoint.dir in the configuration")
    found = latest_valid(directory, key=checkpoint_key(section.key_file, section.key_env), check=check_resumable)
    if found is None:
        lost = bool(checkpoint_files(directory))
        if lost or settings.source.type != "kafka":
            _log.info("no checkpoint in %s: starting from the beginning", directory)
        else:
            _log.info(
                "no checkpoint in %s: starting at the consumer group's committed offsets (source.start where none)",
                directory,
            )
        return None, {"from_beginning": True} if lost else None
    path, state, manifest = found
    if not written_for(manifest, settings.raw):
        if not accept_config:
            raise ConfigError(
                f"{path} was written with another configuration; "
                "resume with --accept-config to continue its model and state under this one"
            )
        _log.warning("warning: %s was written with another configuration", path)
    position = resume_position(settings, manifest, path)
    _log.info("resuming from %s (t=%s, %s events)", path, state["model"].t, manifest["events"])
    return state, position


def _checkpoints(settings: JobSettings) -> Checkpoints | None:
    """The run's checkpoints (``build_checkpoints``; None without ``checkpoint.dir``); a StartupError when the
    directory cannot be created, locked or written."""
    directory = settings.checkpoint.dir
    if not directory:
        return None
    try:
        return build_checkpoints(settings)
    except OSError as error:
        raise checkpoint_directory_error(directory, error) from None
