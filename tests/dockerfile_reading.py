"""The project's Dockerfile read into instructions, for the tests that hold its rules and the
packaging test that builds the wheel from exactly what the image copies."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"


@dataclass(frozen=True, slots=True)
class Instruction:
    """One instruction: its stage (0 for the first FROM), keyword (upper case) and arguments."""

    stage: int
    keyword: str
    arguments: str

    def words(self) -> list[str]:
        """The arguments as the shell form splits them, or the exec form's JSON array."""
        if self.arguments.startswith("["):
            return list(json.loads(self.arguments))
        return shlex.split(self.arguments)


def read_dockerfile(path: Path = DOCKERFILE) -> list[Instruction]:
    """Every instruction, continuation lines joined and comments dropped."""
    instructions: list[Instruction] = []
    stage = -1
    pending = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # a comment inside a continued instruction does not end it either
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, arguments = (pending + stripped).partition(" ")
        pending = ""
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(stage, keyword, arguments.strip()))
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return instructions


def final_stage(instructions: list[Instruction]) -> list[Instruction]:
    """The instructions of the image that ships: the last stage."""
    last = max(instruction.stage for instruction in instructions)
    return [instruction for instruction in instructions if instruction.stage == last]


def copied_sources(instructions: list[Instruction]) -> list[str]:
    """What the COPY lines take from the build context (not from another stage)."""
    sources: list[str] = []
    for instruction in instructions:
        if instruction.keyword != "COPY":
            continue
        words = instruction.words()
        if any(word.startswith("--from=") for word in words):
            continue
        sources += [word.rstrip("/") for word in words[:-1] if not word.startswith("--")]
    return sources


def health_check_command(python: str = sys.executable) -> list[str]:
    """The image's HEALTHCHECK command (exec form), with ``python`` as its interpreter."""
    checks = [i for i in final_stage(read_dockerfile()) if i.keyword == "HEALTHCHECK"]
    assert len(checks) == 1, "one HEALTHCHECK in the image"
    _, _, command = checks[0].arguments.partition("CMD ")
    words = json.loads(command)
    assert words[0] == "python", words
    return [python, *words[1:]]
