"""Readiness as named checks and probes, liveness from the loop, and the HTTP endpoint's
credentials, TLS, secrets and bounds."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.config import ProxyConfig
from proxy.embedded import free_port
from proxy.health import STALE_INTERVALS, Liveness, Readiness, Verdict
from proxy.health_endpoint import EndpointError, endpoint_settings, serving
from proxy.metrics import ProxyMetrics
from storage.config import ConfigError
from tests.certificates import Pki
from tests.conditions import wait_for
from tests.fakes.clocks import ManualClock


def test_ready_only_when_every_check_passes_and_reasons_name_the_failing_ones() -> None:
    readiness = Readiness()
    readiness.add("listeners", lambda: Verdict(ok=True, reason="2 listeners bound"))
    assert readiness.report().ok
    readiness.add("remote_objects", lambda: Verdict(ok=False, reason="3 objects missing"))
    report = readiness.report()
    assert not report.ok
    body = json.loads(report.json())
    assert body["status"] == "fail"
    assert body["reason"] == "remote_objects: 3 objects missing"
    assert body["checks"]["listeners"] == {"ok": True, "reason": "2 listeners bound"}


def test_a_required_check_fails_until_it_is_added() -> None:
    readiness = Readiness(required=("listeners", "broker"))
    report = readiness.report()
    assert not report.ok
    assert report.body["checks"]["broker"] == {"ok": False, "reason": "not started yet"}
    assert "listeners: not started yet" in report.body["reason"]
    readiness.add("listeners", lambda: Verdict(ok=True, reason="1 bound"))
    assert not readiness.report().ok
    readiness.add("broker", lambda: Verdict(ok=True, reason="answered"))
    assert readiness.report().ok


def test_a_check_that_raises_fails_itself_and_names_are_unique() -> None:
    readiness = Readiness()

    def broken() -> Verdict:
        raise RuntimeError("boom")

    readiness.add("broken", broken)
    assert "boom" in readiness.report().body["checks"]["broken"]["reason"]
    with pytest.raises(ValueError, match="broken"):
        readiness.add("broken", broken)


def test_stop_serving_turns_readiness_false_whatever_the_checks_say() -> None:
    readiness = Readiness()
    readiness.add("fine", lambda: Verdict(ok=True, reason="fine"))
    readiness.stop_serving()
    report = readiness.report()
    assert not report.ok
    assert report.body["reason"] == "shutting down"


async def test_a_probe_reports_its_latest_outcome_and_goes_stale_when_hung() -> None:
    clock = ManualClock(100.0)
    readiness = Readiness(clock=clock)
    outcomes: list[BaseException | None] = [None, ConnectionError("refused")]
    ran = asyncio.Event()
    hang = asyncio.Event()

    async def probe() -> None:
        ran.set()
        if not outcomes:
            await hang.wait()
            return
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    readiness.add_probe("broker", probe, interval=0.01)
    assert readiness.report().body["checks"]["broker"]["reason"] == "not checked yet"
    readiness.start()
    try:
        await wait_for(lambda: not outcomes, what="both outcomes probed")
        await wait_for(
            lambda: readiness.report().body["checks"]["broker"]["reason"] == "refused",
            what="the failure reported",
        )
        # Hung from now on: its last outcome stands until it is stale.
        clock.now += STALE_INTERVALS * 0.01 + 1
        reason = readiness.report().body["checks"]["broker"]["reason"]
        assert reason.startswith("refused (no success for")
    finally:
        await readiness.close()


async def test_a_probe_added_after_start_runs_and_a_late_one_fails_with_its_reason() -> None:
    readiness = Readiness()
    readiness.start()

    async def never() -> None:
        await asyncio.Event().wait()

    readiness.add_probe("metadata", never, interval=0.01, late="behind the topic's end")
    try:
        await wait_for(
            lambda: (
                readiness.report()
                .body["checks"]["metadata"]["reason"]
                .startswith("behind the topic's end")
            ),
            what="the late reason",
        )
    finally:
        await readiness.close()


async def test_liveness_is_answered_by_the_loop_and_fails_while_it_is_held() -> None:
    liveness = Liveness(asyncio.get_running_loop())
    liveness.observe_lag(0.002)
    report = await asyncio.to_thread(liveness.answer, 5.0)
    assert report.ok
    assert report.body["loop_lag_s"] == 0.002
    answered: list[bool] = []
    thread = threading.Thread(target=lambda: answered.append(liveness.answer(0.05).ok))
    thread.start()
    thread.join()  # holds the loop: the other thread's callback cannot run before it gives up
    assert answered == [False]


def fetch(
    url: str, headers: dict[str, str] | None = None, context: ssl.SSLContext | None = None
) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return err.code


@pytest.fixture
def token_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "token"
    path.write_text("t0ken\n", encoding="utf-8")
    yield path


async def test_metrics_need_the_token_and_probes_do_not(token_file: Path) -> None:
    port = free_port()
    config = ProxyConfig(metrics_port=port, metrics_bearer_token_file=str(token_file))
    readiness = Readiness()
    readiness.add("fine", lambda: Verdict(ok=True, reason="fine"))
    with serving(config, registry=ProxyMetrics().registry, readiness=readiness):
        base = f"http://127.0.0.1:{port}"
        assert await asyncio.to_thread(fetch, f"{base}/metrics") == 401
        good = {"Authorization": "Bearer t0ken"}
        assert await asyncio.to_thread(fetch, f"{base}/metrics", good) == 200
        assert await asyncio.to_thread(fetch, f"{base}/readyz") == 200
        assert await asyncio.to_thread(fetch, f"{base}/livez") == 200


async def test_basic_credentials_over_https(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERPROXY_METRICS_BASIC_AUTH_PASSWORD", "pw")
    port = free_port()
    config = ProxyConfig(
        metrics_port=port,
        metrics_basic_auth_username="prom",
        metrics_ssl_certificate_location=str(pki.proxy.certificate),
        metrics_ssl_key_location=str(pki.proxy.key),
    )
    context = ssl.create_default_context(cafile=str(pki.ca))
    with serving(config, registry=ProxyMetrics().registry, readiness=Readiness()):
        url = f"https://127.0.0.1:{port}/metrics"
        basic = {"Authorization": "Basic " + base64.b64encode(b"prom:pw").decode()}
        assert await asyncio.to_thread(fetch, url, basic, context=context) == 200
        assert await asyncio.to_thread(fetch, url, context=context) == 401


def test_secrets_come_from_the_file_then_the_environment(
    token_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIERPROXY_METRICS_BEARER_TOKEN", "from-env")
    assert endpoint_settings(ProxyConfig()).bearer == "from-env"
    assert endpoint_settings(ProxyConfig(metrics_bearer_token_file=str(token_file))).bearer == (
        "t0ken"
    )
    settings = endpoint_settings(ProxyConfig(metrics_bearer_token="inline"))
    assert settings.bearer == "inline"
    assert "inline" not in repr(settings)


def test_a_user_without_a_password_or_an_unreadable_file_is_a_config_error(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match="needs a password"):
        endpoint_settings(ProxyConfig(metrics_basic_auth_username="prom"))
    with pytest.raises(ConfigError, match=r"metrics\.bearer\.token\.file"):
        endpoint_settings(ProxyConfig(metrics_bearer_token_file=str(tmp_path / "missing")))


async def test_a_taken_port_is_an_endpoint_error_naming_it() -> None:
    port = free_port()
    config = ProxyConfig(metrics_port=port)
    with (
        serving(config, registry=ProxyMetrics().registry, readiness=Readiness()),
        pytest.raises(EndpointError, match=f"cannot serve metrics on 127.0.0.1:{port}"),
        serving(config, registry=ProxyMetrics().registry, readiness=Readiness()),
    ):
        pass
