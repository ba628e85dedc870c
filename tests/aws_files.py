"""An AWS environment of the test's own, so that no test reads the developer's ~/.aws.

botocore's credential chain reads the environment, the shared credentials and config files,
a boto2 config file, web identity and container variables, then asks the instance metadata
service. :func:`isolate_aws_environment` removes every ``AWS_*`` variable, points both files
(and ``BOTO_CONFIG``) into the test's directory and switches the metadata service off, so the
chain finds exactly what the test writes, and never contacts an address off this machine.
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["AwsFiles", "isolate_aws_environment"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AwsFiles:
    """The test's shared credentials and config files (they exist, possibly empty)."""

    credentials: Path
    config: Path

    def add_profile(self, name: str, *, access_key: str, secret_key: str) -> None:
        """Write a profile with these keys to the shared credentials file."""
        profiles = configparser.ConfigParser()
        profiles.read(self.credentials)
        profiles[name] = {"aws_access_key_id": access_key, "aws_secret_access_key": secret_key}
        with self.credentials.open("w") as out:
            profiles.write(out)


def isolate_aws_environment(monkeypatch: pytest.MonkeyPatch, directory: Path) -> AwsFiles:
    """Give botocore an empty AWS environment with its files in ``directory``."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    files = AwsFiles(credentials=directory / "credentials", config=directory / "config")
    files.credentials.write_text("")
    files.config.write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(files.credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(files.config))
    monkeypatch.setenv("BOTO_CONFIG", str(directory / "boto.cfg"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return files
