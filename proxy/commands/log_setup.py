"""The logging of ``tier`` and ``status``, from ``log.level`` and ``log.format`` of their file.

``serve`` reads both with the rest of its settings (and its ``--log-level`` and
``--log-format`` flags); ``tier`` and ``status`` read the same keys of the same file here,
before anything logs, so that the three commands' lines have one format
(:func:`proxy.logs.configure`).
"""

from __future__ import annotations

from pathlib import Path

from proxy.config import load_settings, proxy_config
from proxy.logs import configure

__all__ = ["LOG_KEYS", "configure_from_file"]

LOG_KEYS = ("log.level", "log.format")


def configure_from_file(path: Path | None, *, default_level: str = "INFO") -> None:
    """Configure logs from the file's ``log.level`` (``default_level`` when it has none) and
    ``log.format``.

    :raises ConfigError: the file cannot be read, holds an unknown key, or a log setting is
        invalid.
    """
    from proxy.remote.wiring import SHARED_CONFIG_CLASSES  # noqa: PLC0415 (keep --help light)

    flat = load_settings(path, {}, SHARED_CONFIG_CLASSES)
    chosen = {key: flat[key] for key in LOG_KEYS if key in flat}
    config = proxy_config({"log.level": default_level, **chosen})
    configure(config.log_level, config.log_format)
