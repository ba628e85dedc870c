"""Generate ``docs/configuration.md``, the configuration reference, from the config schema.

Every configurable part of tierproxy declares a frozen dataclass whose fields are
:func:`storage.config.setting` calls, so the schema already holds each key, default, Kafka
equivalent and description. This module finds those dataclasses by importing every module of
``proxy`` and ``storage`` that imports ``setting`` (found by parsing the source, so nothing else
is imported and PySpark never is), and renders them as Markdown. A hand-written reference would
drift from the code; this one cannot, because ``--check`` (run by the unit tests) fails when the
committed file differs from what the code generates::

    python -m proxy.config_reference           # rewrite docs/configuration.md
    python -m proxy.config_reference --check   # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from storage.config import SettingInfo, describe, toml_value

__all__ = [
    "DEFAULT_OUTPUT",
    "ConfigSection",
    "discover",
    "main",
    "render",
    "render_value",
]

ROOT = Path(__file__).resolve().parent.parent
"""The source tree: the directory that holds the ``proxy`` and ``storage`` packages."""
PACKAGES = ("proxy", "storage")
DEFAULT_OUTPUT = ROOT / "docs" / "configuration.md"
_SCHEMA_MODULE = "storage.config"
_LONG_MAX = 2**63 - 1


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConfigSection:
    """One config dataclass and the settings it declares."""

    config_class: type[Any]
    settings: tuple[SettingInfo, ...]

    @property
    def qualified_name(self) -> str:
        return f"{self.config_class.__module__}.{self.config_class.__qualname__}"

    @property
    def summary(self) -> str:
        """The class docstring's first paragraph, without reST field lists."""
        doc = inspect.getdoc(self.config_class) or ""
        paragraph = doc.split("\n\n", 1)[0]
        lines = [line for line in paragraph.splitlines() if not line.startswith(":")]
        return _markdown(" ".join(line.strip() for line in lines).strip())


def _imports_setting(path: Path) -> bool:
    """Whether the file imports ``setting`` from the schema module (a config declaration)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return any(
        isinstance(node, ast.ImportFrom)
        and node.module == _SCHEMA_MODULE
        and any(alias.name == "setting" for alias in node.names)
        for node in ast.walk(tree)
    )


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _declaring_modules(root: Path, packages: Sequence[str]) -> Iterator[str]:
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if _imports_setting(path):
                yield _module_name(path, root)


def discover(root: Path = ROOT, packages: Sequence[str] = PACKAGES) -> list[ConfigSection]:
    """Every config dataclass under ``packages``, in source-path order, then definition order.

    :raises ImportError: when a declaring module cannot be imported.
    """
    sections: list[ConfigSection] = []
    for name in _declaring_modules(root, packages):
        module = importlib.import_module(name)
        classes = [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if cls.__module__ == name and dataclasses.is_dataclass(cls)
        ]
        classes.sort(key=lambda cls: inspect.getsourcelines(cls)[1])
        for cls in classes:
            settings = tuple(_declared_here(cls))
            if settings:
                sections.append(ConfigSection(config_class=cls, settings=settings))
    return sections


def _declared_here(config_class: type[Any]) -> Iterator[SettingInfo]:
    """The settings ``config_class`` declares itself: those it inherits from another config
    class (``TieringConfig`` from ``ClusterClientConfig``) are listed with that one."""
    inherited = {
        info.key
        for base in config_class.__mro__[1:]
        if dataclasses.is_dataclass(base)
        for info in describe(base)
    }
    return (info for info in describe(config_class) if info.key not in inherited)


def render_value(value: Any) -> str:
    """A default as it would be written in the TOML file (``unset`` for no value)."""
    text = toml_value(value)
    if text is None:
        return "unset"
    if value == _LONG_MAX:
        return f"{text} (no limit)"
    return text


def _markdown(text: str) -> str:
    """Turn reST inline literals (double backticks) into Markdown code spans (single)."""
    return text.replace("``", "`")


def _cell(text: str) -> str:
    return _markdown(text).replace("|", "\\|").replace("\n", " ")


def _kafka(info: SettingInfo) -> str:
    if info.kafka is None:
        return "— (tierproxy only)"
    if info.kafka == info.key:
        return "same name"
    return f"`{info.kafka}`"


def _anchor(section: ConfigSection) -> str:
    return section.config_class.__name__.lower()


_HEADER = """\
# Configuration reference

<!-- Generated by `python -m proxy.config_reference` from the config dataclasses; do not edit.
     `python -m proxy.config_reference --check` (run by the unit tests) fails when stale. -->

tierproxy reads one TOML file (`--config FILE`) whose keys are Kafka-style dotted names, written
as plain TOML (`remote.log.reader.threads = 5`), so the file reads like a `server.properties`.
`tierproxy serve`, `tierproxy tier` and `tierproxy status` may share one file; each part takes
the keys it declares below. Command-line flags of `tierproxy serve` (`--bootstrap`, `--listen`,
`--advertised-host`, `--metrics-port`, `--log-level`, `--log-format`) override the file.
`serve`, `tier` and `status` (and `demo`, on the file it writes) check the whole file before
they connect anywhere: unknown keys (with the closest known key), values of the wrong type,
values out of range and settings that do not fit together are all listed at once, with exit
code 2.
Defaults below are written as TOML, as `tierproxy serve --help` shows them. A key that extends
another key (`listeners.allow.cidrs` beside `listeners`, `upstream.sasl.password.file` beside
`upstream.sasl.password`) is written in quotes (`"listeners.allow.cidrs" = "10.0.0.0/8"`)
when both are in the file: TOML cannot hold a value and a key under it as dotted keys.

Two keys hold arrays of tables rather than values: `[[broker.map]]` (explicit proxy addresses
per broker, with `node.id`, `listener` and `advertised.listener`) and `[[topics]]` (per-topic
tiering policy: a `pattern` regular expression matched against the whole topic name, plus any
of the topic-policy keys; the first matching table wins). See the
[operator guide](operations.md) for both.

"Kafka equivalent" names the Kafka broker or topic setting a key mirrors: "same name" when
tierproxy uses Kafka's own name, "— (tierproxy only)" for knobs Kafka does not have.
"""


def render(sections: Sequence[ConfigSection]) -> str:
    """The Markdown reference for ``sections``."""
    lines = [_HEADER, "## Sections", ""]
    lines.extend(
        f"- [{section.config_class.__name__}](#{_anchor(section)}) — {section.summary}"
        for section in sections
    )
    for section in sections:
        lines += [
            "",
            f"## {section.config_class.__name__}",
            "",
            f"{section.summary} (`{section.qualified_name}`)",
            "",
            "| key | default | Kafka equivalent | description |",
            "| --- | --- | --- | --- |",
        ]
        lines.extend(
            f"| `{info.key}` | `{_cell(render_value(info.default))}` | {_kafka(info)} "
            f"| {_cell(info.doc)} |"
            for info in section.settings
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the reference, or with ``--check`` compare it; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m proxy.config_reference",
        description="Generate the configuration reference from the config dataclasses.",
    )
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="file to write or check"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the file differs from the code"
    )
    args = parser.parse_args(argv)
    text = render(discover())
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
    if args.check:
        if current != text:
            print(
                f"{args.output} is stale: run `python -m proxy.config_reference` and commit it",
                file=sys.stderr,
            )
            return 1
        return 0
    if current != text:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
