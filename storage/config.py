"""Settings with Kafka's names, shared by every configurable part of tierproxy.

A config file is TOML whose keys are Kafka-style dotted names, written as plain TOML::

    remote.log.reader.threads = 5
    remote.log.storage.s3.bucket = "tiered"

TOML turns dotted keys into nested tables; :func:`flatten` turns them back into the dotted
names, so the file reads like Kafka's ``server.properties``. Each configurable part declares a
frozen dataclass whose fields carry their dotted key, documentation and Kafka equivalent through
:func:`setting`; :func:`from_settings` builds it from the flat mapping and :func:`describe` lists
the fields for the generated configuration reference.

Every mistake in a file is found at once: :class:`Problems` collects unknown keys (with the
closest known key), values of the wrong type (each named with the TOML form expected) and
each part's own range and cross-key checks, and :class:`ConfigProblems` lists them all. A
file TOML cannot parse is named by line, key and the form expected (:func:`parse_toml`).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

T = TypeVar("T")

_KEY = "tierproxy.key"
_DOC = "tierproxy.doc"
_KAFKA = "tierproxy.kafka"


class ConfigError(ValueError):
    """A setting is unknown, has the wrong type, or is out of range (the message says which)."""


class ConfigProblems(ConfigError):
    """Several problems of one config, each a line of the message (:attr:`problems`)."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        if len(self.problems) == 1:
            super().__init__(self.problems[0])
        else:
            listed = "".join(f"\n  - {problem}" for problem in self.problems)
            super().__init__(f"{len(self.problems)} problems in the settings:{listed}")


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

    :raises ConfigError: when a value has the wrong type (:class:`ConfigProblems`, naming
        every such key of the class), or the class refuses the values.
    """
    kwargs: dict[str, Any] = {}
    wrong: list[str] = []
    for field in dataclasses.fields(config_class):  # type: ignore[arg-type]
        key = field.metadata.get(_KEY)
        if key is None or key not in flat:
            continue
        try:
            kwargs[field.name] = _coerce(key, flat[key], field.default, str(field.type))
        except ConfigError as err:
            wrong.append(str(err))
    if wrong:
        raise ConfigProblems(wrong)
    return config_class(**kwargs)


def unknown_keys(flat: Mapping[str, Any], config_classes: Iterable[type[Any]]) -> list[str]:
    """One line per setting no part understands, naming the closest known key."""
    known = keys_of(config_classes)
    found = []
    for key in flat:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            found.append(f"unknown setting {key!r}{hint}")
    return found


def check_unknown(flat: Mapping[str, Any], config_classes: Iterable[type[Any]]) -> None:
    """Reject settings no part understands, naming the closest known key of each.

    :raises ConfigError: naming every unknown key (:class:`ConfigProblems`).
    """
    found = unknown_keys(flat, config_classes)
    if found:
        raise ConfigProblems(found)


_R = TypeVar("_R")


class Problems:
    """Collects what is wrong with a config, so that one run reports all of it.

    Each part is checked on its own: every key of the wrong type, then the part's own checks
    (its ``__post_init__`` stops at the first that fails, so a part contributes at most one
    range or cross-key problem beside its type problems). :meth:`raise_if_any` ends the
    check.
    """

    def __init__(self) -> None:
        self._found: list[str] = []

    def add(self, problem: str, *, where: str = "") -> None:
        """Note ``problem``, after ``where`` (such as ``[[topics]] entry 2``) if given."""
        self._found.append(f"{where}: {problem}" if where else problem)

    def unknown(
        self, flat: Mapping[str, Any], config_classes: Iterable[type[Any]], *, where: str = ""
    ) -> None:
        """Note every key none of ``config_classes`` declares."""
        for problem in unknown_keys(flat, config_classes):
            self.add(problem, where=where)

    def build(self, config_class: type[T], flat: Mapping[str, Any], *, where: str = "") -> T | None:
        """``config_class`` from ``flat``, or ``None`` with its problems noted."""
        return self.attempt(from_settings, config_class, flat, where=where)

    def attempt(self, check: Callable[..., _R], *args: Any, where: str = "") -> _R | None:
        """What ``check(*args)`` returns, or ``None`` with the problems it raised noted."""
        try:
            return check(*args)
        except ConfigProblems as err:
            for problem in err.problems:
                self.add(problem, where=where)
        except ConfigError as err:
            self.add(str(err), where=where)
        return None

    def raise_if_any(self) -> None:
        """:raises ConfigProblems: listing everything noted, if anything was, each problem
        once (a key that two parts read, such as ``bootstrap.servers``, is noted by both)."""
        if self._found:
            raise ConfigProblems(list(dict.fromkeys(self._found)))


def read_settings(
    path: Path | None,
    overrides: Mapping[str, Any],
    accepted: Iterable[type[Any]] | None,
) -> dict[str, Any]:
    """The flat settings of a config file (none without ``path``) with ``overrides`` on top;
    the proxy's commands and the tiering job read the same file through here.

    :param accepted: the settings classes whose keys may appear, to reject any other key;
        ``None`` leaves unknown keys unchecked.
    :raises ConfigError: for an unreadable file or unknown keys (all of them).
    """
    flat: dict[str, Any] = {}
    if path is not None:
        flat = flatten(parse_toml(path, () if accepted is None else accepted))
    flat.update(overrides)
    if accepted is not None:
        check_unknown(flat, accepted)
    return flat


def parse_toml(path: Path, config_classes: Iterable[type[Any]] = ()) -> dict[str, Any]:
    """The TOML document in ``path``.

    :param config_classes: the settings the file may hold: a value TOML cannot read is
        explained with the type its key takes.
    :raises ConfigError: for a file that cannot be read, or is not TOML: the message names
        the line, the key on it and the form TOML expects there (:func:`toml_mistake`).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err}") from err
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        defaults = {info.key: info for cls in config_classes for info in describe(cls)}
        mistake = toml_mistake(text, err, defaults)
        raise ConfigError(f"cannot read config file {path}: {mistake}") from err


