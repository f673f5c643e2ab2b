"""The job of ``run`` and ``eval``: its pieces built from the configuration and opened, each closed once the job is
done with it; then what it did."""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from ..io.sources import Source
from ..persist.checkpoint import Checkpoints, latest_valid
from ..persist.checkpoint import checkpoints as checkpoint_files
from ..run.runner import Runner, RunStats, StateKeeper, check_resumable
from .assemble import build_checkpoints, build_cluster, build_metrics, build_publisher, build_runner, build_source
from .checks import checkpoint_directory_error, checkpoint_key
from .config import ConfigError, written_for
from .inputs import resume_position
from .progress import ProgressBar

if TYPE_CHECKING:
    from ..distribute.cluster import ClusterSync
    from ..kafka.group import GroupSource

__all__ = ["Job", "open_job"]

_log = logging.getLogger(__name__)


@dataclass
class Job:
    """The pieces of a job, built and opened: its runner and source, what keeps its state (``checkpoints``, or a
    cluster learner's ``cluster``; neither for an eval) and an eval's ``progress`` bar."""

    runner: Runner
    source: Source
    checkpoints: Checkpoints | None
    cluster: ClusterSync | None
    progress: ProgressBar | None

    @property
    def keeper(self) -> StateKeeper | None:
        """What the runner writes its checkpoints to: the cluster's sync, else the checkpoints."""
        return self.cluster if self.cluster is not None else self.checkpoints

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
        return {
            key: None if isinstance(value, float) and math.isnan(value) else value for key, value in summary.items()
        }


def open_job(
    config: dict, evaluate: bool, opened: contextlib.ExitStack, resume: bool = False, accept_config: bool = False
) -> Job:
    """The pieces of the job of ``config`` (an eval's, with ``evaluate``), each given to ``opened`` to close (in the
    reverse order of opening); with ``resume``, the learner and the position of the newest valid checkpoint
    (`_resume`, with ``accept_config``)."""
    checkpoints, cluster = _open_keepers(config, evaluate, opened)
    state, position = _resume(config, accept_config) if resume else (None, None)
    model = cluster.recorder if cluster is not None else state and state["model"]
    runner = _open_runner(config, evaluate, model, opened)
    if state:
        runner.restore(state["runner"])
    if checkpoints is not None:
        checkpoints.check_room(runner.model, runner.snapshot())
    source = build_source(config, position)
    opened.callback(source.close)
    if cluster is not None:
        cluster.attach(cast("GroupSource", source))
    progress = ProgressBar(runner.stats, source) if evaluate else None
    metrics = None if evaluate else build_metrics(config, runner, source, checkpoints)
    if metrics is not None:
        opened.callback(metrics.close)
    return Job(runner, source, checkpoints, cluster, progress)


def _open_keepers(
    config: dict, evaluate: bool, opened: contextlib.ExitStack
) -> tuple[Checkpoints | None, ClusterSync | None]:
    """(checkpoints, cluster): what keeps the job's state, opened: its checkpoints (and their publisher), or a cluster
    learner's sync (``cluster.delta_topic``); neither for an eval."""
    if evaluate:
        return None, None
    if config["cluster"]["delta_topic"]:
        cluster, closers = build_cluster(config)
        for close in reversed(closers):
            opened.callback(close)
        return None, cluster
    checkpoints = _checkpoints(config)
    if checkpoints is not None:
        opened.callback(checkpoints.close)
        publisher = build_publisher(config, checkpoints)
        if publisher is not None:
            opened.callback(publisher.close)
    return checkpoints, None


def _open_runner(config: dict, evaluate: bool, model: object, opened: contextlib.ExitStack) -> Runner:
    """The job's runner, learning with ``model`` (None: the configured learner), its outputs opened; an eval's
    reports the exact ROC AUC."""
    runner = build_runner(config, model=model, exact_auc=True if evaluate else None)
    opened.callback(runner.sink.close)
    if runner.dead_letters is not None:
        opened.callback(runner.dead_letters.close)
    return runner


def _resume(config: dict, accept_config: bool = False) -> tuple[dict | None, dict | None]:
    """(state, source position) to resume from: the newest valid checkpoint's; without one, (None,
    None) for a new learner (files from the start, Kafka at its group's committed offsets, else
    ``source.start``), or (None, from the beginning) when checkpoints exist but none is usable (the
    model that learned what the group committed is lost). A checkpoint written with another
    configuration is refused (a ConfigError) unless ``accept_config``; its position applies only to
    the input it was taken from (`inputs.resume_position`). A checkpoint whose runner state or position a
    run could not take up (`check_resumable`), or not signed with ``checkpoint.key_file``/``key_env``'s key
    when one is set, is skipped as a corrupt one is."""
    directory = config["checkpoint"]["dir"]
    if not directory:
        raise ConfigError("--resume needs checkpoint.dir in the configuration")
    section = config["checkpoint"]
    found = latest_valid(directory, key=checkpoint_key(section["key_file"], section["key_env"]), check=check_resumable)
    if found is None:
        lost = bool(checkpoint_files(directory))
        if lost or config["source"]["type"] != "kafka":
            _log.info("no checkpoint in %s: starting from the beginning", directory)
        else:
            _log.info(
                "no checkpoint in %s: starting at the consumer group's committed offsets (source.start where none)",
                directory,
            )
        return None, {"from_beginning": True} if lost else None
    path, state, manifest = found
    if not written_for(manifest, config):
        if not accept_config:
            raise ConfigError(
                f"{path} was written with another configuration; "
                "resume with --accept-config to continue its model and state under this one"
            )
        _log.warning("warning: %s was written with another configuration", path)
    position = resume_position(config, manifest, path)
    _log.info("resuming from %s (t=%s, %s events)", path, state["model"].t, manifest["events"])
    return state, position


def _checkpoints(config: dict) -> Checkpoints | None:
    """The run's checkpoints (``build_checkpoints``); a StartupError when the directory cannot be
    created, locked or written."""
    try:
        return build_checkpoints(config)
    except OSError as error:
        raise checkpoint_directory_error(config["checkpoint"]["dir"], error) from None
