"""Settings with Kafka's names, shared by every configurable part of tierproxy.

A config file is TOML whose keys are Kafka-style dotted names, written as plain TOML::

    remote.log.reader.threads = 5
    remote.log.storage.s3.bucket = "tiered"

TOML turns dotted keys into nested tables; :func:`flatten` turns them back into the dotted
names, so the file reads like Kafka's ``server.properties``. Each configurable part declares a
frozen dataclass whose fields carry their dotted key, documentation and Kafka equivalent through
:func:`setting`; :func:`from_settings` builds it from the flat mapping and :func:`describe` lists
the fields for the generated configuration reference.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

_KEY = "tierproxy.key"
_DOC = "tierproxy.doc"
_KAFKA = "tierproxy.kafka"


class ConfigError(ValueError):
    """A setting is unknown, has the wrong type, or is out of range (the message says which)."""


def setting(
    key: str, default: Any, doc: str, *, kafka: str | None = None, secret: bool = False
) -> Any:
    """Declare a dataclass field for the setting ``key``.

    :param kafka: the Kafka broker/topic setting this mirrors, when it differs from ``key`` or
        when ``key`` is Kafka's own name (pass ``kafka=key``); ``None`` for tierproxy-only knobs.
    :param secret: a password or key: left out of the dataclass's ``repr``, so that logging a
        config object never prints it.
    """
    metadata = {_KEY: key, _DOC: doc, _KAFKA: kafka}
    if isinstance(default, (list, dict, set)):
        raise TypeError("mutable defaults are not allowed in settings; use a tuple")
    return dataclasses.field(default=default, metadata=metadata, repr=not secret)


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Turn nested TOML tables back into ``{"dotted.key": value}``.

    Arrays of tables (``[[topics]]``) are kept as lists of flattened mappings.
    """
    flat: dict[str, Any] = {}
    for name, value in table.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{key}."))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            flat[key] = [flatten(v) for v in value]
        else:
            flat[key] = value
    return flat


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SettingInfo:
    """One documented setting, for ``--help`` texts and the configuration reference."""

    key: str
    default: Any
    doc: str
    kafka: str | None
    type_name: str


def describe(config_class: type[Any]) -> Iterator[SettingInfo]:
    """The settings a config dataclass declares, in field order."""
    for field in dataclasses.fields(config_class):
        if _KEY not in field.metadata:
            continue
        yield SettingInfo(
            key=field.metadata[_KEY],
            default=field.default,
            doc=field.metadata[_DOC],
            kafka=field.metadata[_KAFKA],
            type_name=str(field.type),
        )


def keys_of(config_classes: Iterable[type[Any]]) -> set[str]:
    """Every dotted key the given config classes understand."""
    return {info.key for cls in config_classes for info in describe(cls)}


def from_settings(config_class: type[T], flat: Mapping[str, Any]) -> T:
    """Build ``config_class`` from a flat ``{"dotted.key": value}`` mapping.

    Keys the class does not declare are ignored here (other parts read them); use
    :func:`check_unknown` once with every part's class to reject typos.

    :raises ConfigError: when a value has the wrong type.
    """
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(config_class):  # type: ignore[arg-type]
        key = field.metadata.get(_KEY)
        if key is None or key not in flat:
            continue
        kwargs[field.name] = _coerce(key, flat[key], field.default)
    return config_class(**kwargs)


def check_unknown(flat: Mapping[str, Any], config_classes: Iterable[type[Any]]) -> None:
    """Reject settings no part understands, naming the closest known key.

    :raises ConfigError: for the first unknown key.
    """
    known = keys_of(config_classes)
    for key in flat:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown setting {key!r}{hint}")


def read_settings(
    path: Path | None,
    overrides: Mapping[str, Any],
    accepted: Iterable[type[Any]] | None,
) -> dict[str, Any]:
    """The flat settings of a config file (none without ``path``) with ``overrides`` on top;
    the proxy's commands and the tiering job read the same file through here.

    :param accepted: the settings classes whose keys may appear, to reject any other key;
        ``None`` leaves unknown keys unchecked.
    :raises ConfigError: for an unreadable file or an unknown key.
    """
    flat: dict[str, Any] = {}
    if path is not None:
        try:
            flat = flatten(tomllib.loads(path.read_text(encoding="utf-8")))
        except (OSError, tomllib.TOMLDecodeError) as err:
            raise ConfigError(f"cannot read config file {path}: {err}") from err
    flat.update(overrides)
    if accepted is not None:
        check_unknown(flat, accepted)
    return flat


def _coerce(key: str, value: Any, default: Any) -> Any:
    if isinstance(value, bool) and not isinstance(default, bool) and default is not None:
        # TOML's true is a Python int: ``segment.bytes = true`` must not mean 1.
        raise ConfigError(f"{key} must be of type {type(default).__name__}, not {value!r}")
    if default is None or isinstance(value, type(default)):
        return value
    if isinstance(default, bool):
        raise ConfigError(f"{key} must be true or false, not {value!r}")
    if isinstance(default, float) and isinstance(value, int):
        return float(value)
    if isinstance(default, tuple) and isinstance(value, list):
        return tuple(value)
    raise ConfigError(f"{key} must be of type {type(default).__name__}, not {value!r}")
