"""The command-line options of the tiering job, shared by ``tierproxy tier`` and
``spark-submit storage/tiering/job.py``; this module imports nothing but the standard
library, so that ``tierproxy tier --help`` loads neither Spark nor the pipeline."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_arguments"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the tiering job's options to ``parser``."""
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="TOML file of settings (Kafka's names)"
    )
    parser.add_argument(
        "--once", action="store_true", help="run one cycle and exit (default: loop)"
    )
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master for an in-process run (default local[*]; ignored under "
        "spark-submit, which sets its own)",
    )
