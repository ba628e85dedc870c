"""Everything one ``tierproxy.toml`` holds, read and checked once, alike for every command.

``tierproxy serve``, ``tier``, ``status`` and ``demo`` share one file: each reads it through
:func:`load_settings`, which checks all of it before anything connects — unknown keys (with
the closest known key), values of the wrong type, each part's ranges and cross-key rules,
the ``[[topics]]`` and ``[[broker.map]]`` tables, and the secrets named by file (the
upstream password, remote storage's encryption keys) — and raises one
:class:`~storage.config.ConfigProblems` that lists every problem found. What it returns is a
frozen :class:`Settings` of the parts' own config classes; each command hands each part the
one it needs.

A new part of the file is one more field of :class:`Settings`: a frozen config class whose
fields are :func:`storage.config.setting` calls. Its keys are then accepted, checked and
listed in the generated reference (``python -m proxy.config_reference``).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from proxy.config import ProxyConfig
from proxy.identities import ClientPrincipalConfig
from proxy.remote.config import RemoteFetchConfig
from storage.config import Problems, flatten, parse_toml
from storage.index_cache import IndexCacheConfig
from storage.kafka_security import KafkaSecurityConfig
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rsm.config import RemoteStorageConfig
from storage.rsm.factory import key_ring
from storage.tiering.config import TieringConfig
from storage.tiering.policy import TopicPolicy, TopicRules, compile_rules

__all__ = [
    "ACCEPTED_CONFIG_CLASSES",
    "SERVE_CONFIG_CLASSES",
    "Settings",
    "load_settings",
    "settings_from_flat",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """A checked config file, as each part's own settings."""

    proxy: ProxyConfig
    security: KafkaSecurityConfig
    """How tierproxy's own connections log in, with its secrets resolved (once, here)."""
    remote: RemoteFetchConfig
    storage: RemoteStorageConfig
    metadata: RemoteLogMetadataConfig
    index_cache: IndexCacheConfig
    principals: ClientPrincipalConfig
    """How the proxy names its clients' principals, for its own quotas."""
    tiering: TieringConfig
    rules: TopicRules
    """The per-topic tiering policy: top-level defaults and ``[[topics]]`` tables."""


_PARTS: Final[dict[str, type[Any]]] = {
    name: kind
    for name, kind in typing.get_type_hints(Settings).items()
    if name != "rules" and isinstance(kind, type) and dataclasses.is_dataclass(kind)
}
"""Each field of :class:`Settings` built from the file by its config class."""

ACCEPTED_CONFIG_CLASSES: Final[tuple[type[Any], ...]] = (*_PARTS.values(), TopicPolicy)
"""Every settings class whose keys the file may hold: a key none declares is a typo."""

SERVE_CONFIG_CLASSES: Final[tuple[type[Any], ...]] = (
    ProxyConfig,
    KafkaSecurityConfig,
    RemoteFetchConfig,
    RemoteStorageConfig,
    RemoteLogMetadataConfig,
    IndexCacheConfig,
    ClientPrincipalConfig,
)
"""The settings ``tierproxy serve`` acts on (listed in its ``--help``)."""


def load_settings(path: Path | None, overrides: Mapping[str, Any] | None = None) -> Settings:
    """Read and check the config file (none: every default) with ``overrides`` (command-line
    flags, by key) on top.

    :raises ConfigError: for a file that cannot be read or parsed (its line, key and the
        form expected), or :class:`~storage.config.ConfigProblems` listing every problem.
    """
    return settings_from_flat(load_flat(path, overrides))


def load_flat(path: Path | None, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The file's settings by dotted key, with ``overrides`` on top, not yet checked beyond
    TOML (what :func:`settings_from_flat` takes, e.g. to pass on to another process).

    :raises ConfigError: for a file that cannot be read or parsed.
    """
    flat = {} if path is None else flatten(parse_toml(path, ACCEPTED_CONFIG_CLASSES))
    flat.update(overrides or {})
    return flat


def settings_from_flat(flat: Mapping[str, Any], *, resolve_secrets: bool = True) -> Settings:
    """Check ``flat`` whole and build :class:`Settings` from it.

    :param resolve_secrets: read the upstream password from its file or the environment
        now, and load remote storage's encryption keys (the active key among them), so that
        one that cannot be read is listed with the other problems; ``False`` checks the
        settings alone (a file written for another machine).
    :raises ConfigProblems: listing every problem: unknown keys, wrong types, values out of
        range, tables that are not right, secrets that cannot be read.
    """
    problems = Problems()
    problems.unknown(flat, ACCEPTED_CONFIG_CLASSES)
    parts: dict[str, Any] = {name: problems.build(kind, flat) for name, kind in _PARTS.items()}
    parts["rules"] = problems.attempt(compile_rules, flat)
    if resolve_secrets and parts["security"] is not None:
        parts["security"] = problems.attempt(parts["security"].with_secrets_resolved)
    if resolve_secrets and parts["storage"] is not None:
        problems.attempt(key_ring, parts["storage"])
    problems.raise_if_any()
    return Settings(**parts)
