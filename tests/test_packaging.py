"""Packaging: the version is declared once per place and the places agree, and `pip install .`
gives a working service with no dev package, from exactly the files the Dockerfile copies."""

from __future__ import annotations

import asyncio
import contextlib
import email.parser
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

import omni_grpc
from tests.conftest import starts_processes
from tests.dockerfile_reading import REPO, copied_sources, health_check_command, read_dockerfile

PYPROJECT = REPO / "pyproject.toml"
PROJECT = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
# What .dockerignore keeps out of the build context inside the copied folders.
NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", "*.pyd")


def test_version_matches_pyproject() -> None:
    assert omni_grpc.__version__ == PROJECT["version"]


def test_console_script_points_at_cli() -> None:
    assert PROJECT["scripts"] == {"omni-grpc": "omni_cli:main"}


def package_name(requirement: str) -> str:
    """``openai[realtime]==3.57.0`` -> ``openai``, normalised as PEP 503 does."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name[0]).lower()


DEV_PACKAGES = {package_name(r) for r in PROJECT["optional-dependencies"]["dev"]}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build context as Docker's: only what the Dockerfile copies, without the caches."""
    context = tmp_path_factory.mktemp("context")
    for name in copied_sources(read_dockerfile()):
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(origin, context / name, ignore=NOT_COPIED)
        else:
            shutil.copy2(origin, context / name)
    return context


@pytest.fixture(scope="module")
@starts_processes
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from that context, as the Dockerfile's first stage builds it."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(out), "."],
        cwd=source,
        check=True,
        timeout=300,
    )
    (built,) = out.glob("omni_grpc-*.whl")
    return built


def test_the_wheel_holds_every_file_of_the_packages(source: Path, wheel: Path) -> None:
    """Modules, generated stubs, py.typed, the browser page: nothing left behind."""
    in_source = {
        path.relative_to(source).as_posix()
        for top in ("omni_grpc", "bridge", "omni_cli")
        for path in (source / top).rglob("*")
        if path.is_file()
    }
    in_wheel = set(zipfile.ZipFile(wheel).namelist())
    assert in_source - in_wheel == set()
    assert {"omni_grpc/py.typed", "bridge/static/index.html"} <= in_wheel


def test_the_wheel_requires_only_the_runtime_dependencies(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        fields = email.parser.Parser().parsestr(archive.read(metadata).decode())
    required = fields.get_all("Requires-Dist") or []
    unconditional = [r for r in required if "extra ==" not in r]
    assert unconditional == PROJECT["dependencies"]
    assert {package_name(r) for r in unconditional} & DEV_PACKAGES == set()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
@starts_processes
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh virtual environment holding the wheel and its dependencies; its bin folder."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        # A checkout on PYTHONPATH (with its egg-info) would look installed already to pip.
        env=outside_the_repo(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr[-4000:]
    yield venv / "bin"


def outside_the_repo() -> dict[str, str]:
    """An environment in which the installed package, not this checkout, is imported."""
    return {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}


@pytest.mark.slow
def test_the_install_has_no_dev_package_and_a_working_command(
    installed: Path, tmp_path: Path
) -> None:
    listed = subprocess.run(
        [str(installed / "python"), "-m", "pip", "list", "--format=json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    names = {package_name(package["name"]) for package in json.loads(listed.stdout)}
    assert "omni-grpc" in names
    assert names & DEV_PACKAGES == set()
    helped = subprocess.run(
        [str(installed / "omni-grpc"), "--help"],
        cwd=tmp_path,
        env=outside_the_repo(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert helped.returncode == 0, helped.stderr
    assert "serve" in helped.stdout


@contextlib.asynccontextmanager
async def installed_service(bin_dir: Path, cwd: Path) -> AsyncIterator[tuple[int, int]]:
    """The installed ``omni-grpc serve --engine loopback``; yields its gRPC and HTTP ports.

    On leaving, SIGTERM must end it cleanly.
    """
    http_port = free_port()
    service = await asyncio.create_subprocess_exec(
        str(bin_dir / "omni-grpc"),
        "serve",
        "--engine",
        "loopback",
        "--grpc-port",
        "0",
        "--http-port",
        str(http_port),
        "--log-level",
        "warning",
        cwd=cwd,
        env=outside_the_repo(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert service.stdout is not None
        banner = (await asyncio.wait_for(service.stdout.readline(), 60)).decode()
        found = re.search(r"serving gRPC on 127\.0\.0\.1:(\d+), websocket bridge on", banner)
        assert found, banner
        yield int(found[1]), http_port
        service.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(service.wait(), 30) == 0
    finally:
        if service.returncode is None:
            service.kill()
            await service.wait()


@pytest.mark.slow
async def test_the_installed_service_serves_health_and_the_page(
    installed: Path, tmp_path: Path
) -> None:
    """The image's health check passes against it, and every page file comes from the wheel."""
    page_files = sorted(p.name for p in (REPO / "bridge" / "static").iterdir() if p.is_file())
    async with installed_service(installed, tmp_path) as (grpc_port, http_port):
        check = await asyncio.create_subprocess_exec(
            *health_check_command(str(installed / "python")),
            env={**outside_the_repo(), "OMNI_GRPC_GRPC_PORT": str(grpc_port)},
        )
        assert await asyncio.wait_for(check.wait(), 30) == 0
        base = f"http://127.0.0.1:{http_port}"
        async with aiohttp.ClientSession() as http:
            for path in ["/", *(f"/static/{name}" for name in page_files)]:
                async with http.get(base + path) as reply:
                    assert reply.status == 200, path
