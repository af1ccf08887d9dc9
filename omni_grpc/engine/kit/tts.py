"""Speech synthesis with the espeak-ng program, sentence by sentence.

espeak-ng is small, fast (a sentence in a few tens of milliseconds) and deterministic, which
suits both a laptop and the tests. It runs as a subprocess, so the event loop waits on a pipe
rather than a thread, and the GPL program stays a separate work from ours. Its output (a WAV
at the voice's rate, 22.05 kHz for the standard voices) is resampled with libsoxr to
canonical output (pcm16 at 24 kHz).

:class:`SentenceSplitter` cuts a stream of text pieces into sentences, so the first sentence
of an answer is spoken while the language model still writes the rest.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Sequence
from typing import Protocol

from omni_grpc import audio
from omni_grpc.audio.formats import samples_from_pcm16, samples_to_pcm16
from omni_grpc.audio.wav import WavError, read_streamed_wav
from omni_grpc.wire.pcm import CANONICAL_OUTPUT_RATE_HZ

DEFAULT_VOICE = "en-us"
DEFAULT_WPM = 175
# espeak-ng voice names: a language tag with optional variants ("en-gb-x-rp", "en-us+f3").
_VOICE_NAME = re.compile(r"^[a-z]{2,3}(-[a-z0-9]+)*(\+[a-z0-9]+)?$")
_SENTENCE_END = re.compile(r"(?<=[.!?;:])[\"')\]]*\s+|\n+")
# A "sentence" longer than this is cut at its last comma or space, so one long run-on
# sentence cannot hold back the first audio.
MAX_SENTENCE_CHARS = 160
# The first phrase of an answer is cut after this many words (scripts/bench_voices.py: four
# words start espeak-ng's audio about two tokens sooner than six, and the voice says them in
# about a second, long enough for the next phrase to be written and synthesized behind it).
FIRST_WORDS = 4
# ... but not after a word that leans on the next one ("the capital of" is no phrase): the cut
# waits, at most this many words more, for a word that can end one.
_LEANING_WORDS = frozenset(
    (  # noqa: SIM905 (a list of words is easier to read as words)
        "a an the of to in on at for from with by and or but as than that this these those my "
        "your our their his her its is are was were be will would can could should do does not "
        "no very"
    ).split()
)
_MAX_WAIT_WORDS = 3


class Synthesizer(Protocol):
    """What a speech player speaks with: espeak-ng here, or an engine's own voice."""

    # The most words the first phrase of an answer holds (SentenceSplitter): a voice whose
    # synthesis takes longer starts on fewer, so its first audio comes about as soon.
    first_words: int

    async def synthesize(self, text: str, voice: str = DEFAULT_VOICE) -> bytes:
        """Canonical output audio of ``text``; empty for text with nothing to say."""
        ...


class TtsUnavailable(RuntimeError):
    """espeak-ng is not installed."""


def espeak_path() -> str:
    """The espeak-ng executable, or TtsUnavailable with what to install."""
    path = shutil.which("espeak-ng")
    if path is None:
        raise TtsUnavailable(
            "espeak-ng is not installed (Debian/Ubuntu: apt-get install "
            "espeak-ng); the engine speaks through it"
        )
    return path


def voice_name(requested: str) -> str:
    """The espeak-ng voice for a session's ``voice``; OpenAI names ("alloy") get the default."""
    return requested if _VOICE_NAME.match(requested or "") else DEFAULT_VOICE


