"""ApiVersions restriction: intercepted APIs are cut to what the proxy can decode."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from protocol.messages import INTERCEPTED_VERSIONS, ApiKey
from proxy.broker_versions import BrokerVersions
from proxy.interceptors.api_versions import ApiVersionsInterceptor, restrict_api_versions
from tests.fakes.kafka_responses import api_versions_body
from tests.unit.proxy.conftest import through


def ranges_of(response: object) -> dict[int, tuple[int, int]]:
    return {
        int(e.api_key): (int(e.min_version), int(e.max_version))
        for e in response.api_keys  # type: ignore[attr-defined]
    }


def test_intercepted_apis_are_cut_to_the_proxy_versions() -> None:
    fetch = INTERCEPTED_VERSIONS[ApiKey.FETCH]
    response = api_versions_body(3, {1: (0, 99), 2: (0, 3), 12: (0, 99), 18: (0, 4)})
    restricted = ranges_of(restrict_api_versions(response))
    assert restricted[1] == (fetch[0], fetch[-1])
    assert restricted[2] == (1, 3)  # ListOffsets starts at v1 in the proxy
    assert restricted[12] == (0, 99)  # Heartbeat passes through raw: broker's range kept
    assert restricted[18] == (0, 4)


def test_an_api_the_proxy_cannot_carry_is_left_out() -> None:
    response = api_versions_body(3, {1: (0, 3), 3: (0, 12)})
    restricted = ranges_of(restrict_api_versions(response))
    assert 1 not in restricted
    assert 3 in restricted


def test_an_answer_within_the_proxy_ranges_is_the_same_object() -> None:
    response = api_versions_body(3, {3: (0, 12), 12: (0, 4)})
    assert restrict_api_versions(response) is response


def test_v0_bodies_are_restricted_too() -> None:
    response = api_versions_body(0, {1: (0, 17)})
    assert ranges_of(restrict_api_versions(response))[1][0] == 4


@pytest.mark.parametrize(
    ("broker", "advertised"),
    [
        ((0, 7), (1, 11)),
        ((0, 8), (1, 11)),
        ((0, 9), (1, 11)),
        ((0, 10), (1, 11)),
        ((0, 11), (1, 11)),
        ((0, 12), (1, 11)),
        ((0, 6), (1, 6)),
    ],
)
def test_list_offsets_is_advertised_up_to_v11_when_the_broker_speaks_v7(
    broker: tuple[int, int], advertised: tuple[int, int]
) -> None:
    """EARLIEST_LOCAL (v8), LATEST_TIERED (v9) and EARLIEST_PENDING_UPLOAD (v11) are the
    proxy's answers: a broker of Kafka 3.0-3.4 (v7) still gets them, asked as v7."""
    response = api_versions_body(3, {2: broker})
    served = {int(ApiKey.LIST_OFFSETS): range(7, 12)}
    assert ranges_of(restrict_api_versions(response, served))[2] == advertised


@pytest.mark.parametrize(
    ("api_key", "broker", "advertised"),
    [
        (ApiKey.FETCH, (4, 18), (4, 18)),
        (ApiKey.FETCH, (4, 19), (4, 18)),
        (ApiKey.SHARE_FETCH, (1, 2), (1, 2)),
        (ApiKey.SHARE_FETCH, (1, 3), (1, 2)),
        (ApiKey.SHARE_ACKNOWLEDGE, (1, 2), (1, 2)),
        (ApiKey.SHARE_FETCH, (0, 0), None),  # Kafka 4.0's early-access share groups
    ],
)
def test_apis_that_may_name_brokers_are_advertised_only_where_the_proxy_rewrites_them(
    api_key: ApiKey, broker: tuple[int, int], advertised: tuple[int, int] | None
) -> None:
    response = api_versions_body(3, {int(api_key): broker})
    assert ranges_of(restrict_api_versions(response)).get(int(api_key)) == advertised


async def test_the_brokers_own_ranges_are_recorded_per_node() -> None:
    versions = BrokerVersions()
    interceptor = ApiVersionsInterceptor(versions, {int(ApiKey.LIST_OFFSETS): range(7, 10)})
    call = SimpleNamespace(connection=SimpleNamespace(node_id=3), request=None)
    advertised = await through(interceptor, call, api_versions_body(3, {1: (0, 17), 2: (0, 7)}))  # type: ignore[arg-type]
    assert ranges_of(advertised)[2] == (1, 9)
    assert versions.supported(3, int(ApiKey.LIST_OFFSETS)) == range(0, 8)
    assert versions.supported(3, int(ApiKey.FETCH)) == range(0, 18)
    assert versions.supported(4, int(ApiKey.FETCH)) is None
