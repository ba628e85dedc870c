"""``tierproxy serve``: run the proxy in front of a broker until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from proxy.config import ProxyConfig
from proxy.logs import configure
from proxy.settings import SERVE_CONFIG_CLASSES, Settings, load_flat, settings_from_flat
from proxy.workers.cores import available_cores
from proxy.workers.role import WorkerRole
from storage.config import ConfigError, describe, toml_value

__all__ = ["register", "run", "serve_process", "worker_count"]

_DESCRIPTION = """\
Run the wire-compatible Kafka proxy. Clients bootstrap to the proxy's address; every broker
of the cluster gets its own proxy port (the listener's port + the broker's index, or the
[[broker.map]] entries of the config file), and every response that names brokers is
rewritten so that clients only ever connect through the proxy. Everything else passes
through byte for byte, SASL included.

Settings come from the TOML file given with --config (Kafka-style dotted names, listed
below as TOML lines with their defaults); the flags override the file. The whole file is
checked before anything connects, as tier and status check it: every problem is listed and
serve exits 2."""


def register(parser: argparse.ArgumentParser) -> None:
    """Make ``parser`` the ``serve`` subcommand's."""
    parser.description = _DESCRIPTION
    parser.epilog = _settings_epilog(SERVE_CONFIG_CLASSES)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="TOML file of settings (Kafka's names, below)"
    )
    parser.add_argument(
        "--bootstrap",
        metavar="HOST:PORT[,...]",
        help="the broker(s) to front (bootstrap.servers)",
    )
    parser.add_argument(
        "--listen",
        metavar="[SCHEME://]HOST:PORT",
        help="client-facing address; the port is the base port, broker i gets port + i; "
        "port 0 gives every broker a free port (listeners)",
    )
    parser.add_argument(
        "--advertised-host",
        metavar="HOST",
        help="host name clients are told to connect to (advertised.listeners)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics on this port, 0 = off (metrics.port)",
    )
    parser.add_argument(
        "--metrics-host",
        metavar="HOST",
        help="address the metrics and health endpoint binds to (metrics.host)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="worker processes sharing the listeners, 0 = one per core (workers)",
    )
    parser.add_argument(
        "--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="(log.level)"
    )
    parser.add_argument(
        "--log-format", choices=("logfmt", "json"), help="one event per line (log.format)"
    )
    parser.set_defaults(handler=run)


def _settings_epilog(config_classes: Sequence[type[Any]]) -> str:
    lines = ["settings (TOML lines with their defaults, to paste into the --config file):"]
    keys = {info.key for config_class in config_classes for info in describe(config_class)}
    for config_class in config_classes:
        summary = (config_class.__doc__ or config_class.__name__).strip().splitlines()[0]
        lines.append(f"\n  # {summary}")
        for info in describe(config_class):
            # TOML cannot hold ``listeners`` and ``listeners.allow.cidrs`` as dotted keys.
            extends = any(info.key.startswith(f"{key}.") for key in keys)
            key = f'"{info.key}"' if extends else info.key
            lines.append(f"  {_toml_line(key, info.default)}")
            lines.extend(
                textwrap.wrap(info.doc, 88, initial_indent=" " * 6, subsequent_indent=" " * 6)
            )
    return "\n".join(lines)


_NO_LIMIT = 2**63 - 1
"""The default of the byte-rate caps: Kafka's Long.MAX_VALUE, no cap."""


def _toml_line(key: str, default: Any) -> str:
    """``key = default`` as TOML writes it; a key unset by default is a comment."""
    value = toml_value(default)
    if value is None:
        return f"# {key} = ...   (unset by default)"
    if value == str(_NO_LIMIT):
        return f"{key} = {value}   # no limit"
    return f"{key} = {value}"


