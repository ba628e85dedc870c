"""Every command checks the whole config file before it connects anywhere, the same way.

``serve``, ``tier`` and ``status`` each get a file with one mistake of every kind (wrong
types at the top level and in ``[[topics]]``, a duration with a unit, a typo, a value out of
range, settings that do not fit together) and a bootstrap server that accepts connections
and never answers. Each exits 2 listing every mistake, the same list for all three, and the
bootstrap server never sees a connection: a command that connected first would hang there
(serve and tier wait for a cluster that is not up) or report the cluster instead. A file
TOML cannot read is named by line, key and the form TOML expects, by all three alike.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.embedded.ports import LOOPBACK

pytestmark = [pytest.mark.integration]

COMMANDS = ("serve", "tier", "status")

_HANG_GUARD_S = 120
"""Far beyond what checking a file takes; a command that waits for the cluster instead
fails the test here rather than hanging it."""

EVERY_MISTAKE = """\
bootstrap.servers = "{bootstrap}"
remote.log.storage.system.enable = true
remote.log.reader.threads = "five"
remote.log.manager.task.interval.ms = "30s"
remote.log.readr.max.pending.tasks = 10
socket.request.max.bytes = -1
remote.log.storage.backend = "s3"

[[topics]]
pattern = "orders"
remote.storage.enable = true
local.retention.ms = "ten"
"""

PROBLEMS = (
    "6 problems in the settings:",
    "  - unknown setting 'remote.log.readr.max.pending.tasks' "
    "(did you mean 'remote.log.reader.max.pending.tasks'?)",
    "  - socket.request.max.bytes must be > 0",
    '  - remote.log.reader.threads = "five": expected an integer, such as the default: '
    "remote.log.reader.threads = 5",
    "  - remote.log.storage.s3.bucket is required for the s3 backend",
    '  - remote.log.manager.task.interval.ms = "30s": expected an integer (milliseconds): '
    "write milliseconds as a plain integer: remote.log.manager.task.interval.ms = 30000",
    """  - [[topics]] pattern 'orders': local.retention.ms = "ten": expected an integer """
    "(milliseconds), such as the default: local.retention.ms = -2",
)


@pytest.fixture
def silent_bootstrap() -> Iterator[socket.socket]:
    """A listening port nobody answers on; whoever connects waits in its accept queue."""
    with socket.create_server((LOOPBACK, 0)) as listener:
        listener.setblocking(False)
        yield listener


def run(command: str, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", command, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=_HANG_GUARD_S,
        check=False,
    )


def connections(listener: socket.socket) -> int:
    """How many connections reached ``listener`` (accepted here, and closed)."""
    count = 0
    while True:
        try:
            connection, _ = listener.accept()
        except BlockingIOError:
            return count
        connection.close()
        count += 1


def refused(command: str, listener: socket.socket, config: Path, settings: str) -> str:
    """What ``command`` says on stderr of ``settings`` (``{bootstrap}`` in them replaced by
    ``listener``'s address) written to ``config``, once it has exited 2, said nothing on
    stdout and not connected to ``listener``."""
    host, port = listener.getsockname()[:2]
    config.write_text(settings.replace("{bootstrap}", f"{host}:{port}"), encoding="utf-8")
    result = run(command, config)
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert connections(listener) == 0
    return result.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_every_mistake_is_listed_before_anything_connects(
    command: str, silent_bootstrap: socket.socket, tmp_path: Path
) -> None:
    stderr = refused(command, silent_bootstrap, tmp_path / "tierproxy.toml", EVERY_MISTAKE)
    assert stderr.splitlines() == [
        f"tierproxy {command}: {PROBLEMS[0]}",
        *PROBLEMS[1:],
    ]


ONE_MISTAKE = {
    "reader threads": (
        'remote.log.reader.threads = "five"\n',
        'remote.log.reader.threads = "five": expected an integer, such as the default: '
        "remote.log.reader.threads = 5",
    ),
    "task interval": (
        'remote.log.manager.task.interval.ms = "30s"\n',
        'remote.log.manager.task.interval.ms = "30s": expected an integer (milliseconds): '
        "write milliseconds as a plain integer: remote.log.manager.task.interval.ms = 30000",
    ),
    "topic retention": (
        '[[topics]]\npattern = "orders"\nlocal.retention.ms = "ten"\n',
        """[[topics]] pattern 'orders': local.retention.ms = "ten": expected an integer """
        "(milliseconds), such as the default: local.retention.ms = -2",
    ),
    "encryption keys": (
        "remote.log.storage.encryption.enable = true\n"
        'remote.log.storage.encryption.key.id = "k1"\n'
        'remote.log.storage.encryption.keys.file = "/nonexistent/tierproxy-keys"\n',
        "cannot read encryption keys from /nonexistent/tierproxy-keys: [Errno 2] No such "
        "file or directory: '/nonexistent/tierproxy-keys'",
    ),
}


@pytest.mark.parametrize("mistake", ONE_MISTAKE)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_setting_of_another_command_is_checked_too(
    command: str, mistake: str, silent_bootstrap: socket.socket, tmp_path: Path
) -> None:
    """Each command checks the keys the others act on, before it connects."""
    line, problem = ONE_MISTAKE[mistake]
    settings = 'bootstrap.servers = "{bootstrap}"\n' + line
    stderr = refused(command, silent_bootstrap, tmp_path / "tierproxy.toml", settings)
    assert stderr == f"tierproxy {command}: {problem}\n"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_file_toml_cannot_read_names_the_line_the_key_and_the_fix(
    command: str, silent_bootstrap: socket.socket, tmp_path: Path
) -> None:
    config = tmp_path / "tierproxy.toml"
    settings = 'bootstrap.servers = "{bootstrap}"\nremote.fetch.offload.enable = True\n'
    stderr = refused(command, silent_bootstrap, config, settings)
    assert stderr == (
        f"tierproxy {command}: cannot read config file {config}: line 2: "
        "remote.fetch.offload.enable = True: TOML booleans are lowercase true or false: "
        "remote.fetch.offload.enable = true\n"
    )
