"""The embedded engine's options: strings in, checked values out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from omni_grpc.engine.embedded.models.whisper_models import MODELS as ASR_MODELS
from omni_grpc.engine.kit.options import Converters, check_choice, check_range, parse_options

RESPONDERS = ("auto", "echo", "smollm2")
PACES = ("realtime", "fast")
SYNTHESIZERS = ("auto", "piper", "espeak")
TURN_JUDGES = ("both", "words", "sound")

_CONVERTERS: Converters = {
    "responder": str,
    "pace": str,
    "tts": str,
    "voice": str,
    "words_per_minute": int,
    "asr_model": str,
    "asr_beam_size": int,
    "asr_threads": int,
    "asr_rescoring": str,
    "min_speech_ms": float,
    "overlap_min_speech_ms": float,
    "overlap_pause_ms": float,
    "overlap_asr_model": str,
    "chunk_ms": int,
    "max_input_s": float,
    "queue_size": int,
    "server_vad": str,
    "partial_transcripts": str,
    "partial_every_ms": float,
    "answer_at_pause": str,
    "turn_judge": str,
    "turn_judges": str,
    "capacity": int,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbeddedOptions:
    """How the engine runs; every option is a string on the command line.

    * ``responder``: ``smollm2`` (the language model), ``echo`` ("You said: ..."), or
      ``auto`` (the default): SmolLM2 when its weights are installed, else echo.
    * ``pace``: ``realtime`` (default) releases audio no faster than it plays, so a
      barge-in finds the response still running; ``fast`` releases it as it is made.
    * ``tts``: ``espeak`` (the default: espeak-ng, robotic, the fastest, GPL only as a
      separate program), ``piper`` (the neural voice "joe", :mod:`.models.piper_voice`, from the
      optional ``neural-voice`` extra), or ``auto``: Piper when its voice is installed, else
      espeak-ng. Piper is not the default because the licence of the data its voice was
      fine-tuned from is unsettled for commercial use, and with SmolLM2 it keeps end of
      speech to first audio within 1 s only on a quiet machine (docs/licences.md,
      docs/engines.md).
    * ``voice``: the espeak-ng voice when a session names none it knows; default ``en-us``
      (the Piper voice has one speaker, whatever the name).
    * ``words_per_minute``: speaking rate, 80 to 450; default 175 (for Piper, its own
      rate scaled by words_per_minute / 175).
    * ``asr_model``: the Whisper that hears turns: ``base`` (the default) or ``tiny.en``,
      faster and less accurate (docs/engines.md has the word error rates and times).
    * ``asr_beam_size``: Whisper's beam, 1 (greedy) to 10; by default (0) 8 where SmolLM2
      re-ranks its readings (more to choose from) and 5 where it does not (docs/engines.md).
    * ``asr_threads``: threads of the speech recognizer; default 2.
    * ``asr_rescoring``: ``auto`` (the default) has SmolLM2 choose among the beam's readings
      of each turn (:mod:`.models.rescoring`) when it is loaded for the responder; ``on`` loads it
      for that even under the echo responder; ``off`` keeps Whisper's likeliest reading.
    * ``min_speech_ms``: speech shorter than this never starts a turn; default 64.
    * ``overlap_min_speech_ms``: the same for speech over a reply that is held while it is
      judged (interruptions judged, false ones resumed): a shorter bar stops the reply sooner,
      and a cough it lets through is resumed; default 32.
    * ``overlap_pause_ms``: the silence after which such speech counts as paused, its words
      read and the reply perhaps resumed; default 32 (a turn's pause: 96).
    * ``overlap_asr_model``: the Whisper that reads such speech (is it a backchannel, or an
      interruption?) while the reply waits on it: ``tiny.en`` (the default; about half
      ``base``'s time on a short overlap) or ``base`` (the turns' own, no second model).
    * ``chunk_ms``: length of one output audio chunk, 20 to 200; default 100.
    * ``max_input_s``: the most input audio one turn may hold; default 120.
    * ``queue_size``: the bound of each session's command and event queues; default 256.
    * ``server_vad``: ``on`` (default) offers server VAD and makes it the sessions' default;
      ``off`` leaves every turn to the client's commits (push to talk).
    * ``partial_transcripts``: ``on`` (default) sends the words of a turn while it is spoken
      (``input_transcription_delta``, :mod:`.partials`), from a greedy decode of the audio so
      far every ``partial_every_ms`` of speech under server VAD; ``off`` sends only the
      transcript of each committed turn.
    * ``partial_every_ms``: speech between two partial decodes, 300 to 5000; default 800. A
      decode still running when the next is due makes that one skip.
    * ``answer_at_pause``: ``on`` (default) lets the language model start on the answer to the
      transcript made at a pause while server VAD waits for the silence to end the turn
      (:mod:`.early_answer`); the response takes that text when the turn ends there. ``off``
      starts every answer at its response.
    * ``turn_judge``: ``auto`` (the default) judges the end of a turn from its words under
      semantic turn detection (:mod:`.end_of_turn`) wherever SmolLM2 is loaded (for the
      answers, or for rescoring); ``on`` loads it for that even under the echo responder;
      ``off`` serves semantic turn detection as a fixed silence (the eagerness's).
    * ``turn_judges``: who judges the end of a turn where it is judged: ``both`` (the default)
      Smart Turn by the sound of the speech (:mod:`.models.smart_turn`) and SmolLM2 by its
      words, their verdicts combined; ``words`` SmolLM2 alone; ``sound`` Smart Turn alone
      (docs/protocol.md#turn-taking has each one's figures). Without the Smart Turn model
      installed, ``both`` falls back to the words.
    * ``capacity``: the sessions it says it serves at once (what a server with ``--capacity``
      admits before new ones wait); default 2, as many answers as it writes side by side on
      two cores (docs/engines.md, several sessions at once).
    """

    responder: str = "auto"
    pace: str = "realtime"
    tts: str = "espeak"
    voice: str = "en-us"
    words_per_minute: int = 175
    asr_model: str = "base"
    asr_beam_size: int = 0
    asr_threads: int = 2
    asr_rescoring: str = "auto"
    min_speech_ms: float = 64.0
    overlap_min_speech_ms: float = 32.0
    overlap_pause_ms: float = 32.0
    overlap_asr_model: str = "tiny.en"
    chunk_ms: int = 100
    max_input_s: float = 120.0
    queue_size: int = 256
    server_vad: str = "on"
    partial_transcripts: str = "on"
    partial_every_ms: float = 800.0
    answer_at_pause: str = "on"
    turn_judge: str = "auto"
    turn_judges: str = "both"
    capacity: int = 2

    def __post_init__(self) -> None:
        check_choice("responder", self.responder, RESPONDERS)
        check_choice("pace", self.pace, PACES)
        check_choice("tts", self.tts, SYNTHESIZERS)
        check_range("words_per_minute", self.words_per_minute, 80, 450)
        check_choice("asr_model", self.asr_model, ASR_MODELS)
        check_range("asr_beam_size", self.asr_beam_size, 0, 10)
        check_range("asr_threads", self.asr_threads, 1, 16)
        check_choice("asr_rescoring", self.asr_rescoring, ("auto", "on", "off"))
        check_range("min_speech_ms", self.min_speech_ms, 0, 1000)
        check_range("overlap_min_speech_ms", self.overlap_min_speech_ms, 0, 1000)
        check_range("overlap_pause_ms", self.overlap_pause_ms, 32, 1000)
        check_choice("overlap_asr_model", self.overlap_asr_model, ASR_MODELS)
        check_range("chunk_ms", self.chunk_ms, 20, 200)
        check_range("max_input_s", self.max_input_s, 1, 3600)
        check_choice("server_vad", self.server_vad, ("on", "off"))
        check_range("queue_size", self.queue_size, 16)
        check_choice("partial_transcripts", self.partial_transcripts, ("on", "off"))
        check_range("partial_every_ms", self.partial_every_ms, 300, 5000)
        check_choice("answer_at_pause", self.answer_at_pause, ("on", "off"))
        check_choice("turn_judge", self.turn_judge, ("auto", "on", "off"))
        check_choice("turn_judges", self.turn_judges, TURN_JUDGES)
        check_range("capacity", self.capacity, 1, 4096)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> EmbeddedOptions:
        """Reads string options; raises ValueError naming any unknown key or bad value."""
        return cls(**parse_options("embedded", options, _CONVERTERS))  # type: ignore[arg-type]