def _overrides(args: argparse.Namespace, base: Mapping[str, Any]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    if args.bootstrap:
        overrides["bootstrap.servers"] = args.bootstrap
    if args.listen:
        overrides["listeners"] = args.listen
    if args.advertised_host:
        # Keep an advertised base port from the file; replace only the host.
        current = str(base.get("advertised.listeners", "")).split("://")[-1]
        port = current.rsplit(":", 1)[1] if current.count(":") == 1 else ""
        overrides["advertised.listeners"] = (
            f"{args.advertised_host}:{port}" if port else args.advertised_host
        )
    if args.metrics_port is not None:
        overrides["metrics.port"] = args.metrics_port
    if args.metrics_host:
        overrides["metrics.host"] = args.metrics_host
    if args.workers is not None:
        overrides["workers"] = args.workers
    if args.log_level:
        overrides["log.level"] = args.log_level
    if args.log_format:
        overrides["log.format"] = args.log_format
    return overrides


def _freeze_imports() -> None:
    """Move everything alive before serving (the modules, kio's thousands of classes) to
    the collector's permanent generation. Serving allocates short-lived containers per
    request and response, and every full collection would walk all of that again. Objects
    made later are collected as before."""
    gc.collect()
    gc.freeze()


def run(args: argparse.Namespace) -> int:
    """Handler of ``tierproxy serve``: load and check the settings, then serve until a signal,
    in this process (one worker) or as the supervisor of several (:mod:`proxy.workers`).

    Returns 2 for invalid settings (every problem of the file listed, before anything
    connects), an address that cannot be bound (a client listener, the metrics port), or a
    login or metadata topic the cluster refuses (a missing ACL, another partition count), 1
    when the remote tier's metadata topic could not be read within
    ``remote.log.metadata.initialization.timeout.ms`` (a cluster that is not up yet is
    waited for), 0 after a graceful shutdown. Each failure is said on stderr: one line, or
    one per problem of the settings.
    """
    # The serving path is imported only to serve: --help needs the settings alone.
    import uvloop  # noqa: PLC0415

    from proxy.health_endpoint import EndpointError  # noqa: PLC0415
    from proxy.listeners import ListenerError  # noqa: PLC0415
    from proxy.workers.supervisor import Supervisor, check_addresses_free  # noqa: PLC0415

    try:
        from_file = load_flat(args.config)
        flat = {**from_file, **_overrides(args, from_file)}
        settings = settings_from_flat(flat)
        workers = worker_count(settings.proxy)
        if workers > 1:
            check_addresses_free(settings.proxy)
    except (ConfigError, ListenerError) as err:
        print(f"tierproxy serve: {err}", file=sys.stderr)
        return 2
    if workers == 1:
        return serve_process(settings)
    configure(settings.proxy.log_level, settings.proxy.log_format)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        try:
            return runner.run(Supervisor(settings.proxy, flat, count=workers).run())
        except (ConfigError, EndpointError) as err:
            print(f"tierproxy serve: {err}", file=sys.stderr)
            return 2


def worker_count(config: ProxyConfig) -> int:
    """How many workers ``serve`` runs: ``workers``, or one per core when it is 0.

    A listener on port 0 (any free port) cannot be shared: with ``workers`` at 0 it gets
    one worker, and with more than one it is refused.

    :raises ConfigError: for several workers and a port-0 listener.
    """
    ports = [config.listener.address.port, *(e.listener.port for e in config.explicit_brokers())]
    if 0 in ports:
        if config.workers > 1:
            raise ConfigError(
                "workers > 1 share their listeners' ports: a listener on port 0 (any free "
                "port) needs workers = 1"
            )
        return 1
    return config.workers or available_cores()


def serve_process(settings: Settings, *, worker: WorkerRole | None = None) -> int:
    """Serve in this process until a signal (alone, or as one ``worker``); the exit code
    as :func:`run` says."""
    configure(
        settings.proxy.log_level,
        settings.proxy.log_format,
        None if worker is None else {"worker": worker.index},
    )
    import uvloop  # noqa: PLC0415

    from proxy.app import serve  # noqa: PLC0415
    from proxy.health_endpoint import EndpointError  # noqa: PLC0415
    from proxy.listeners import ListenerError  # noqa: PLC0415
    from storage.rlmm.topic_setup import MetadataTopicError  # noqa: PLC0415

    _freeze_imports()
    loop_factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        try:
            runner.run(serve(settings, worker=worker))
        except (ConfigError, EndpointError, ListenerError, MetadataTopicError) as err:  # at start
            print(f"tierproxy serve: {err}", file=sys.stderr)
            return 2
        except TimeoutError as err:  # the metadata topic was not read in time
            print(f"tierproxy serve: {err}", file=sys.stderr)
            return 1
    return 0
