"""The settings and logging of ``tier`` and ``status``: the config file checked whole
(:func:`proxy.settings.load_settings`), then logs from its ``log.level`` and ``log.format``.

``serve`` reads both with the rest of its settings (and its ``--log-level`` and
``--log-format`` flags); ``tier`` and ``status`` read the same keys of the same file here,
before anything logs, so that the three commands' lines have one format
(:func:`proxy.logs.configure`).
"""

from __future__ import annotations

from pathlib import Path

from proxy.logs import configure
from proxy.settings import Settings, load_flat, settings_from_flat

__all__ = ["settings_with_logs"]


def settings_with_logs(path: Path | None, *, default_level: str = "INFO") -> Settings:
    """The checked settings of the file; logs configured from its ``log.level``
    (``default_level`` when it has none) and ``log.format``.

    :raises ConfigError: the file cannot be read, or :class:`~storage.config.ConfigProblems`
        listing every problem of it (nothing is configured then).
    """
    flat = load_flat(path)
    settings = settings_from_flat(flat)
    level = settings.proxy.log_level if "log.level" in flat else default_level
    configure(level, settings.proxy.log_format)
    return settings
