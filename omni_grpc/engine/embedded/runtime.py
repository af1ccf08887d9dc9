"""What every session of one embedded engine shares: the loaded models and worker threads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

from omni_grpc.engine.embedded.models.asr import Transcriber
from omni_grpc.engine.embedded.options import EmbeddedOptions
from omni_grpc.engine.embedded.responder import EchoResponder, Responder, SmolResponder
from omni_grpc.engine.embedded.tool_calls import CallWriter
from omni_grpc.engine.kit.end_of_turn import SoundScorer, TurnScorer
from omni_grpc.engine.kit.tts import Synthesizer
from omni_grpc.engine.kit.vad import SileroVad


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """Models loaded once per engine, and the threads that run them."""

    options: EmbeddedOptions
    vad: SileroVad
    asr: Transcriber
    tts: Synthesizer  # the Piper voice or espeak-ng (the tts option)
    echo: EchoResponder
    smol: SmolResponder | None
    # ASR and the language model share two threads (two cores); VAD has its own thread so
    # that speech is heard, and a barge-in lands, while both are busy.
    executor: Executor
    vad_executor: Executor
    calls: CallWriter | None = None  # SmolLM2's function calls, when it is loaded
    turn_scorer: TurnScorer | None = None  # SmolLM2's judgement of a turn's end, when loaded
    turn_ear: SoundScorer | None = None  # Smart Turn's, by the sound of the speech
    # The Whisper that reads speech over a reply (backchannel or interruption?): a smaller
    # one than the turns', since the reply waits on it; the turns' own where they are one.
    overlap_asr: Transcriber | None = None
    # Makes the Whisper called by a name, decoding as the turns' own does: for a session that
    # names another transcription model than the default (loaded at its first turn).
    load_asr: Callable[[str], Transcriber] | None = None
    _shelf: dict[str, Transcriber] = field(default_factory=dict)
    _loading: threading.Lock = field(default_factory=threading.Lock)

    def transcriber(self, model: str) -> Transcriber:
        """The Whisper called ``model`` (the default for ""), loaded at its first use; blocks,
        so only on a worker thread."""
        if not model or model == self.asr.model:
            return self.asr
        with self._loading:
            found = self._shelf.get(model)
            if found is None:
                if self.load_asr is None:
                    raise ValueError(f"no transcription model {model!r} on this engine")
                found = self._shelf[model] = self.load_asr(model)
            return found

    @property
    def overlap_reader(self) -> Transcriber:
        return self.overlap_asr or self.asr

    def responder(self, name: str) -> Responder:
        """The responder called ``name`` ("auto", "echo" or "smollm2"); echo if no LM."""
        if name == "echo" or self.smol is None:
            return self.echo
        return self.smol
