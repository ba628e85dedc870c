"""Fixtures of the read-path interceptor tests (see :mod:`tests.unit.proxy.remote.env`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.wire_broker import WireBroker
from tests.unit.proxy.remote.env import Env, EnvFactory, start_env


@pytest.fixture
async def make_env(
    tmp_path: Path, fake_broker: WireBroker, make_proxy: Any
) -> AsyncIterator[EnvFactory]:
    """Start environments (at most one per test is usual); torn down after the test."""
    made: list[Env] = []

    async def make(**options: Any) -> Env:
        env = await start_env(tmp_path, fake_broker, make_proxy, index=len(made), **options)
        made.append(env)
        return env

    yield make
    for env in made:
        await env.client.close()
        await env.running.aclose()
        await env.log.close()
