"""``tierproxy tier`` as a Spark application: settings, the SparkSession, the cycle loop.

``tierproxy tier --config tierproxy.toml`` runs it in-process on ``local[*]``; ``--master``
picks another Spark master. To run the driver on a Spark cluster, submit this file
(see :mod:`storage.tiering` for the full spark-submit recipe)::

    spark-submit --master spark://spark-master:7077 --py-files tierproxy.zip \\
        storage/tiering/job.py --config tierproxy.toml

Under spark-submit the master comes from spark-submit itself; ``--master`` is only for
in-process runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from rich.console import Console

from storage.config import ConfigError, Problems, read_settings
from storage.console import report_console
from storage.kafka_acls import denied, principal_of
from storage.kafka_client import KafkaClient, KafkaClientError
from storage.kafka_client.leaders import TopicAuthorizationError
from storage.kafka_client.transactional import TransactionalIdAuthorizationError
from storage.kafka_security import KafkaSecurityConfig
from storage.log_event import event
from storage.log_format import (
    FORMAT_VARIABLE,
    LEVEL_VARIABLE,
    configure,
    configure_from_environment,
)
from storage.retry_log import RetryLog, log_failure, log_recovery
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rsm.config import RemoteStorageConfig
from storage.startup import cluster_answers_within
from storage.tiering.arguments import add_arguments
from storage.tiering.config import TIERING_CONFIG_CLASSES, TieringConfig
from storage.tiering.jvm_stderr import stderr_without
from storage.tiering.lease import Hold, NotHoldingError, PipelineLease, UnfencedLease
from storage.tiering.metrics import TieringMetrics, TieringMetricsServer
from storage.tiering.pipeline import MetadataManager, TieringPipeline, wall_clock_ms
from storage.tiering.policy import TopicRules, compile_rules
from storage.tiering.report import CycleReport, failures_table, log_report, summary_table
from storage.tiering.spill import discard_spill_pool
from storage.tiering.stages import SparkStageRunner
from storage.tiering.worker import StorageFactory

__all__ = [
    "TIERING_CONFIG_CLASSES",
    "TieringSettings",
    "build_spark",
    "load_tiering_settings",
    "main",
    "open_pipeline",
    "run_tiering",
]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_LOG4J_CONFIGS: Final = {
    "logfmt": Path(__file__).with_name("log4j2.properties"),
    "json": Path(__file__).with_name("log4j2-json.properties"),
}
"""Spark's JVM logs at WARN on stderr, without its default profile's start-up banners, one
line each in the pipeline's ``log.format`` (logfmt unless configured)."""

_ERROR_BACKOFF_SECONDS = 5.0

ONCE_CLUSTER_WAIT_S: Final = 10.0
"""How long ``tier --once`` (a job, a cron entry) waits for a broker to answer before it
starts Spark: a cluster that is down fails the job within seconds, in one line."""

