"""The clients in other languages, built once each, and the server they talk to.

``go_build`` runs ``clients/go/build.sh`` (Debian's Go and grpc-go, offline), ``stream_wav``
installs the Node client's locked packages; ``client`` is either, as the driver's
:class:`~tests.clients.driver.Client`, so that one scenario runs against both. ``served`` is the
shared server (tests/conftest.py) with the client's key, a ChaosProxy in front of it, and the
server's own record of what happened (:class:`~tests.clients.server_truth.ServerTruth`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from omni_grpc.server.app import RunningServer
from omni_grpc.server.settings import ServerSettings
from tests.client.proxy import ChaosProxy
from tests.clients.driver import Client, GoBuild, GoClient, NodeClient
from tests.clients.server_truth import ServerTruth
from tests.node_packages import installed
from tests.serving import settings

CLIENTS = Path(__file__).parents[2] / "clients"
GO_PACKAGES = (
    "golang-go protoc-gen-go protoc-gen-go-grpc golang-google-grpc-dev "
    "golang-google-protobuf-dev golang-github-golang-protobuf-1-5-dev"
)

Served = tuple[ServerTruth, RunningServer, ChaosProxy]


@pytest.fixture(scope="session")
def go_build(tmp_path_factory: pytest.TempPathFactory) -> GoBuild:
    """``clients/go/build.sh``, once per test process: generates the contract's Go code and
    builds the command, in a build tree of this process's own. (Each pytest-xdist worker has
    its session; a shared tree was copied afresh by one worker while another's ``go vet`` read
    it, and that one found its generated package gone.) Go's build cache is shared: it is
    safe to share, and spares each worker compiling grpc-go again."""
    if shutil.which("go") is None:
        pytest.fail(f"this test needs Go from Debian's packages: apt-get install {GO_PACKAGES}")
    env = {
        **os.environ,
        "OMNI_GO_BUILD": str(tmp_path_factory.mktemp("go")),
        "GOCACHE": str(CLIENTS.parent / "build" / "go-cache"),
    }
    built = subprocess.run(
        [str(CLIENTS / "go" / "build.sh")],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
        env=env,
    )
    assert built.returncode == 0, built.stderr
    binary = Path(built.stdout.strip().splitlines()[-1])
    gopath = binary.parents[1]
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{gopath}:/usr/share/gocode",
        "GOCACHE": env["GOCACHE"],
    }
    package_dir = gopath / "src" / "github.com" / "omni-grpc" / "omni-grpc" / "clients" / "go"
    return GoBuild(binary=binary, package_dir=package_dir, env=env)


@pytest.fixture(scope="session")
def stream_wav() -> Path:
    """The Node command, with its locked packages installed whole (tests.node_packages)."""
    return installed(CLIENTS / "node") / "stream_wav.mjs"


@pytest.fixture(params=["go", "node"])
def client(request: pytest.FixtureRequest) -> Client:
    """Each client in turn, built."""
    if request.param == "go":
        return GoClient(request.getfixturevalue("go_build"))
    return NodeClient(request.getfixturevalue("stream_wav"))


@pytest.fixture
def server_settings(client: Client) -> ServerSettings:
    """The shared ``server`` takes the client's key."""
    return settings(api_keys=(client.api_key,))


@pytest.fixture
def truth(monkeypatch: pytest.MonkeyPatch) -> ServerTruth:
    """The server's record, kept from before the server starts."""
    return ServerTruth(monkeypatch)


@pytest.fixture
async def served(
    client: Client, truth: ServerTruth, server: RunningServer
) -> AsyncIterator[Served]:
    """The record, the server (asked for after it) and the proxy in front."""
    async with ChaosProxy("127.0.0.1", server.grpc_port, seed=client.seeds["served"]) as proxy:
        yield truth, server, proxy
