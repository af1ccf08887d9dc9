"""Server-wide limits and defaults, and the capabilities handshake built from them."""

from __future__ import annotations

from dataclasses import dataclass, field

from omni_grpc.wire import pb, tenant_policy
from omni_grpc.wire.pcm import (
    CANONICAL_INPUT_RATE_HZ,
    CANONICAL_OUTPUT,
    SUPPORTED_ENCODINGS,
    SUPPORTED_RATES_HZ,
)

PROTOCOL_VERSION = "omni.duplex.v1"


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Every size, count and timeout the core enforces. Defaults follow the reference."""

    max_sessions: int = 64
    max_message_bytes: int = 15 * 1024 * 1024
    max_pending_input_bytes: int = 16 * 1024 * 1024
    # Input audio and queued output of all sessions together; the default lets every one of
    # max_sessions hold its whole max_pending_input_bytes.
    memory_budget_bytes: int = 64 * 16 * 1024 * 1024
    journal_ttl_s: float = 60.0
    journal_max_bytes: int = 8 * 1024 * 1024
    disconnect_grace_s: float = 30.0
    idle_timeout_s: float = 300.0
    max_idle_timeout_s: float = 3600.0
    ack_interval_s: float = 1.0
    open_retry_after_s: float = 1.0
    max_video_frames: int = 2
    max_text_chars: int = 100_000
    # Rate limits (see rate_limits.py): token buckets that hold `rate_burst_s` of their rate.
    # A 10 ms chunk stream of 48 kHz f32 stereo is 100 commands and 375 KiB a second; a session's
    # audio burst holds its whole max_pending_input_bytes.
    session_commands_per_s: float = 500.0
    session_audio_bytes_per_s: float = 8 * 1024 * 1024
    rate_burst_s: float = tenant_policy.BURST_S
    # What one API key may send, hold and start: the settings of omni_grpc/wire/tenant_policy.py,
    # which says what each becomes (max_sessions_per_key 0: a share of the sessions served at
    # once) and holds their defaults.
    key_commands_per_s: float = tenant_policy.COMMANDS_PER_S
    key_audio_bytes_per_s: float = tenant_policy.AUDIO_BYTES_PER_S
    max_sessions_per_key: int = 0
    key_memory_share: float = tenant_policy.MEMORY_SHARE
    key_opens_per_s: float = tenant_policy.OPENS_PER_S
    key_resumes_per_s: float = tenant_policy.RESUMES_PER_S


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineFeatures:
    """What the engine behind the sessions can do; engines declare this."""

    name: str
    input_encodings: tuple[pb.AudioEncoding.ValueType, ...] = SUPPORTED_ENCODINGS
    input_sample_rates_hz: tuple[int, ...] = SUPPORTED_RATES_HZ
    # The pcm16 rates the engine's sessions take as they are: an append at one of them reaches
    # the engine untouched (no resample, no copy); the edge converts any other to canonical input.
    native_input_rates_hz: tuple[int, ...] = (CANONICAL_INPUT_RATE_HZ,)
    output_encoding: pb.AudioEncoding.ValueType = CANONICAL_OUTPUT.encoding
    output_sample_rate_hz: int = CANONICAL_OUTPUT.sample_rate_hz
    supports_barge_in: bool = True
    supports_playback_ack: bool = True
    supports_server_vad: bool = False
    # Judges the end of a turn from its words (semantic VAD served as such).
    supports_semantic_vad: bool = False
    # Hears the words of speech over a reply (interruption by words).
    supports_interruption_by_words: bool = False
    # Its model may write several function calls in one answer (parallel_tool_calls).
    supports_parallel_tool_calls: bool = False
    # Takes a user item whose audio comes with it (ContentPart.audio), heard as a turn is.
    supports_input_audio_items: bool = False
    # Runs out-of-band responses and responses with their own input (CreateResponse.conversation
    # and input); and whether one runs beside the running response, or waits for its end.
    supports_out_of_band_responses: bool = False
    out_of_band_beside_response: bool = False
    # Honours every SessionConfig.truncation (counts the conversation against its context);
    # False: auto alone, the others refused.
    supports_truncation: bool = False
    # The noise reduction types it runs on the input (SessionConfig.noise_reduction); none:
    # only OFF is taken.
    noise_reduction_types: tuple[pb.NoiseReductionType.ValueType, ...] = ()
    # How much audio of its newest user items it keeps for item_retrieved; 0: none.
    item_audio_kept_ms: int = 0
    # The transcription (ASR) models a session may choose, the default first; empty: none of
    # its own (only an empty model is taken).
    transcription_models: tuple[str, ...] = ()
    # Gives the log-probabilities of its transcripts' tokens.
    supports_transcription_logprobs: bool = False
    chunk_period_ms: int = 0  # the engine's model unit; 0: input of any length
    # Sessions the engine serves at once (in real time, on what it runs on); 0: no bound it
    # knows. A server with a queue (``--capacity``) admits at most this many.
    capacity: int = 0
    default_model: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def capabilities(limits: Limits, engine: EngineFeatures) -> pb.Capabilities:
    """Builds the handshake sent in ``session_created`` and by GetCapabilities."""
    caps = pb.Capabilities(
        protocol_version=PROTOCOL_VERSION,
        engine=engine.name,
        input_encodings=list(engine.input_encodings),
        input_sample_rates_hz=list(engine.input_sample_rates_hz),
        output_audio_format=pb.AudioFormat(
            encoding=engine.output_encoding, sample_rate_hz=engine.output_sample_rate_hz
        ),
        max_message_bytes=limits.max_message_bytes,
        journal_max_bytes=limits.journal_max_bytes,
        supports_resume=True,
        supports_barge_in=engine.supports_barge_in,
        supports_playback_ack=engine.supports_playback_ack,
        supports_server_vad=engine.supports_server_vad,
        supports_semantic_vad=engine.supports_semantic_vad,
        supports_interruption_by_words=engine.supports_interruption_by_words,
        supports_parallel_tool_calls=engine.supports_parallel_tool_calls,
        supports_truncation=engine.supports_truncation,
        supports_input_audio_items=engine.supports_input_audio_items,
        item_audio_kept_ms=engine.item_audio_kept_ms,
        supports_out_of_band_responses=engine.supports_out_of_band_responses,
        out_of_band_beside_response=engine.out_of_band_beside_response,
        transcription_models=list(engine.transcription_models),
        supports_transcription_logprobs=engine.supports_transcription_logprobs,
        noise_reduction_types=list(engine.noise_reduction_types),
        max_pending_input_bytes=limits.max_pending_input_bytes,
        max_sessions=limits.max_sessions,
        chunk_period_ms=engine.chunk_period_ms,
    )
    caps.journal_window.FromMilliseconds(int(limits.journal_ttl_s * 1000))
    caps.disconnect_grace.FromMilliseconds(int(limits.disconnect_grace_s * 1000))
    caps.idle_timeout.FromMilliseconds(int(limits.idle_timeout_s * 1000))
    caps.ack_interval.FromMilliseconds(int(limits.ack_interval_s * 1000))
    return caps