_CLUSTER_UNAVAILABLE: Final = (KafkaClientError, TimeoutError, NotHoldingError)
"""How a cluster that is down or not answering surfaces (the product's client, which the
metadata manager shares, or a bounded wait): an operator's matter, one line each. Any other
error in a cycle is a bug and is logged with its traceback. A pipeline that does not (or no
longer) hold the cluster's tiering is one line too."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TieringSettings:
    """Everything the pipeline reads from the config file."""

    tiering: TieringConfig
    rules: TopicRules
    storage: RemoteStorageConfig
    metadata: RemoteLogMetadataConfig
    security: KafkaSecurityConfig
    """How every connection to the cluster logs in (secrets are resolved by
    :func:`open_pipeline`, on the driver, and reach the executors with the tasks)."""


def settings_from_flat(flat: Mapping[str, Any]) -> TieringSettings:
    """Build the pipeline's settings from a flattened config mapping.

    :raises ConfigError: for wrong types or invalid values, all of them
        (:class:`~storage.config.ConfigProblems`).
    """
    problems = Problems()
    parts: dict[str, Any] = {
        "tiering": problems.build(TieringConfig, flat),
        "rules": problems.attempt(compile_rules, flat),
        "storage": problems.build(RemoteStorageConfig, flat),
        "metadata": problems.build(RemoteLogMetadataConfig, flat),
        "security": problems.build(KafkaSecurityConfig, flat),
    }
    problems.raise_if_any()
    return TieringSettings(**parts)


def load_tiering_settings(
    path: Path | None,
    overrides: dict[str, Any] | None = None,
    *,
    accepted: Sequence[type[Any]] | None = None,
) -> TieringSettings:
    """Read the TOML config file.

    :param accepted: every settings class whose keys may appear in the file, to reject any
        other key (a typo would otherwise leave a setting at its default without a word).
        ``tierproxy tier`` checks the whole file through :mod:`proxy.settings` instead;
        storage cannot know the proxy's keys, so ``None`` (spark-submit) leaves keys the
        pipeline does not read unchecked.
    :raises ConfigError: for an unreadable file, an unknown key or an invalid setting.
    """
    return settings_from_flat(read_settings(path, overrides or {}, accepted))


_JIT_OPTIONS = "-XX:TieredStopAtLevel=1"
"""The JVM compiles with C1 only. The pipeline's JVM schedules tasks and passes small
descriptors and results to the Python workers; the bytes never cross it, so C2's
optimisations cost more than they can save here, on every new JVM and for minutes after
(figures: ``docs/decisions/0011-spark-workers-tasks-and-reads.md``)."""
_SPARK_DAEMON: Final = "storage.tiering.spark_daemon"
"""PySpark's daemon with the task modules imported before it forks workers (see there)."""


