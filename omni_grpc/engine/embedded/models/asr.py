"""Speech recognition with faster-whisper: a Whisper model (whisper_models.py) run with int8
weights on the CPU, and the decoding rules of Whisper's own ``transcribe``.

A turn is one short utterance, so we call the CTranslate2 model under faster-whisper directly:
one window, no timestamps, no segmenting, and the features encoded once however many times a
turn is decoded. The choices below were measured on the speech test set (scripts/speech_set.py,
the table in docs/engines.md): the word error rate of each against the time it adds between the
end of speech and the transcript.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from omni_grpc.audio.formats import samples_from_pcm16
from omni_grpc.engine.embedded.models.whisper_models import whisper_files
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ, pcm16_ms

# Whisper hallucinates on very short clips; a turn shorter than this is not worth decoding.
MIN_AUDIO_MS = 150.0
FRAME_MS = 10  # one mel frame
HOP_SAMPLES = CANONICAL_INPUT_RATE_HZ * FRAME_MS // 1000
WINDOW_FRAMES = 3000  # Whisper's window: 30 s, the only input length it was trained on
# A turn is padded to whole 10 s instead: the encoder's cost is the padded length's, so a sixth
# of the time here, and on the speech set it heard as well as the full window (docs/engines.md).
BUCKET_FRAMES = 1000
MAX_TOKENS = 224
BEAM_SIZE = 5  # Whisper's likeliest reading of a beam of 5 heard the set as well as of 10
# Speech is at most ~5 tokens a second; a cap a little above that stops a decoder that
# hallucinates in a loop (it does, on hums and tones) long before Whisper's own 224.
TOKENS_PER_S = 6.0
# Of the conversation so far, the prompt keeps the last this many tokens (Whisper's own
# transcribe keeps up to 223; a turn's context is a sentence or two).
PROMPT_TOKENS = 64
SAMPLES_PER_TEMPERATURE = 5  # Whisper's best_of
# A 10 ms frame this far below the turn's loudest is silence, to trim_trailing_silence.
TRIM_BELOW_PEAK_DB = 40.0
# Whisper heard a quiet turn worse (base, en-us and en-us+f3: 14.2 % of the words wrong as
# synthesized, 17.5 % at 20 dB quieter, 18.7 % at 35 dB quieter), so a turn is brought to the
# level of clear speech first; never up by more than this, for a turn of little but noise.
MAX_GAIN_DB = 30.0
LEVEL_DBFS = -12.0  # the loudest 10 ms of espeak-ng's clear speech, 9 to 14 dB below full scale
MIN_REPEATED_PHRASE = 3  # words; a shorter repeat may be meant ("New York, New York")


def _compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data))


def drop_repeat(text: str) -> str:
    """``text`` without a repeat of itself at its end: "Close the blinds in the office. Close
    the blinds in" is "Close the blinds in the office.".

    Past the end of the speech, in the padding, Whisper sometimes starts the turn over, until
    the token cap stops it. The repeat is too short for the compression ratio to catch, and
    on the speech set it was the one kind of error that was not mishearing. A text that is a
    phrase of at least MIN_REPEATED_PHRASE words said again (in whole or in part, two words
    or more) is cut after the phrase's first saying.
    """
    tokens = list(re.finditer(r"\S+", text))
    words = [re.sub(r"[^\w']", "", token.group()).lower() for token in tokens]
    for period in range(MIN_REPEATED_PHRASE, len(words) - 1):
        again = words[period:]
        first = words[: len(again)]
        # The cap may cut the repeat mid-word ("6." of "6.45").
        if again[:-1] == first[:-1] and first[-1].startswith(again[-1]):
            return text[: tokens[period - 1].end()]
    return text


def trim_trailing_silence(audio: np.ndarray, keep_ms: float) -> np.ndarray:
    """``audio`` without the silence after its last loud 10 ms frame beyond ``keep_ms``. A
    frame is loud within TRIM_BELOW_PEAK_DB of the loudest one, so steady noise under the
    speech counts as sound and a noisy turn is left whole."""
    power = _frame_power(audio)
    if power.size == 0:
        return audio
    loud = np.nonzero(power >= power.max() * 10 ** (-TRIM_BELOW_PEAK_DB / 10))[0]
    end = (int(loud[-1]) + 1) * HOP_SAMPLES + int(keep_ms / FRAME_MS) * HOP_SAMPLES
    return audio[:end]


def _frame_power(audio: np.ndarray) -> np.ndarray:
    frames = audio.size // HOP_SAMPLES
    return np.mean(audio[: frames * HOP_SAMPLES].reshape(frames, HOP_SAMPLES) ** 2, axis=1)


def level_to(audio: np.ndarray, dbfs: float) -> np.ndarray:
    """``audio`` scaled so that its loudest 10 ms frame is at ``dbfs`` (its mean power, in
    dB of full scale), by at most MAX_GAIN_DB up, so that a quiet room is not made a loud one."""
    power = _frame_power(audio)
    if power.size == 0 or power.max() <= 0:
        return audio
    gain_db = min(dbfs - 10 * np.log10(power.max()), MAX_GAIN_DB)
    return np.asarray(audio * 10 ** (gain_db / 20), dtype=np.float32)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decoding:
    """How a turn is decoded; the defaults are those chosen on the speech test set.

    * ``window_frames``: the turn is padded to whole multiples of this many frames, at most
      the 30 s window (WINDOW_FRAMES).
    * ``silence_padding``: the audio is padded with silence before its log-mel is taken, as
      in Whisper's training (the padding's log-mel is the spectrogram's floor); or, the
      default, the log-mel is padded with zeros, as faster-whisper does (a level above the
      floor). Against the training, zeros heard a point better on the speech set with base.
    * ``beam_size``: 1 is greedy.
    * ``temperatures``: the first decode is at the first; when its text repeats itself
      (compression ratio above ``compression_threshold``) or it is unsure (mean log
      probability below ``logprob_threshold``), the turn is decoded again, sampling at the
      next, keeping the best of SAMPLES_PER_TEMPERATURE samples. By default there is no
      next: Whisper's fallback gained nothing on the set.
    * ``no_speech_threshold``: a turn whose no-speech probability is above it, decoded
      unsure, was silence or noise: no text.
    * ``prompt``: the conversation so far (the previous turns' transcripts) goes before the
      turn as Whisper's previous-text prompt. Off: on the set, unrelated previous requests
      cost words, so the engine does not pass them.
    * ``initial_prompt``: a fixed text that goes before the turn as the previous-text prompt
      (before the conversation, when that is passed too); Whisper follows the style of its
      prompt. Empty: none.
    * ``timestamps``: decode with Whisper's timestamp tokens, the mode most of its training
      data was in, instead of its no-timestamps mode; the timestamps are dropped.
    * ``patience``, ``length_penalty``, ``repetition_penalty``: the beam search's, as
      faster-whisper passes them (1 is off for each).
    * ``level_dbfs``: the turn is scaled so that its loudest 10 ms frame is at this level
      (``level_to``); None leaves it as it came. The default, LEVEL_DBFS, made the set heard
      as well at 20 and 35 dB quieter as at its own level.
    * ``trailing_ms``: the silence after the turn's last loud frame is cut to at most this
      much; None keeps the turn as the detector cut it.
    """

    window_frames: int = BUCKET_FRAMES
    silence_padding: bool = False
    beam_size: int = BEAM_SIZE
    temperatures: tuple[float, ...] = (0.0,)
    compression_threshold: float = 2.4
    logprob_threshold: float = -1.0
    no_speech_threshold: float = 0.6
    prompt: bool = False
    initial_prompt: str = ""
    timestamps: bool = False
    patience: float = 1.0
    length_penalty: float = 1.0
    repetition_penalty: float = 1.0
    trailing_ms: float | None = None
    level_dbfs: float | None = LEVEL_DBFS


@dataclass(frozen=True, slots=True)
class Hypothesis:
    """One reading of a turn from Whisper's beam: its text, Whisper's log-probability of it
    (nats, the whole text's) and how many tokens it took."""

    text: str
    logprob: float
    tokens: int

    @property
    def per_token(self) -> float:
        return self.logprob / max(self.tokens, 1)


class Reranker(Protocol):
    """Chooses among the beam's readings of a turn (:mod:`.rescoring` asks the LM)."""

    def choose(self, hypotheses: Sequence[Hypothesis]) -> int:
        """The index of the reading to keep."""


@dataclass(frozen=True, slots=True)
class _Decoded:
    text: str
    logprob: float
    no_speech: float

    def fails(self, decoding: Decoding) -> bool:
        return (
            _compression_ratio(self.text) > decoding.compression_threshold
            or self.logprob < decoding.logprob_threshold
        )


class Transcriber:
    """One Whisper model; ``transcribe`` blocks, so callers run it in a worker thread."""

    def __init__(
        self,
        *,
        model: str = "base",
        cpu_threads: int = 2,
        decoding: Decoding | None = None,
        reranker: Reranker | None = None,
    ) -> None:
        from faster_whisper import WhisperModel  # type: ignore[import-untyped]
        from faster_whisper.tokenizer import Tokenizer  # type: ignore[import-untyped]

        found = whisper_files(model)
        self.model = model
        self.decoding = decoding or Decoding()
        # With a reranker, the beam's readings of a turn are all kept and it picks one;
        # without, Whisper's likeliest is the text.
        self.reranker = reranker
        self._whisper = WhisperModel(
            found.path,
            device="cpu",
            compute_type="int8",
            cpu_threads=cpu_threads,
            files=found.files,
        )
        self.multilingual = found.multilingual
        self._tokenizer_class = Tokenizer
        self._tokenizer = Tokenizer(
            self._whisper.hf_tokenizer,
            multilingual=found.multilingual,
            task="transcribe",
            language="en",
        )
        self._start = [*self._tokenizer.sot_sequence, self._tokenizer.no_timestamps]
        self._timed_start = list(self._tokenizer.sot_sequence)
        # The start of a decode in each language asked for: (untimed, timed).
        self._starts: dict[str, tuple[list[int], list[int]]] = {
            "en": (self._start, self._timed_start)
        }

    def _language(self, language: str) -> str:
        """The language a turn is heard in: the one asked for where the model knows several,
        else English (an English-only model, or none asked: the engine hears English)."""
        return language if language and self.multilingual else "en"

    def _start_of(self, language: str) -> tuple[list[int], list[int]]:
        """The start tokens of a decode in ``language`` (raises ValueError for a code Whisper
        does not know)."""
        starts = self._starts.get(language)
        if starts is None:
            tokenizer = self._tokenizer_class(
                self._whisper.hf_tokenizer,
                multilingual=True,
                task="transcribe",
                language=language,
            )
            sot = list(tokenizer.sot_sequence)
            starts = self._starts[language] = ([*sot, tokenizer.no_timestamps], sot)
        return starts

    def transcribe(
        self,
        pcm16: bytes,
        previous: str = "",
        first_reading: Callable[[str], None] | None = None,
        *,
        language: str = "",
        prompt: str = "",
    ) -> str:
        """The text of one turn of canonical input (Whisper's own 16 kHz); empty for silence
        or noise. ``previous`` is the conversation so far, used when ``decoding.prompt``.

        ``first_reading``, when given, is told Whisper's likeliest reading as soon as the beam
        has it, while the reranker still weighs the others: the transcript, wherever the
        reranker keeps it, so an answer can start on it. Never told without a reranker.

        ``language`` (an ISO-639-1 code; empty: English) is the language the turn is heard in,
        where the model knows more than English; ``prompt`` goes before the turn as Whisper's
        previous-text prompt, in place of ``decoding.initial_prompt``.
        """
        duration_ms = pcm16_ms(len(pcm16), CANONICAL_INPUT_RATE_HZ)
        if duration_ms < MIN_AUDIO_MS:
            return ""
        language = self._language(language)
        start, timed_start = self._start_of(language)
        audio = self._front(pcm16)
        previous = previous if self.decoding.prompt else ""
        if duration_ms > WINDOW_FRAMES * FRAME_MS:
            before = f"{prompt or self.decoding.initial_prompt} {previous}".strip()
            return self._transcribe_long(audio, before, language)
        encoded = self._encode(audio)
        opening = timed_start if self.decoding.timestamps else start
        context = self._prompt(previous, prompt, opening)
        spoken_tokens = 8 + int(TOKENS_PER_S * duration_ms / 1000)
        if self.decoding.timestamps:
            spoken_tokens += 4  # a segment's start and end, twice at most in a turn
        max_length = len(context) + min(MAX_TOKENS, spoken_tokens)
        best: _Decoded | None = None
        for temperature in self.decoding.temperatures:
            decoded = self._decode(encoded, context, max_length, temperature, first_reading)
            # Whisper's rule for "nothing was said": likely silence and an unsure decode.
            if (
                decoded.no_speech > self.decoding.no_speech_threshold
                and decoded.logprob < self.decoding.logprob_threshold
            ):
                return ""
            if best is None or decoded.logprob > best.logprob:
                best = decoded
            if not decoded.fails(self.decoding):
                return drop_repeat(decoded.text)
        assert best is not None
        # Every temperature failed. Text that repeats itself is a hallucination (a loop on a
        # hum or a tone): nothing. Merely unsure text is the best we heard.
        if _compression_ratio(best.text) > self.decoding.compression_threshold:
            return ""
        return drop_repeat(best.text)

    def hypothesis(self, pcm16: bytes, language: str = "") -> str:
        """A cheap guess at the words of a turn still being spoken: one greedy decode of the
        audio so far, no fallback, no repeat check. The turn's transcript is ``transcribe``'s;
        this only shows words while they are said (partial transcripts, in session.py)."""
        duration_ms = pcm16_ms(len(pcm16), CANONICAL_INPUT_RATE_HZ)
        if duration_ms < MIN_AUDIO_MS or duration_ms > WINDOW_FRAMES * FRAME_MS:
            return ""
        start = self._start_of(self._language(language))[0]
        return self._greedy(self._encode(self._front(pcm16)), duration_ms, start)

    def token_logprobs(
        self, pcm16: bytes, text: str, language: str = ""
    ) -> list[tuple[str, float]]:
        """Whisper's log-probability of each token of ``text`` read from the turn ``pcm16``:
        the probabilities of CTranslate2's alignment of the text to the audio (what
        faster-whisper reads its word probabilities from), for a session that asks for its
        transcripts' logprobs. One more encode of the turn; none for an empty text or a turn
        longer than Whisper's window."""
        duration_ms = pcm16_ms(len(pcm16), CANONICAL_INPUT_RATE_HZ)
        tokens = [t for t in self._tokenizer.encode(" " + text.strip()) if t < self._tokenizer.eot]
        if not text.strip() or not tokens or duration_ms > WINDOW_FRAMES * FRAME_MS:
            return []
        audio = self._front(pcm16)
        encoded = self._encode(audio)
        frames = max(1, min(audio.size // HOP_SAMPLES, WINDOW_FRAMES))
        sot = self._start_of(self._language(language))[1]
        result = self._whisper.model.align(encoded, sot, [tokens], frames)[0]
        return [
            (self._tokenizer.decode([token]), math.log(max(float(p), 1e-12)))
            for token, p in zip(tokens, result.text_token_probs, strict=False)
        ]

    def _greedy(self, encoded: Any, duration_ms: float, start: list[int]) -> str:
        max_length = len(start) + 8 + int(TOKENS_PER_S * duration_ms / 1000)
        result = self._whisper.model.generate(
            encoded,
            [start],
            max_length=min(max_length, len(start) + MAX_TOKENS),
            beam_size=1,
            return_no_speech_prob=True,
            suppress_blank=True,
        )[0]
        if result.no_speech_prob > self.decoding.no_speech_threshold:
            return ""
        ids = [t for t in result.sequences_ids[0] if t < self._tokenizer.eot]
        text: str = self._tokenizer.decode(ids).strip()
        return text

    def _front(self, pcm16: bytes) -> np.ndarray:
        """The turn's samples as Whisper is given them: trimmed and levelled as decided."""
        audio = samples_from_pcm16(pcm16)
        if self.decoding.trailing_ms is not None:
            audio = trim_trailing_silence(audio, self.decoding.trailing_ms)
        if self.decoding.level_dbfs is not None:
            audio = level_to(audio, self.decoding.level_dbfs)
        return audio

    def _encode(self, audio: np.ndarray) -> Any:
        import ctranslate2  # type: ignore[import-untyped]

        step = self.decoding.window_frames
        frames = min(-(-audio.size // HOP_SAMPLES // step) * step, WINDOW_FRAMES)
        if self.decoding.silence_padding:
            padded = np.pad(audio, (0, max(0, frames * HOP_SAMPLES - audio.size)))
            mel = self._whisper.feature_extractor(padded, padding=0)[:, :frames]
        else:
            mel = self._whisper.feature_extractor(audio)[:, :frames]
            mel = np.pad(mel, ((0, 0), (0, frames - mel.shape[1])))
        features = ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None]))
        return self._whisper.model.encode(features, to_cpu=False)

    def _prompt(self, previous: str, prompt: str, start: list[int]) -> list[int]:
        before = f"{prompt or self.decoding.initial_prompt} {previous}".strip()
        if not before:
            return start
        context = self._tokenizer.encode(" " + before)[-PROMPT_TOKENS:]
        return [self._tokenizer.sot_prev, *context, *start]

    def _decode(
        self,
        encoded: Any,
        prompt: list[int],
        max_length: int,
        temperature: float,
        first_reading: Callable[[str], None] | None = None,
    ) -> _Decoded:
        options: dict[str, Any] = {
            "beam_size": self.decoding.beam_size,
            "patience": self.decoding.patience,
            "length_penalty": self.decoding.length_penalty,
            "repetition_penalty": self.decoding.repetition_penalty,
        }
        # The beam's readings, when there is a beam and a reranker to choose among them.
        reranker = self.reranker if temperature == 0 and self.decoding.beam_size > 1 else None
        if reranker is not None:
            options["num_hypotheses"] = self.decoding.beam_size
        if temperature > 0:
            import ctranslate2

            ctranslate2.set_random_seed(0)  # the same turn is heard the same way every time
            options = {
                "beam_size": 1,
                "num_hypotheses": SAMPLES_PER_TEMPERATURE,
                "sampling_topk": 0,
                "sampling_temperature": temperature,
            }
        result = self._whisper.model.generate(
            encoded,
            [prompt],
            max_length=max_length,
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            **options,
        )[0]
        readings = [
            (float(score), self._tokenizer.decode([t for t in ids if t < self._tokenizer.eot]))
            for score, ids in zip(result.scores, result.sequences_ids, strict=True)
        ]
        if reranker is not None:
            # A score is the text's log-probability over its length ** length_penalty, as
            # faster-whisper reads it; the reranker weighs whole texts.
            whole = [
                Hypothesis(text.strip(), score * len(ids) ** self.decoding.length_penalty, len(ids))
                for (score, text), ids in zip(readings, result.sequences_ids, strict=True)
            ]
            if first_reading is not None:
                likeliest = _Decoded(readings[0][1].strip(), readings[0][0], 0.0)
                # What transcribe returns if the reranker keeps it (no fallback follows a
                # reading that does not fail, and one that does not fail is not silence).
                if not likeliest.fails(self.decoding):
                    first_reading(drop_repeat(likeliest.text))
            score, text = readings[reranker.choose(whole)]
        else:  # the beam's first; sampling's likeliest
            score, text = max(readings)
        return _Decoded(text.strip(), score, float(result.no_speech_prob))

    def _transcribe_long(self, audio: np.ndarray, previous: str, language: str) -> str:
        segments, _info = self._whisper.transcribe(
            audio,
            language=language,
            beam_size=self.decoding.beam_size,
            temperature=list(self.decoding.temperatures),
            initial_prompt=previous or None,
            without_timestamps=True,
            condition_on_previous_text=False,
            vad_filter=False,
        )
        return " ".join(segment.text.strip() for segment in segments).strip()
