"""A bridge in its own process (``omni-grpc bridge --grpc-target``, its websockets' streams on a
few ConverseMany calls) in front of a keyed service: its calls present the key its streams
would present on Converse calls (its service key, else each client's own), so keyed clients are
served, and a client without a key is refused by the service as over a Converse call."""

from __future__ import annotations

from typing import Any

import pytest

from tests.bridge.testkit import WITH_EXTENSIONS, realtime_socket, running_bridge, service_settings
from tests.serving import serving

SERVICE_KEY, CLIENT_KEY = "service-key", "client-key"


def as_key(key: str) -> dict[str, Any]:
    return {"headers": {"Authorization": f"Bearer {key}"}}


@pytest.mark.parametrize("multiplex", [True, False], ids=["multiplexed", "converse"])
async def test_a_bridge_with_a_service_key_presents_it_on_its_calls(multiplex: bool) -> None:
    async with (
        serving(service_settings(api_keys=(SERVICE_KEY,))) as service,
        running_bridge(
            service.target, api_keys=(CLIENT_KEY,), service_key=SERVICE_KEY, multiplex=multiplex
        ) as port,
        realtime_socket(port, WITH_EXTENSIONS, **as_key(CLIENT_KEY)) as ws,
    ):
        assert (await ws.recv())["type"] == "session.created"


@pytest.mark.parametrize("multiplex", [True, False], ids=["multiplexed", "converse"])
async def test_clients_keys_go_on_and_a_keyless_client_is_refused_alike(multiplex: bool) -> None:
    # The bridge checks no keys itself: the service does, on the calls the bridge makes.
    async with (
        serving(service_settings(api_keys=(CLIENT_KEY, "other-key"))) as service,
        running_bridge(service.target, multiplex=multiplex) as port,
    ):
        for key in (CLIENT_KEY, "other-key"):
            async with realtime_socket(port, WITH_EXTENSIONS, **as_key(key)) as ws:
                assert (await ws.recv())["type"] == "session.created"
        async with realtime_socket(port, WITH_EXTENSIONS) as keyless:
            error = await keyless.recv()
            assert error["type"] == "error", error
            assert error["error"]["code"] == "invalid_api_key"
            code, _ = await keyless.closed()
            assert code == 1008
        assert len(service.registry) == 2