_AT_LINE: Final = re.compile(r"\(at line (\d+), column \d+\)")
_WITH_UNIT: Final = re.compile(r"(?P<number>-?\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z]+)")
_MS_PER_UNIT: Final = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
_MS_PER_UNIT["d"] = 24 * _MS_PER_UNIT["h"]


def toml_mistake(
    text: str, error: tomllib.TOMLDecodeError, settings: Mapping[str, SettingInfo] | None = None
) -> str:
    """What is wrong with ``text``, which TOML refused with ``error``: the line, the key
    assigned on it, and the form a TOML value takes there, e.g. ``line 81:
    remote.fetch.offload.enable = True: TOML booleans are lowercase true or false:
    remote.fetch.offload.enable = true``; with the key's type when ``settings`` (by key)
    has it. Falls back to ``error``'s own words where the line has no ``key = value``."""
    lines = text.splitlines()
    where = _AT_LINE.search(str(error))
    reason = str(error)[: where.start()].strip() if where else str(error).split(" (at ")[0]
    if where is not None:
        number = int(where.group(1))
    elif reason == _OVERWRITE and any(line.strip() for line in lines):
        number = max(n for n, line in enumerate(lines, start=1) if line.strip())
    else:
        return str(error)
    line = lines[number - 1].strip() if 0 < number <= len(lines) else ""
    key, sep, value = line.partition("=")
    key, value = key.strip(), value.split("#", 1)[0].strip()
    if not sep or not key or key.startswith("["):
        return f"line {number}: {line}: {reason}" if line else f"line {number}: {reason}"
    if reason == _OVERWRITE:
        return f"line {number}: {key} = {value}: {_overwritten(key, value, lines[: number - 1])}"
    info = (settings or {}).get(_qualified(key, lines[: number - 1]))
    return f"line {number}: {key} = {value}: {_expected_form(key, value, info)}"


_OVERWRITE: Final = "Cannot overwrite a value"


