"""docker-compose.yml runs what the code really offers: real subcommands, flags and variables.

Docker is not needed: the file is parsed with PyYAML, every ``tierproxy`` command line goes
through the real argument parser, and every variable the stack sets for tierproxy is looked
up in the source tree. ``docker-compose config -q`` validates the file's schema when
docker-compose is installed (``make test`` installs it with apt when it can).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
SOURCE_DIRS = ("protocol", "storage", "proxy", "tests")
# Variables that configure tierproxy or its test harness; anything else the stack sets
# (KAFKA_NODE_ID, MINIO_ROOT_USER, ...) belongs to the third-party images.
OUR_PREFIXES = ("TIERPROXY_", "KAFKA_BOOTSTRAP", "S3_")
PROJECT_IMAGES = ("tierproxy:",)


def _compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _services() -> dict[str, dict[str, Any]]:
    services = _compose()["services"]
    assert isinstance(services, dict)
    return services


def _argv(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(part) for part in value]


def _image_entrypoint() -> list[str]:
    """The ENTRYPOINT of the project image (exec form)."""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if line.startswith("ENTRYPOINT "):
            entrypoint = yaml.safe_load(line.removeprefix("ENTRYPOINT "))
            assert isinstance(entrypoint, list)
            return [str(part) for part in entrypoint]
    raise AssertionError("the Dockerfile has no ENTRYPOINT")


def _is_project_image(service: Mapping[str, Any]) -> bool:
    return str(service.get("image", "")).startswith(PROJECT_IMAGES) or "build" in service


def _tierproxy_commands() -> Iterator[tuple[str, list[str]]]:
    """(service, argv after ``tierproxy``) for every service that runs the tierproxy CLI."""
    image_entrypoint = _image_entrypoint()
    for name, service in _services().items():
        if not _is_project_image(service):
            continue
        entrypoint = _argv(service.get("entrypoint")) or image_entrypoint
        if entrypoint[-1] == "tierproxy":
            yield name, _argv(service.get("command"))


def _environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(key): str(value) for key, value in env.items()}


def _source_text() -> str:
    """The code's source, without this test (whose own mentions prove nothing)."""
    this = Path(__file__).resolve()
    return "\n".join(
        path.read_text(encoding="utf-8")
        for directory in SOURCE_DIRS
        for path in sorted((ROOT / directory).rglob("*.py"))
        if path.resolve() != this
    )


def test_image_entrypoint_is_the_tierproxy_cli() -> None:
    assert _image_entrypoint()[-1] == "tierproxy"


def test_stack_runs_the_proxy_and_the_pipeline() -> None:
    subcommands = {name: argv[0] for name, argv in _tierproxy_commands()}
    assert subcommands.get("proxy") == "serve"
    assert subcommands.get("tier") == "tier"
    assert subcommands.get("tier-spark") == "tier"


@pytest.mark.parametrize(("service", "argv"), list(_tierproxy_commands()))
def test_tierproxy_commands_parse_with_the_real_cli(service: str, argv: list[str]) -> None:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as err:
        pytest.fail(f"service {service}: `tierproxy {shlex.join(argv)}` is rejected ({err})")
    assert callable(args.handler)


def test_spark_profile_points_the_pipeline_at_the_master() -> None:
    services = _services()
    argv = _argv(services["tier-spark"]["command"])
    master = build_parser().parse_args(argv).master
    host, port = master.removeprefix("spark://").split(":")
    master_argv = _argv(services["spark-master"]["command"])
    assert master.startswith("spark://")
    assert master_argv[master_argv.index("--host") + 1] == host
    assert master_argv[master_argv.index("--port") + 1] == port
    assert master in _argv(services["spark-worker"]["command"])
    for name in ("spark-master", "spark-worker", "tier-spark"):
        assert services[name].get("profiles") == ["spark"]