class Espeak:
    """Synthesizes one sentence at a time; safe to call from many sessions at once."""

    first_words = FIRST_WORDS

    def __init__(self, *, words_per_minute: int = DEFAULT_WPM) -> None:
        self._program = espeak_path()
        self.words_per_minute = words_per_minute

    async def synthesize(self, text: str, voice: str = DEFAULT_VOICE) -> bytes:
        """Canonical output audio of ``text``; empty for text with nothing to say."""
        if not text.strip():
            return b""
        try:
            wav = await self._run(text, voice_name(voice))
        except TtsUnavailable:
            if voice_name(voice) == DEFAULT_VOICE:
                raise
            wav = await self._run(text, DEFAULT_VOICE)  # an unknown voice name: say it anyway
        try:
            rate, pcm = read_streamed_wav(wav)
        except WavError as error:
            raise TtsUnavailable(
                f"espeak-ng did not write a WAV file with samples: {error}"
            ) from None
        if not pcm:
            return b""
        resampled = audio.resample(samples_from_pcm16(pcm), rate, CANONICAL_OUTPUT_RATE_HZ)
        return samples_to_pcm16(resampled)

    async def _run(self, text: str, voice: str) -> bytes:
        wpm = str(self.words_per_minute)
        # A WAV header alone (44 bytes) is no speech.
        return await run_espeak(self._program, ["-v", voice, "-s", wpm, "--stdout"], text, 45)


async def run_espeak(program: str, options: Sequence[str], text: str, min_bytes: int = 0) -> bytes:
    """What espeak-ng (``program``) writes to stdout for ``text``; TtsUnavailable if it fails
    or writes fewer than ``min_bytes``. The kit's voice runs it for speech, the embedded
    engine for the phonemes of its Piper voice."""
    # The text goes through stdin, never argv, so no text can be taken for an option.
    process = await asyncio.create_subprocess_exec(
        program,
        *options,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await process.communicate(text.encode("utf-8"))
    except asyncio.CancelledError:
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise
    if process.returncode != 0 or len(out) < min_bytes:
        raise TtsUnavailable(
            f"espeak-ng failed ({process.returncode}): {err.decode(errors='replace').strip()[:200]}"
        )
    return out


class SentenceSplitter:
    """Cuts streamed text into sentences: ``push`` pieces, then ``flush`` the rest.

    The first piece of an answer is cut early, at its first comma or after
    ``first_words`` words (or a few more, so as not to end on a word like "the" or "of"): a
    small language model writes a few words a second on a busy CPU, and the user should hear
    the answer begin rather than wait for its first full stop.
    """

    def __init__(self, first_words: int = FIRST_WORDS) -> None:
        self._pending = ""
        self._first_words = first_words
        self._started = False

    def push(self, piece: str) -> list[str]:
        """Adds a piece of text; returns the sentences it completed, in order."""
        self._pending += piece
        sentences: list[str] = []
        while True:
            match = _SENTENCE_END.search(self._pending)
            if match is None:
                break
            sentences.append(self._pending[: match.end()])
            self._pending = self._pending[match.end() :]
        while len(self._pending) > MAX_SENTENCE_CHARS:
            cut = max(
                self._pending.rfind(", ", 0, MAX_SENTENCE_CHARS),
                self._pending.rfind(" ", 0, MAX_SENTENCE_CHARS),
            )
            cut = cut + 1 if cut > 0 else MAX_SENTENCE_CHARS
            sentences.append(self._pending[:cut])
            self._pending = self._pending[cut:]
        if not self._started and not sentences:
            sentences += self._first_phrase()
        sentences = [s for s in sentences if s.strip()]
        self._started = self._started or bool(sentences)
        return sentences

    def _first_phrase(self) -> list[str]:
        words = re.findall(r"\S+\s+", self._pending)  # complete words only
        for count, word in enumerate(words, start=1):
            if (count >= 2 and word.rstrip().endswith(",")) or self._phrase_ends(word, count):
                cut = sum(len(w) for w in words[:count])
                phrase, self._pending = self._pending[:cut], self._pending[cut:]
                return [phrase]
        return []

    def _phrase_ends(self, word: str, count: int) -> bool:
        if count < self._first_words:
            return False
        leans = word.strip().strip("\"'()").lower() in _LEANING_WORDS
        return not leans or count >= self._first_words + _MAX_WAIT_WORDS

    def flush(self) -> list[str]:
        """The text left over at the end of the stream, as a last sentence."""
        rest, self._pending = self._pending, ""
        return [rest] if rest.strip() else []