def _overwritten(key: str, value: str, before: Sequence[str]) -> str:
    """Why TOML refused to set ``key`` again: the earlier line that set it or a key it
    extends (``listeners`` before ``listeners.allow.cidrs``), and how to write both."""
    for number in range(len(before), 0, -1):
        earlier, sep, _ = before[number - 1].partition("=")
        earlier = earlier.strip()
        if not sep or earlier.startswith(("[", "#")):
            continue
        if earlier == key:
            return f"set twice, first on line {number}: keep one"
        if key.startswith(f"{earlier}."):
            return (
                f"TOML cannot hold both {earlier} (line {number}) and a key under it as dotted "
                f'keys: quote the longer one, "{key}" = {value}'
            )
    return "a key TOML already holds (set twice, or as a table): keep one"


def _qualified(key: str, before: Sequence[str]) -> str:
    """``key`` with the name of the ``[table]`` it is in (none in ``[[tables]]``)."""
    for line in reversed(before):
        header = line.strip()
        if header.startswith("[["):
            return key
        if header.startswith("["):
            return f"{header.strip('[]').strip()}.{key}"
    return key


def _expected_form(key: str, value: str, info: SettingInfo | None) -> str:
    """The hint for a value TOML cannot read, for the setting ``info`` if known."""
    word = value.strip("'\"")
    if info is not None and _is_number(info.default):
        kind = _expected(info.key, info.default, info.type_name)
        unit = _unit_hint(info.key, word)
        if unit is not None:
            return f"expected {kind}: {unit}"
        return f"expected {kind}, such as the default: {key} = {info.default}"
    if word.lower() in ("true", "false", "yes", "no", "on", "off"):
        fixed = "true" if word.lower() in ("true", "yes", "on") else "false"
        return f"TOML booleans are lowercase true or false: {key} = {fixed}"
    if word.lower() in ("none", "null", "nil", ""):
        return "TOML has no null: leave the key out to keep its default"
    unit = _unit_hint(key, word)
    if unit is not None:
        return unit
    return f'text is quoted in TOML: {key} = "{word}"'


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _unit_hint(key: str, text: str) -> str | None:
    """The fix for a number written with a unit (``30s``, ``1GB``), or ``None``."""
    unit = _WITH_UNIT.fullmatch(text.strip())
    if unit is None:
        return None
    per_unit = _MS_PER_UNIT.get(unit["unit"].lower())
    if key.endswith(".ms") and per_unit is not None:
        millis = float(unit["number"]) * per_unit
        return f"write milliseconds as a plain integer: {key} = {millis:.0f}"
    return "numbers take no unit in TOML: write a plain integer"


def toml_value(value: Any) -> str | None:
    """``value`` as written in a TOML file; ``None`` for ``None`` (TOML has no null: the key
    is left out)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # JSON's string escapes are TOML's, but for DEL, which TOML wants escaped too.
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(toml_value(item) or '""' for item in value) + "]"
    return str(value)


_KINDS: Final = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _expected(key: str, default: Any, type_name: str) -> str:
    if isinstance(default, tuple):
        return "an array"
    kind = _KINDS.get(type(default), "a string" if "str" in type_name else "a value")
    if kind == "an integer" and key.endswith(".ms"):
        return "an integer (milliseconds)"
    return kind


def _coerce(key: str, value: Any, default: Any, type_name: str) -> Any:
    if _fits(value, default, type_name):
        if isinstance(default, float) and not isinstance(value, float):
            return float(value)
        if isinstance(default, tuple):
            return tuple(value)
        return value
    form = toml_value(value) if not isinstance(value, Mapping) else "a table"
    expected = f"expected {_expected(key, default, type_name)}"
    unit = _unit_hint(key, value) if isinstance(value, str) else None
    example = toml_value(default)
    if unit is not None:
        expected = f"{expected}: {unit}"
    elif example is not None:
        expected = f"{expected}, such as the default: {key} = {example}"
    raise ConfigError(f"{key} = {form}: {expected}")


def _fits(value: Any, default: Any, type_name: str) -> bool:
    """Whether ``value`` (as TOML gives it) is of the setting's type. TOML's true is a
    Python int, so ``segment.bytes = true`` must not mean 1."""
    if default is None:
        return value is None or "str" not in type_name or isinstance(value, str)
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    if isinstance(default, tuple):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))