def build_spark(master: str | None, *, app_name: str = "tierproxy-tiering") -> Any:
    """A SparkSession for the pipeline (``master=None``: whatever spark-submit set).

    Local executors run this interpreter, so they see the same packages; every executor's
    Python workers log in this process's ``log.format`` (:func:`.spark_daemon.main`). Speculative
    execution is off (``spark.speculation=false``) over any setting of the user's; a session
    that already exists with it on is refused when the pipeline opens
    (:class:`.stages.SparkStageRunner`).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession  # noqa: PLC0415 (PySpark only when tiering runs)

    logging.getLogger("py4j").setLevel(logging.WARNING)  # "Closing down clientserver ..."
    where = master or "spark-submit's master"
    event(
        log,
        logging.INFO,
        "tiering.spark.starting",
        msg=f"starting Spark on {where} (its JVM takes a few seconds)",
        master=where,
    )
    log4j = _LOG4J_CONFIGS.get(os.environ.get(FORMAT_VARIABLE, ""), _LOG4J_CONFIGS["logfmt"])
    java_options = f"-Dlog4j2.configurationFile={log4j} {_JIT_OPTIONS}"
    builder = (
        SparkSession.builder.appName(app_name)
        # Never two attempts of a copy task at once, whatever spark-defaults.conf or
        # --conf say: the losing one would announce and upload copies nobody finishes.
        .config("spark.speculation", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.executor.extraJavaOptions", java_options)
        .config("spark.python.daemon.module", _SPARK_DAEMON)
    )
    for variable in (LEVEL_VARIABLE, FORMAT_VARIABLE):
        if variable in os.environ:
            builder = builder.config(f"spark.executorEnv.{variable}", os.environ[variable])
    if master is not None:
        builder = builder.master(master)
    with stderr_without(b"Using incubator modules"):
        spark = builder.getOrCreate()
    ui = spark.sparkContext.uiWebUrl
    event(
        log,
        logging.INFO,
        "tiering.spark.started",
        msg=f"Spark {spark.version} on {spark.sparkContext.master}" + (f", UI {ui}" if ui else ""),
        master=spark.sparkContext.master,
    )
    return spark


@contextlib.asynccontextmanager
async def open_pipeline(
    settings: TieringSettings,
    spark: Any,
    *,
    console: Console | None = None,
    task_storage_factory: StorageFactory | None = None,
    rlmm: MetadataManager | None = None,
    clock: Callable[[], int] = wall_clock_ms,
    wait_for_cluster: bool = False,
    patience: float | None = None,
) -> AsyncIterator[TieringPipeline]:
    """A ready :class:`TieringPipeline` with its clients, holding the cluster's tiering
    (:mod:`.lease`), released and closed on exit.

    :param task_storage_factory: how copy tasks build their remote storage manager (a seam
        for storage plugins and fault injection); the driver always uses the configured one.
    :param rlmm: a metadata manager to share; by default one is started and closed here
        (a shared one writes with its own producer: the pipeline is then not fenced).
    :param wait_for_cluster: wait for a cluster that is not up for as long as it takes
        (the loop), rather than up to ``remote.log.metadata.initialization.timeout.ms``.
    :param patience: how long to wait while another pipeline holds the cluster's tiering
        (``None``: as long as it takes).
    :raises TimeoutError: no broker answered, or the metadata topic was not read, within
        ``remote.log.metadata.initialization.timeout.ms``.
    :raises NotHoldingError: another pipeline still held it after ``patience`` seconds.
    :raises ConfigError: the principal may not use the transactional id, or
        ``transaction.timeout.ms`` is above the broker's maximum.
    """
    from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager  # noqa: PLC0415
    from storage.rsm.factory import create_remote_storage, storage_identity  # noqa: PLC0415
    from storage.startup import announce_remote_tier, check_cluster_login  # noqa: PLC0415

    config = settings.tiering
    security = settings.security.with_secrets_resolved()  # once: its file is read here only
    client = KafkaClient(
        config.bootstrap_servers,
        client_id=config.client_id,
        request_timeout_ms=config.request_timeout_ms,
        security=security,
    )
    hold_client = KafkaClient(
        config.bootstrap_servers,
        client_id=f"{config.client_id}-hold",
        request_timeout_ms=config.request_timeout_ms,
        security=security,
    )
    fencing_id = config.fencing_id(settings.metadata.topic_name)
    hold: Hold
    if rlmm is not None or not fencing_id:
        hold = UnfencedLease(
            "transactional.id is empty" if not fencing_id else "a metadata manager was shared"
        )
    else:
        hold = PipelineLease(
            hold_client,
            transactional_id=fencing_id,
            topic=settings.metadata.topic_name,
            transaction_timeout_ms=config.transaction_timeout_ms,
            request_timeout_ms=config.request_timeout_ms,
        )
    owned_rlmm = None
    rsm = None
    try:
        if rlmm is None:
            await announce_remote_tier(settings.storage, settings.metadata, command="tier", log=log)
            await check_cluster_login(config.bootstrap_servers, security, log=log)
            owned_rlmm = TopicBasedRemoteLogMetadataManager(
                settings.metadata,
                bootstrap_servers=config.bootstrap_servers,
                security=security,
                command="tier",
                storage_identity=storage_identity(settings.storage),
                writer=hold if isinstance(hold, PipelineLease) else None,
            )
            await owned_rlmm.start(wait_for_cluster=wait_for_cluster)
            rlmm = owned_rlmm
        rsm = create_remote_storage(settings.storage)
        pipeline = TieringPipeline(
            config=config,
            rules=settings.rules,
            storage=settings.storage,
            client=client,
            rlmm=rlmm,
            rsm=rsm,
            runner=SparkStageRunner(spark, console=console),
            metadata_topic=settings.metadata.topic_name,
            security=security,
            storage_factory=task_storage_factory,
            clock=clock,
            hold=hold,
        )
        await _take_hold(pipeline, fencing_id, security, patience)
        yield pipeline
    finally:
        if not config.spill_dir:  # the default under the system temp directory
            discard_spill_pool(config.spill_root)
        await hold.release()
        await hold_client.close()
        if rsm is not None:
            await rsm.close()
        await client.close()
        if owned_rlmm is not None:
            await owned_rlmm.close()


async def _take_hold(
    pipeline: TieringPipeline,
    fencing_id: str,
    security: KafkaSecurityConfig,
    patience: float | None,
) -> None:
    """Hold the cluster's tiering before the first cycle.

    :raises NotHoldingError: another pipeline still holds it after ``patience`` seconds.
    :raises ConfigError: the transactional id or the metadata topic cannot be used (ACLs,
        timeout).
    """
    try:
        held = await pipeline.take_hold(patience=patience)
    except TopicAuthorizationError as err:
        raise ConfigError(denied(err.request, err.topic, principal_of(security))) from err
    except TransactionalIdAuthorizationError as err:
        raise ConfigError(
            f"{principal_of(security)} lacks WRITE on TransactionalId {fencing_id!r} "
            f"({err.request} answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED); add that ACL "
            "(docs/operations.md lists what the pipeline needs)"
        ) from err
    except KafkaClientError as err:
        if "INVALID_TRANSACTION_TIMEOUT" in str(err):
            raise ConfigError(
                "transaction.timeout.ms is above the broker's transaction.max.timeout.ms "
                f"({err}); lower it"
            ) from err
        raise
    if not held:
        raise NotHoldingError(
            f"another pipeline holds transactional id {fencing_id!r} (the cluster's tiering); "
            "it was not released in time"
        )


async def run_tiering(
    settings: TieringSettings,
    spark: Any,
    *,
    once: bool,
    console: Console,
    stop: asyncio.Event | None = None,
    metrics: TieringMetrics | None = None,
) -> int:
    """Run one cycle (``once``) or cycles every ``remote.log.manager.task.interval.ms`` until
    ``stop`` is set; the exit code (1 if the last cycle had errors).

    The loop waits for a cluster that is not up for as long as it takes, so ``stop`` also
    ends that wait (a cycle under way is let finish). Every cycle is recorded in ``metrics``;
    failed cycles are logged with back-off (:class:`~storage.retry_log.RetryLog`), and the
    first good cycle after them says so (``tiering.cycle.recovered``).
    """
    stop = stop or asyncio.Event()
    interval = settings.tiering.task_interval_ms / 1000
    metrics = metrics or TieringMetrics(task_interval_s=interval)
    failures = RetryLog()
    async with contextlib.AsyncExitStack() as stack:
        pipeline = await _opened(stack, settings, spark, console=console, once=once, stop=stop)
        if pipeline is None:
            event(
                log,
                logging.INFO,
                "tiering.stopped_waiting",
                msg="stopped while waiting for the cluster",
            )
            return 0
        metrics.watch_holding(lambda: pipeline.holding)
        while True:
            if not pipeline.holding and not await _hold_again(pipeline, stop, failures):
                return 0
            try:
                report = await pipeline.run_cycle()
            except NotHoldingError as err:
                if once:
                    raise
                event(
                    log,
                    logging.WARNING,
                    "tiering.cycle.stopped",
                    msg=f"tiering cycle stopped: {err}",
                )
                continue
            except Exception as err:
                metrics.cycle_failed()
                if once:
                    raise
                _log_failed_cycle(err, failures)
                await _sleep_or_stop(stop, _ERROR_BACKOFF_SECONDS)
                continue
            metrics.cycle_ran(report)
            log_recovery(failures, log, "tiering.cycle.recovered", "tiering cycle")
            _show(report, console)
            if once:
                return 1 if report.failures else 0
            if await _sleep_or_stop(stop, interval):
                return 0


async def _opened(
    stack: contextlib.AsyncExitStack,
    settings: TieringSettings,
    spark: Any,
    *,
    console: Console,
    once: bool,
    stop: asyncio.Event,
) -> TieringPipeline | None:
    """The pipeline opened on ``stack`` (``None``: stopped first). Without ``once``, a
    cluster that answered and went away again while the pipeline opened is waited for again.
    """
    failures = RetryLog()
    while True:
        opening = stack.enter_async_context(
            open_pipeline(
                settings,
                spark,
                console=console,
                wait_for_cluster=not once,
                # --once (a cron entry) waits out a holder that just stopped, not a live one.
                patience=2 * settings.tiering.transaction_timeout_ms / 1000 if once else None,
            )
        )
        try:
            pipeline = await _unless_stopped(opening, stop)
        except _CLUSTER_UNAVAILABLE as err:
            if once:
                raise
            log_failure(
                failures,
                log,
                "tiering.open.failed",
                err,
                lambda err, attempt: (
                    f"opening the pipeline failed: {err}; next attempt in "
                    f"{_ERROR_BACKOFF_SECONDS:.0f} s (attempt {attempt})"
                ),
                level=logging.ERROR,
            )
            if await _sleep_or_stop(stop, _ERROR_BACKOFF_SECONDS):
                return None
            continue
        log_recovery(failures, log, "tiering.open.recovered", "opening the pipeline")
        return pipeline


async def _hold_again(pipeline: TieringPipeline, stop: asyncio.Event, failures: RetryLog) -> bool:
    """Wait until the pipeline holds the cluster's tiering again; ``False`` if stopped."""
    while True:
        try:
            return await pipeline.take_hold(stop=stop)
        except _CLUSTER_UNAVAILABLE as err:
            _log_failed_cycle(err, failures)
            if await _sleep_or_stop(stop, _ERROR_BACKOFF_SECONDS):
                return False