def test_spark_services_use_the_launcher_the_pyspark_wheel_ships() -> None:
    launcher = Path(sys.executable).parent / "spark-class"
    assert launcher.exists(), "the pyspark wheel no longer installs spark-class"
    for name in ("spark-master", "spark-worker"):
        assert "spark-class" in _argv(_services()[name]["entrypoint"])


def test_config_files_are_mounted_where_the_commands_read_them() -> None:
    services = _services()
    for name, argv in _tierproxy_commands():
        config = argv[argv.index("--config") + 1]
        mounts = [str(volume).split(":") for volume in services[name].get("volumes", ())]
        sources = [source for source, target, *_ in mounts if target == config]
        assert sources, f"service {name} reads {config} but nothing is mounted there"
        assert (ROOT / sources[0]).is_file()


def test_proxy_ports_match_its_listener_and_metrics_port() -> None:
    proxy = _services()["proxy"]
    args = build_parser().parse_args(_argv(proxy["command"]))
    published = {str(port).rsplit(":", 1)[-1] for port in proxy["ports"]}
    assert args.listen.rsplit(":", 1)[-1] in published
    assert str(args.metrics_port) in published
    assert str(args.metrics_port) in " ".join(_argv(proxy["healthcheck"]["test"]))


def test_proxy_health_is_its_readiness() -> None:
    proxy = _services()["proxy"]
    port = build_parser().parse_args(_argv(proxy["command"])).metrics_port
    assert f"127.0.0.1:{port}/readyz" in " ".join(_argv(proxy["healthcheck"]["test"]))


def test_variables_the_stack_sets_are_read_by_the_code() -> None:
    source = _source_text()
    checked = 0
    for name, service in _services().items():
        for variable in _environment(service):
            if variable.startswith(OUR_PREFIXES):
                checked += 1
                assert re.search(rf"[\"']{re.escape(variable)}[\"']", source), (
                    f"service {name} sets {variable}, which no code reads"
                )
    assert checked


def test_integration_service_points_the_harness_at_the_stack() -> None:
    services = _services()
    integration = services["integration"]
    env = _environment(integration)
    broker_host = env["KAFKA_BOOTSTRAP"].split(":")[0]
    s3_host = env["S3_ENDPOINT"].split("//")[1].split(":")[0]
    assert broker_host in services
    assert s3_host in services
    assert integration["build"]["args"]["INSTALL_TESTS"] == "1"
    assert _argv(integration["entrypoint"])[-3:] == ["python", "-m", "pytest"]
    argv = _argv(integration["command"])
    assert argv[0] == "tests/integration"
    marker = argv[argv.index("-m") + 1]
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "pytest"
    ]["ini_options"]["markers"]
    assert any(entry.split(":")[0] == marker for entry in markers)


def test_dependencies_wait_on_health_checks_and_completed_jobs() -> None:
    services = _services()
    for name, service in services.items():
        for dependency, spec in (service.get("depends_on") or {}).items():
            condition = spec["condition"]
            assert condition in {
                "service_healthy",
                "service_completed_successfully",
                "service_started",
            }, f"{name} -> {dependency}: {condition}"
            if condition == "service_healthy":
                assert "healthcheck" in services[dependency], f"{dependency} has no healthcheck"
    for name in ("proxy", "tier", "integration"):
        assert services[name]["depends_on"]["kafka"]["condition"] == "service_healthy"
        assert (
            services[name]["depends_on"]["minio-bucket"]["condition"]
            == "service_completed_successfully"
        )


def test_broker_keeps_a_generous_retention_safety_net() -> None:
    env = _environment(_services()["kafka"])
    day_ms = 24 * 60 * 60 * 1000
    assert int(env["KAFKA_LOG_RETENTION_MS"]) >= day_ms
    assert int(env["KAFKA_LOG_RETENTION_BYTES"]) >= 1024**3
    assert int(env["KAFKA_LOG_RETENTION_CHECK_INTERVAL_MS"]) <= 300_000


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_docker_compose_accepts_the_file() -> None:
    subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), "--profile", "spark", "config", "-q"],
        check=True,
        timeout=60,
        cwd=ROOT,
    )
