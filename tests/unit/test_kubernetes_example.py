"""docs/kubernetes/tierproxy.yaml is valid Kubernetes and runs what the code offers.

No cluster is needed: every document is checked against Kubernetes' own OpenAPI schemas
(``kubernetes-validate``, offline, strict: an unknown field fails), its configuration file
loads as the proxy and the pipeline load theirs, its command lines go through the real
argument parser, and its probes, ports and grace period agree with that configuration.
"""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from proxy.cli import build_parser
from proxy.settings import load_flat, settings_from_flat
from storage.config import flatten

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "kubernetes" / "tierproxy.yaml"
KUBERNETES_VERSION = "1.30"
"""The oldest Kubernetes the example is checked against (its preStop, probe and PDB fields
are all older)."""


def _documents() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(EXAMPLE.read_text(encoding="utf-8")) if doc]


def _one(kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in _documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _container(deployment: str) -> dict[str, Any]:
    (container,) = _one("Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "tierproxy.toml"
    path.write_text(_one("ConfigMap", "tierproxy")["data"]["tierproxy.toml"], encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "document", _documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}"
)
def test_documents_are_valid_kubernetes(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def test_config_loads_for_the_proxy_and_the_pipeline(config_file: Path) -> None:
    # Checked whole, as serve and tier check it; its secrets are the pod's, not here.
    settings = settings_from_flat(load_flat(config_file), resolve_secrets=False)
    assert settings.proxy.workers == 0  # one per core of the pod's CPU limit
    assert settings.storage.backend == "s3"


@pytest.mark.parametrize(
    ("deployment", "subcommand"), [("tierproxy", "serve"), ("tierproxy-tier", "tier")]
)
def test_commands_parse_with_the_real_cli(deployment: str, subcommand: str) -> None:
    argv = [arg.replace("$(POD_IP)", "10.0.0.7") for arg in _container(deployment)["args"]]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as err:
        pytest.fail(f"`tierproxy {shlex.join(argv)}` is rejected ({err})")
    assert argv[0] == subcommand
    assert callable(args.handler)
    mounts = {m["mountPath"] for m in _container(deployment)["volumeMounts"]}
    assert str(Path(argv[argv.index("--config") + 1]).parent) in mounts


def test_probes_ports_and_grace_period_agree_with_the_config(config_file: Path) -> None:
    settings = flatten(tomllib.loads(config_file.read_text(encoding="utf-8")))
    container = _container("tierproxy")
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["metrics"] == settings["metrics.port"]
    assert ports["kafka"] == int(settings["listeners"].rsplit(":", 1)[1])
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    pod = _one("Deployment", "tierproxy")["spec"]["template"]["spec"]
    pause = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    # The pause, then the drain, must end before Kubernetes' SIGKILL.
    assert pause + settings["shutdown.timeout.ms"] / 1000 < pod["terminationGracePeriodSeconds"]
    service = _one("Service", "tierproxy")
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)


def test_rollouts_keep_proxies_serving_and_one_pipeline() -> None:
    proxies = _one("Deployment", "tierproxy")["spec"]
    assert proxies["replicas"] >= 2
    assert proxies["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    budget = _one("PodDisruptionBudget", "tierproxy")["spec"]
    assert budget["selector"] == proxies["selector"]
    pipeline = _one("Deployment", "tierproxy-tier")["spec"]
    assert pipeline["replicas"] == 1
    assert pipeline["strategy"]["type"] == "Recreate"
