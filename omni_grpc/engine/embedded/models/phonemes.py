"""Text to IPA phonemes with the espeak-ng program, in the form Piper voices were trained on.

Piper voices read espeak-ng's IPA, clause by clause, with each clause's closing punctuation
kept as a phoneme of its own (the model pauses and sets the tone on it). The espeak-ng
program prints one line of IPA per clause but drops the punctuation, so the text is cut at
the same places here and the punctuation put back. espeak-ng runs as a subprocess (the kit's
:func:`~omni_grpc.engine.kit.tts.run_espeak`, as for the kit's voice), so the GPL program stays
a separate work from ours.
"""

from __future__ import annotations

import re

from omni_grpc.engine.kit.tts import espeak_path, run_espeak

# espeak-ng ends a clause at these marks when a space or the end follows ("7:30" is one).
_CLAUSE = re.compile(r"([^,.!?;:]*(?:[,.!?;:](?!\s|$)[^,.!?;:]*)*)([,.!?;:]*)(?:\s+|$)")
_WORD = re.compile(r"\w")


def clauses(text: str) -> list[tuple[str, str]]:
    """(words, closing mark) of each clause of ``text``; the mark is "" when there is none."""
    found = []
    for match in _CLAUSE.finditer(text.strip()):
        words, marks = " ".join(match.group(1).split()), match.group(2)
        if _WORD.search(words):  # a run of dots alone is no clause
            found.append((words, marks[:1]))
    return found


async def espeak_ipa(text: str, voice: str = "en-us") -> str:
    """The IPA of ``text`` as a Piper voice reads it: clauses with their punctuation."""
    parts = clauses(text)
    if not parts:
        return ""
    # One process for the whole text, one clause a line: espeak-ng ends a clause at a line end.
    lines = await _run("\n".join(words for words, _ in parts), voice)
    if len(lines) != len(parts):  # espeak-ng cut differently (an abbreviation): one clause
        return " ".join(lines) + parts[-1][1]
    return " ".join(line + mark for line, (_, mark) in zip(lines, parts, strict=True))


async def _run(text: str, voice: str) -> list[str]:
    out = await run_espeak(espeak_path(), ["-q", "--ipa", "-v", voice], text)
    return [line.strip() for line in out.decode("utf-8").splitlines() if line.strip()]