async def _unless_stopped(opening: Awaitable[_T], stop: asyncio.Event) -> _T | None:
    """What ``opening`` gives, or ``None`` if ``stop`` is set first (``opening`` is then
    cancelled)."""
    task = asyncio.ensure_future(opening)
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return None


def _log_failed_cycle(error: Exception, failures: RetryLog) -> None:
    """Count a failed cycle in ``failures``; log it if due, with the traceback of an error
    that is not the cluster being away."""
    log_failure(
        failures,
        log,
        "tiering.cycle.failed",
        error,
        lambda error, attempt: (
            f"tiering cycle failed: {error}; next attempt in "
            f"{_ERROR_BACKOFF_SECONDS:.0f} s (attempt {attempt})"
        ),
        level=logging.ERROR,
        exc_info=not isinstance(error, _CLUSTER_UNAVAILABLE),
    )


async def _sleep_or_stop(stop: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds``; True if ``stop`` was set meanwhile."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
    return stop.is_set()


def _show(report: CycleReport, console: Console) -> None:
    """The cycle's log lines; the summary table too on a terminal, for a cycle that did
    something (logs and pipes get the lines alone)."""
    log_report(report, log)
    if console.is_terminal and not report.idle:
        console.print(summary_table(report))
        failed = failures_table(report)
        if failed is not None:
            console.print(failed)


def run_from_arguments(
    args: argparse.Namespace,
    *,
    default_master: str | None,
    settings: TieringSettings | None = None,
) -> int:
    """Start Spark and run until done or interrupted (SIGINT/SIGTERM), with ``settings``
    checked by the caller, or else loaded from ``args.config``.

    Returns 2 (before Spark starts) for invalid settings; with ``--once``, 1 (before Spark
    starts) when no broker answers within :data:`ONCE_CLUSTER_WAIT_S` (or the shorter
    ``remote.log.metadata.initialization.timeout.ms``), and 130 (SIGINT) or 143 (SIGTERM)
    when interrupted.
    """
    if not logging.getLogger().handlers and not configure_from_environment():
        configure("INFO", "logfmt")  # under spark-submit: the default log.format
    console = report_console()
    if settings is None:
        try:
            settings = load_tiering_settings(args.config)
        except ConfigError as err:
            # Plain text: the message quotes TOML such as [[topics]], which rich reads as markup.
            print(f"tierproxy tier: {err}", file=sys.stderr)
            return 2
    if args.once:
        try:
            answered = _cluster_answers_for_once(settings)
        except ConfigError as err:
            print(f"tierproxy tier: {err}", file=sys.stderr)
            return 2
        if not answered:
            return 1
    metrics = TieringMetrics(task_interval_s=settings.tiering.task_interval_ms / 1000)
    with contextlib.ExitStack() as stack:
        if not args.once and settings.tiering.metrics_port:
            try:
                server = TieringMetricsServer(
                    metrics, settings.tiering.metrics_host, settings.tiering.metrics_port
                )
            except OSError as err:
                print(
                    "tierproxy tier: cannot serve tiering.metrics.port on "
                    f"{settings.tiering.metrics_host}:{settings.tiering.metrics_port}: {err}",
                    file=sys.stderr,
                )
                return 2
            stack.callback(server.close)
            event(
                log,
                logging.INFO,
                "tiering.metrics.serving",
                msg=f"metrics served at http://{settings.tiering.metrics_host}:{server.port}"
                "/metrics",
                port=server.port,
            )
        return _run_on_spark(args, default_master, settings, console, metrics)


def _cluster_answers_for_once(settings: TieringSettings) -> bool:
    """Whether a broker answers soon; if not, says so in one line on stderr."""
    bootstrap = settings.tiering.bootstrap_servers
    seconds = min(ONCE_CLUSTER_WAIT_S, settings.metadata.initialization_timeout_ms / 1000)
    security = settings.security.with_secrets_resolved()
    if asyncio.run(cluster_answers_within(bootstrap, security, seconds=seconds)):
        return True
    print(
        f"tierproxy tier: no broker at {bootstrap} answered within {seconds:g} s; --once "
        "does not wait for the cluster (without --once, tier waits as long as it takes)",
        file=sys.stderr,
    )
    return False


def _run_on_spark(
    args: argparse.Namespace,
    default_master: str | None,
    settings: TieringSettings,
    console: Console,
    metrics: TieringMetrics,
) -> int:
    # A spinner on a terminal; nothing in pipes and CI logs (rich draws no live display there).
    with console.status(f"starting Spark ({args.master or default_master or 'spark-submit'})"):
        spark = build_spark(args.master or default_master)
    try:
        return asyncio.run(
            _run_with_signals(settings, spark, once=args.once, console=console, metrics=metrics)
        )
    except ConfigError as err:  # found at start-up against the cluster
        print(f"tierproxy tier: {err}", file=sys.stderr)
        return 2
    except _CLUSTER_UNAVAILABLE as err:  # --once only: the loop waits for the cluster
        print(f"tierproxy tier: {err}", file=sys.stderr)
        return 1
    finally:
        spark.stop()


async def _run_with_signals(
    settings: TieringSettings,
    spark: Any,
    *,
    once: bool,
    console: Console,
    metrics: TieringMetrics,
) -> int:
    """Run until done; the first SIGINT or SIGTERM lets the work under way finish (the loop
    then stops), the second aborts it. An interrupted ``--once`` exits 128 + the signal."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    running = asyncio.current_task()
    received: list[signal.Signals] = []

    def interrupted(sig: signal.Signals) -> None:
        if received:
            event(
                log,
                logging.WARNING,
                "tiering.signal.abort",
                msg=f"{sig.name} again: aborting",
                signal=sig.name,
            )
            with contextlib.suppress(Exception):  # a Spark that is stopping already
                spark.sparkContext.cancelAllJobs()
            if running is not None:
                running.cancel()
            return
        received.append(sig)
        what = "interrupted" if sig == signal.SIGINT else "terminated"
        work = "the current copy" if once else "the current cycle, then stopping"
        event(
            log,
            logging.WARNING,
            "tiering.signal.finishing",
            msg=f"{what}: finishing {work} (Ctrl-C again to abort)",
            signal=sig.name,
        )
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, interrupted, sig)
    try:
        code = await run_tiering(
            settings, spark, once=once, console=console, stop=stop, metrics=metrics
        )
    except asyncio.CancelledError:
        if not received:
            raise
        return 128 + received[0]
    return 128 + received[0] if once and received else code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point under spark-submit."""
    parser = argparse.ArgumentParser(prog="tierproxy-tiering", description=__doc__)
    add_arguments(parser)
    return run_from_arguments(parser.parse_args(argv), default_master=None)


if __name__ == "__main__":
    sys.exit(main())
