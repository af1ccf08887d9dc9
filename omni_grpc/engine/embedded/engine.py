"""The embedded engine: loads its models once, then hosts sessions on them."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from omni_grpc.core.limits import EngineFeatures
from omni_grpc.engine import kit
from omni_grpc.engine.base import Engine, EngineError
from omni_grpc.engine.embedded.models.whisper_models import installed_models
from omni_grpc.engine.embedded.options import EmbeddedOptions
from omni_grpc.engine.embedded.runtime import Runtime
from omni_grpc.engine.embedded.session import EmbeddedSession
from omni_grpc.engine.kit import denoise
from omni_grpc.engine.kit.end_of_turn import SoundScorer
from omni_grpc.engine.kit.tts import Synthesizer
from omni_grpc.wire import pb
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ, pcm16_bytes

logger = logging.getLogger(__name__)

FEATURES = EngineFeatures(
    name="embedded",
    default_model="smollm2-135m-instruct",
    supports_server_vad=True,
    supports_semantic_vad=True,
    supports_interruption_by_words=True,
    supports_barge_in=True,
    supports_playback_ack=True,
    supports_input_audio_items=True,  # written down as a committed turn is
    item_audio_kept_ms=kit.ITEM_AUDIO_KEPT_MS,
    # Out-of-band responses run beside the running one: the LM lends each its own cache.
    supports_out_of_band_responses=True,
    out_of_band_beside_response=True,
    # Whisper's probability of each token of a transcript, from CTranslate2's alignment.
    supports_transcription_logprobs=True,
    # SmolLM2's tokenizer counts the conversation against its context (the echo responder:
    # a word a token, and no context of its own).
    supports_truncation=True,
    # RNNoise before what hears the input (kit/denoise.py); none where it is not installed.
    noise_reduction_types=denoise.TYPES,
)
# Without server VAD the engine hears no speech of its own: nothing to judge.
_CLIENT_COMMITS = dataclasses.replace(
    FEATURES,
    supports_server_vad=False,
    supports_semantic_vad=False,
    supports_interruption_by_words=False,
)


class EmbeddedEngine(Engine):
    """VAD, ASR, a responder and TTS on the CPU; see :class:`EmbeddedOptions` for options."""

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        self.options = EmbeddedOptions.parse(options or {})
        self.features = dataclasses.replace(
            FEATURES if self.options.server_vad == "on" else _CLIENT_COMMITS,
            capacity=self.options.capacity,
            # A session may name any Whisper installed; the asr_model option is the default.
            transcription_models=installed_models(self.options.asr_model),
            noise_reduction_types=denoise.offered(),
        )
        if not self._judges_turns():
            self.features = dataclasses.replace(self.features, supports_semantic_vad=False)
        self.runtime: Runtime | None = None
        self._executor = ThreadPoolExecutor(2, thread_name_prefix="embedded-ml")
        self._vad_executor = ThreadPoolExecutor(1, thread_name_prefix="embedded-vad")
        self._sessions: set[EmbeddedSession] = set()
        self._loading = asyncio.Lock()

    def _judges_turns(self) -> bool:
        """Whether SmolLM2 is to be loaded to judge the end of turns (if it is installed)."""
        options = self.options
        if options.turn_judge != "auto":
            return options.turn_judge == "on"
        return options.responder != "echo" or options.asr_rescoring == "on"

    async def start(self) -> None:
        """Loads Silero, Whisper, the voice and SmolLM2 (unless echo without rescoring), off
        the event loop."""
        async with self._loading:
            if self.runtime is not None:
                return
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self.load)

    def load(self) -> Runtime:
        """Loads every model now, blocking (``start`` runs this on a worker thread)."""
        if self.runtime is None:
            try:
                self.runtime = self._load()
            except Exception as error:
                raise EngineError(f"the embedded engine could not load: {error}") from error
        return self.runtime

    def _load(self) -> Runtime:
        from omni_grpc.engine.embedded.end_of_turn import SmolTurnScorer
        from omni_grpc.engine.embedded.models.asr import BEAM_SIZE, Decoding, Transcriber
        from omni_grpc.engine.embedded.models.lm import ModelMissing, SmolLM, find_smollm2
        from omni_grpc.engine.embedded.models.rescoring import RESCORED_BEAM, LmRescorer
        from omni_grpc.engine.embedded.responder import EchoResponder, SmolResponder
        from omni_grpc.engine.embedded.tool_calls import CallWriter
        from omni_grpc.engine.kit.vad import SileroVad

        tts = self._load_voice()
        options = self.options
        model: SmolLM | None = None
        smol: SmolResponder | None = None
        calls: CallWriter | None = None
        if options.responder != "echo" or options.asr_rescoring == "on" or self._judges_turns():
            try:
                model = SmolLM(find_smollm2())
            except ModelMissing:
                if options.responder == "smollm2" or "on" in (
                    options.asr_rescoring,
                    options.turn_judge,
                ):
                    raise
                logger.warning(
                    "SmolLM2 weights are not installed, so the embedded engine "
                    "answers with the echo responder"
                )
        if model is not None and options.responder != "echo":
            smol = SmolResponder(model, self._executor)
            calls = CallWriter(model)
            smol.warm_up()
        reranker = None
        # auto: where SmolLM2 answers (a model loaded only to judge turns does not rescore).
        if model is not None and (
            options.asr_rescoring == "on" or (options.asr_rescoring == "auto" and smol is not None)
        ):
            reranker = LmRescorer(model)
        scorer, ear = None, None
        if model is not None and self._judges_turns():
            judges = options.turn_judges
            scorer = SmolTurnScorer(model) if judges != "sound" else None
            ear = self._load_ear() if judges != "words" else None
            if scorer is None and ear is None:
                scorer = SmolTurnScorer(model)  # Smart Turn missing: the words alone
        else:
            self.features = dataclasses.replace(self.features, supports_semantic_vad=False)
        beam = options.asr_beam_size or (RESCORED_BEAM if reranker else BEAM_SIZE)

        def load_asr(name: str) -> Transcriber:
            return Transcriber(
                model=name,
                cpu_threads=options.asr_threads,
                decoding=Decoding(beam_size=beam),
                reranker=reranker,
            )

        asr = load_asr(options.asr_model)
        # The first decode of a process pays CTranslate2's warm-up; pay it here, not in a turn.
        asr.transcribe(bytes(pcm16_bytes(1000, CANONICAL_INPUT_RATE_HZ)))  # a second of silence
        overlap_asr = None
        if options.overlap_asr_model != options.asr_model:
            overlap_asr = Transcriber(
                model=options.overlap_asr_model, cpu_threads=options.asr_threads
            )
            overlap_asr.hypothesis(bytes(pcm16_bytes(1000, CANONICAL_INPUT_RATE_HZ)))
        return Runtime(
            options=self.options,
            vad=SileroVad(),
            asr=asr,
            tts=tts,
            echo=EchoResponder(),
            smol=smol,
            executor=self._executor,
            vad_executor=self._vad_executor,
            calls=calls,
            turn_scorer=scorer,
            turn_ear=ear,
            overlap_asr=overlap_asr,
            load_asr=load_asr,
        )

    def _load_ear(self) -> SoundScorer | None:
        """Smart Turn, the judge of a turn's end by its sound; None (the words judge alone)
        where it is not installed, unless it was asked for alone."""
        from omni_grpc.engine.embedded.models.smart_turn import SmartTurn, SmartTurnMissing

        try:
            return SmartTurn()
        except SmartTurnMissing:
            if self.options.turn_judges == "sound":
                raise
            logger.warning(
                "the Smart Turn model is not installed, so the end of a turn is judged "
                "by its words alone"
            )
            return None

    def _load_voice(self) -> Synthesizer:
        """The Piper voice (``tts`` piper, or auto when it is installed), else espeak-ng."""
        from omni_grpc.engine.embedded.models.piper_voice import PiperVoice, VoiceMissing, find_joe
        from omni_grpc.engine.kit.tts import Espeak

        wpm = self.options.words_per_minute
        espeak = Espeak(words_per_minute=wpm)  # also checks that espeak-ng is installed
        if self.options.tts == "espeak":
            return espeak
        try:
            model, config = find_joe()
        except VoiceMissing:
            if self.options.tts == "piper":
                raise
            logger.warning(
                "the Piper voice is not installed, so the embedded engine speaks with espeak-ng"
            )
            return espeak
        voice = PiperVoice(model, config, self._executor, words_per_minute=wpm)
        voice.infer(voice.phoneme_ids("ə"))  # the first run pays onnxruntime's set-up
        return voice

    async def open_session(self, session_id: str, config: pb.SessionConfig) -> EmbeddedSession:
        await self.start()
        assert self.runtime is not None
        session = EmbeddedSession(session_id, config, self.runtime, self._sessions.discard)
        self._sessions.add(session)
        return session

    async def stop(self) -> None:
        """Closes every session, then lets the worker threads go."""
        for session in list(self._sessions):
            await session.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._vad_executor.shutdown(wait=False, cancel_futures=True)
