import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AudioEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUDIO_ENCODING_UNSPECIFIED: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_PCM16: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_PCM_F32: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_G711_ULAW: _ClassVar[AudioEncoding]
    AUDIO_ENCODING_G711_ALAW: _ClassVar[AudioEncoding]

class Modality(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODALITY_UNSPECIFIED: _ClassVar[Modality]
    MODALITY_TEXT: _ClassVar[Modality]
    MODALITY_AUDIO: _ClassVar[Modality]

class TurnDetectionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TURN_DETECTION_TYPE_UNSPECIFIED: _ClassVar[TurnDetectionType]
    TURN_DETECTION_TYPE_NONE: _ClassVar[TurnDetectionType]
    TURN_DETECTION_TYPE_SERVER_VAD: _ClassVar[TurnDetectionType]

class OverlapPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERLAP_POLICY_UNSPECIFIED: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_LISTEN_ONLY: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_BARGE_IN_ON_SPEECH: _ClassVar[OverlapPolicy]

class PlaybackCommitPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PLAYBACK_COMMIT_POLICY_UNSPECIFIED: _ClassVar[PlaybackCommitPolicy]
    PLAYBACK_COMMIT_POLICY_COMMIT_ALL_ON_DONE: _ClassVar[PlaybackCommitPolicy]
    PLAYBACK_COMMIT_POLICY_ACK_ONLY: _ClassVar[PlaybackCommitPolicy]

class SessionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_STATE_UNSPECIFIED: _ClassVar[SessionState]
    SESSION_STATE_ATTACHED: _ClassVar[SessionState]
    SESSION_STATE_DETACHED: _ClassVar[SessionState]
    SESSION_STATE_CLOSED: _ClassVar[SessionState]
    SESSION_STATE_EXPIRED: _ClassVar[SessionState]

class TurnState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TURN_STATE_UNSPECIFIED: _ClassVar[TurnState]
    TURN_STATE_IDLE: _ClassVar[TurnState]
    TURN_STATE_USER_SPEAKING: _ClassVar[TurnState]
    TURN_STATE_ASSISTANT_RESPONDING: _ClassVar[TurnState]

class ItemRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ITEM_ROLE_UNSPECIFIED: _ClassVar[ItemRole]
    ITEM_ROLE_USER: _ClassVar[ItemRole]
    ITEM_ROLE_ASSISTANT: _ClassVar[ItemRole]
    ITEM_ROLE_SYSTEM: _ClassVar[ItemRole]

class ItemStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ITEM_STATUS_UNSPECIFIED: _ClassVar[ItemStatus]
    ITEM_STATUS_IN_PROGRESS: _ClassVar[ItemStatus]
    ITEM_STATUS_COMPLETED: _ClassVar[ItemStatus]
    ITEM_STATUS_INCOMPLETE: _ClassVar[ItemStatus]

class ContentType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTENT_TYPE_UNSPECIFIED: _ClassVar[ContentType]
    CONTENT_TYPE_INPUT_TEXT: _ClassVar[ContentType]
    CONTENT_TYPE_INPUT_AUDIO: _ClassVar[ContentType]
    CONTENT_TYPE_OUTPUT_TEXT: _ClassVar[ContentType]
    CONTENT_TYPE_OUTPUT_AUDIO: _ClassVar[ContentType]

class ResponseStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESPONSE_STATUS_UNSPECIFIED: _ClassVar[ResponseStatus]
    RESPONSE_STATUS_IN_PROGRESS: _ClassVar[ResponseStatus]
    RESPONSE_STATUS_COMPLETED: _ClassVar[ResponseStatus]
    RESPONSE_STATUS_CANCELLED: _ClassVar[ResponseStatus]
    RESPONSE_STATUS_FAILED: _ClassVar[ResponseStatus]
    RESPONSE_STATUS_INCOMPLETE: _ClassVar[ResponseStatus]

class ResyncReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESYNC_REASON_UNSPECIFIED: _ClassVar[ResyncReason]
    RESYNC_REASON_JOURNAL_GAP: _ClassVar[ResyncReason]
    RESYNC_REASON_JOURNAL_OVERFLOW: _ClassVar[ResyncReason]

class ExpiryReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXPIRY_REASON_UNSPECIFIED: _ClassVar[ExpiryReason]
    EXPIRY_REASON_DISCONNECT_GRACE: _ClassVar[ExpiryReason]
    EXPIRY_REASON_IDLE_TIMEOUT: _ClassVar[ExpiryReason]
    EXPIRY_REASON_ENGINE_FAILURE: _ClassVar[ExpiryReason]

class OverlapAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERLAP_ACTION_UNSPECIFIED: _ClassVar[OverlapAction]
    OVERLAP_ACTION_DROP: _ClassVar[OverlapAction]
    OVERLAP_ACTION_LISTEN: _ClassVar[OverlapAction]
    OVERLAP_ACTION_BARGE_IN: _ClassVar[OverlapAction]

class ErrorType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_TYPE_UNSPECIFIED: _ClassVar[ErrorType]
    ERROR_TYPE_INVALID_REQUEST: _ClassVar[ErrorType]
    ERROR_TYPE_RATE_LIMIT: _ClassVar[ErrorType]
    ERROR_TYPE_SERVER: _ClassVar[ErrorType]
AUDIO_ENCODING_UNSPECIFIED: AudioEncoding
AUDIO_ENCODING_PCM16: AudioEncoding
AUDIO_ENCODING_PCM_F32: AudioEncoding
AUDIO_ENCODING_G711_ULAW: AudioEncoding
AUDIO_ENCODING_G711_ALAW: AudioEncoding
MODALITY_UNSPECIFIED: Modality
MODALITY_TEXT: Modality
MODALITY_AUDIO: Modality
TURN_DETECTION_TYPE_UNSPECIFIED: TurnDetectionType
TURN_DETECTION_TYPE_NONE: TurnDetectionType
TURN_DETECTION_TYPE_SERVER_VAD: TurnDetectionType
OVERLAP_POLICY_UNSPECIFIED: OverlapPolicy
OVERLAP_POLICY_LISTEN_ONLY: OverlapPolicy
OVERLAP_POLICY_BARGE_IN_ON_SPEECH: OverlapPolicy
PLAYBACK_COMMIT_POLICY_UNSPECIFIED: PlaybackCommitPolicy
PLAYBACK_COMMIT_POLICY_COMMIT_ALL_ON_DONE: PlaybackCommitPolicy
PLAYBACK_COMMIT_POLICY_ACK_ONLY: PlaybackCommitPolicy
SESSION_STATE_UNSPECIFIED: SessionState
SESSION_STATE_ATTACHED: SessionState
SESSION_STATE_DETACHED: SessionState
SESSION_STATE_CLOSED: SessionState
SESSION_STATE_EXPIRED: SessionState
TURN_STATE_UNSPECIFIED: TurnState
TURN_STATE_IDLE: TurnState
TURN_STATE_USER_SPEAKING: TurnState
TURN_STATE_ASSISTANT_RESPONDING: TurnState
ITEM_ROLE_UNSPECIFIED: ItemRole
ITEM_ROLE_USER: ItemRole
ITEM_ROLE_ASSISTANT: ItemRole
ITEM_ROLE_SYSTEM: ItemRole
ITEM_STATUS_UNSPECIFIED: ItemStatus
ITEM_STATUS_IN_PROGRESS: ItemStatus
ITEM_STATUS_COMPLETED: ItemStatus
ITEM_STATUS_INCOMPLETE: ItemStatus
CONTENT_TYPE_UNSPECIFIED: ContentType
CONTENT_TYPE_INPUT_TEXT: ContentType
CONTENT_TYPE_INPUT_AUDIO: ContentType
CONTENT_TYPE_OUTPUT_TEXT: ContentType
CONTENT_TYPE_OUTPUT_AUDIO: ContentType
RESPONSE_STATUS_UNSPECIFIED: ResponseStatus
RESPONSE_STATUS_IN_PROGRESS: ResponseStatus
RESPONSE_STATUS_COMPLETED: ResponseStatus
RESPONSE_STATUS_CANCELLED: ResponseStatus
RESPONSE_STATUS_FAILED: ResponseStatus
RESPONSE_STATUS_INCOMPLETE: ResponseStatus
RESYNC_REASON_UNSPECIFIED: ResyncReason
RESYNC_REASON_JOURNAL_GAP: ResyncReason
RESYNC_REASON_JOURNAL_OVERFLOW: ResyncReason
EXPIRY_REASON_UNSPECIFIED: ExpiryReason
EXPIRY_REASON_DISCONNECT_GRACE: ExpiryReason
EXPIRY_REASON_IDLE_TIMEOUT: ExpiryReason
EXPIRY_REASON_ENGINE_FAILURE: ExpiryReason
OVERLAP_ACTION_UNSPECIFIED: OverlapAction
OVERLAP_ACTION_DROP: OverlapAction
OVERLAP_ACTION_LISTEN: OverlapAction
OVERLAP_ACTION_BARGE_IN: OverlapAction
ERROR_TYPE_UNSPECIFIED: ErrorType
ERROR_TYPE_INVALID_REQUEST: ErrorType
ERROR_TYPE_RATE_LIMIT: ErrorType
ERROR_TYPE_SERVER: ErrorType

class ConverseRequest(_message.Message):
    __slots__ = ("client_seq", "event_id", "open_session", "update_session", "resume_session", "close_session", "heartbeat", "ack_events", "append_input_audio", "commit_input_audio", "clear_input_audio", "clear_output_audio", "create_response", "cancel_response", "create_conversation_item", "retrieve_conversation_item", "delete_conversation_item", "truncate_conversation_item", "ack_playback", "cancel_input", "barge_in", "append_input_text")
    CLIENT_SEQ_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    OPEN_SESSION_FIELD_NUMBER: _ClassVar[int]
    UPDATE_SESSION_FIELD_NUMBER: _ClassVar[int]
    RESUME_SESSION_FIELD_NUMBER: _ClassVar[int]
    CLOSE_SESSION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    ACK_EVENTS_FIELD_NUMBER: _ClassVar[int]
    APPEND_INPUT_AUDIO_FIELD_NUMBER: _ClassVar[int]
    COMMIT_INPUT_AUDIO_FIELD_NUMBER: _ClassVar[int]
    CLEAR_INPUT_AUDIO_FIELD_NUMBER: _ClassVar[int]
    CLEAR_OUTPUT_AUDIO_FIELD_NUMBER: _ClassVar[int]
    CREATE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CREATE_CONVERSATION_ITEM_FIELD_NUMBER: _ClassVar[int]
    RETRIEVE_CONVERSATION_ITEM_FIELD_NUMBER: _ClassVar[int]
    DELETE_CONVERSATION_ITEM_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_CONVERSATION_ITEM_FIELD_NUMBER: _ClassVar[int]
    ACK_PLAYBACK_FIELD_NUMBER: _ClassVar[int]
    CANCEL_INPUT_FIELD_NUMBER: _ClassVar[int]
    BARGE_IN_FIELD_NUMBER: _ClassVar[int]
    APPEND_INPUT_TEXT_FIELD_NUMBER: _ClassVar[int]
    client_seq: int
    event_id: str
    open_session: OpenSession
    update_session: UpdateSession
    resume_session: ResumeSession
    close_session: CloseSession
    heartbeat: Heartbeat
    ack_events: AckEvents
    append_input_audio: AppendInputAudio
    commit_input_audio: CommitInputAudio
    clear_input_audio: ClearInputAudio
    clear_output_audio: ClearOutputAudio
    create_response: CreateResponse
    cancel_response: CancelResponse
    create_conversation_item: CreateConversationItem
    retrieve_conversation_item: RetrieveConversationItem
    delete_conversation_item: DeleteConversationItem
    truncate_conversation_item: TruncateConversationItem
    ack_playback: AckPlayback
    cancel_input: CancelInput
    barge_in: BargeIn
    append_input_text: AppendInputText
    def __init__(self, client_seq: _Optional[int] = ..., event_id: _Optional[str] = ..., open_session: _Optional[_Union[OpenSession, _Mapping]] = ..., update_session: _Optional[_Union[UpdateSession, _Mapping]] = ..., resume_session: _Optional[_Union[ResumeSession, _Mapping]] = ..., close_session: _Optional[_Union[CloseSession, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., ack_events: _Optional[_Union[AckEvents, _Mapping]] = ..., append_input_audio: _Optional[_Union[AppendInputAudio, _Mapping]] = ..., commit_input_audio: _Optional[_Union[CommitInputAudio, _Mapping]] = ..., clear_input_audio: _Optional[_Union[ClearInputAudio, _Mapping]] = ..., clear_output_audio: _Optional[_Union[ClearOutputAudio, _Mapping]] = ..., create_response: _Optional[_Union[CreateResponse, _Mapping]] = ..., cancel_response: _Optional[_Union[CancelResponse, _Mapping]] = ..., create_conversation_item: _Optional[_Union[CreateConversationItem, _Mapping]] = ..., retrieve_conversation_item: _Optional[_Union[RetrieveConversationItem, _Mapping]] = ..., delete_conversation_item: _Optional[_Union[DeleteConversationItem, _Mapping]] = ..., truncate_conversation_item: _Optional[_Union[TruncateConversationItem, _Mapping]] = ..., ack_playback: _Optional[_Union[AckPlayback, _Mapping]] = ..., cancel_input: _Optional[_Union[CancelInput, _Mapping]] = ..., barge_in: _Optional[_Union[BargeIn, _Mapping]] = ..., append_input_text: _Optional[_Union[AppendInputText, _Mapping]] = ...) -> None: ...

class ConverseResponse(_message.Message):
    __slots__ = ("seq", "applied_client_seq", "session_created", "session_updated", "session_resumed", "session_replaced", "resync_required", "session_expired", "session_closed", "heartbeat_ack", "going_away", "speech_started", "speech_stopped", "input_committed", "input_cleared", "item_added", "item_done", "item_retrieved", "item_deleted", "item_truncated", "input_transcription", "response_created", "output_audio_delta", "output_audio_transcript_delta", "output_text_delta", "response_done", "response_listen", "response_speak", "playback_acknowledged", "output_audio_cleared", "overlap_decision", "error")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    APPLIED_CLIENT_SEQ_FIELD_NUMBER: _ClassVar[int]
    SESSION_CREATED_FIELD_NUMBER: _ClassVar[int]
    SESSION_UPDATED_FIELD_NUMBER: _ClassVar[int]
    SESSION_RESUMED_FIELD_NUMBER: _ClassVar[int]
    SESSION_REPLACED_FIELD_NUMBER: _ClassVar[int]
    RESYNC_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    SESSION_EXPIRED_FIELD_NUMBER: _ClassVar[int]
    SESSION_CLOSED_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_ACK_FIELD_NUMBER: _ClassVar[int]
    GOING_AWAY_FIELD_NUMBER: _ClassVar[int]
    SPEECH_STARTED_FIELD_NUMBER: _ClassVar[int]
    SPEECH_STOPPED_FIELD_NUMBER: _ClassVar[int]
    INPUT_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    INPUT_CLEARED_FIELD_NUMBER: _ClassVar[int]
    ITEM_ADDED_FIELD_NUMBER: _ClassVar[int]
    ITEM_DONE_FIELD_NUMBER: _ClassVar[int]
    ITEM_RETRIEVED_FIELD_NUMBER: _ClassVar[int]
    ITEM_DELETED_FIELD_NUMBER: _ClassVar[int]
    ITEM_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    INPUT_TRANSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_CREATED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_AUDIO_DELTA_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_AUDIO_TRANSCRIPT_DELTA_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_DONE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_LISTEN_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_SPEAK_FIELD_NUMBER: _ClassVar[int]
    PLAYBACK_ACKNOWLEDGED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_AUDIO_CLEARED_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_DECISION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    seq: int
    applied_client_seq: int
    session_created: SessionCreated
    session_updated: SessionUpdated
    session_resumed: SessionResumed
    session_replaced: SessionReplaced
    resync_required: ResyncRequired
    session_expired: SessionExpired
    session_closed: SessionClosed
    heartbeat_ack: HeartbeatAck
    going_away: GoingAway
    speech_started: SpeechStarted
    speech_stopped: SpeechStopped
    input_committed: InputCommitted
    input_cleared: InputCleared
    item_added: ItemAdded
    item_done: ItemDone
    item_retrieved: ItemRetrieved
    item_deleted: ItemDeleted
    item_truncated: ItemTruncated
    input_transcription: InputTranscription
    response_created: ResponseCreated
    output_audio_delta: OutputAudioDelta
    output_audio_transcript_delta: OutputAudioTranscriptDelta
    output_text_delta: OutputTextDelta
    response_done: ResponseDone
    response_listen: ResponseListen
    response_speak: ResponseSpeak
    playback_acknowledged: PlaybackAcknowledged
    output_audio_cleared: OutputAudioCleared
    overlap_decision: OverlapDecision
    error: Error
    def __init__(self, seq: _Optional[int] = ..., applied_client_seq: _Optional[int] = ..., session_created: _Optional[_Union[SessionCreated, _Mapping]] = ..., session_updated: _Optional[_Union[SessionUpdated, _Mapping]] = ..., session_resumed: _Optional[_Union[SessionResumed, _Mapping]] = ..., session_replaced: _Optional[_Union[SessionReplaced, _Mapping]] = ..., resync_required: _Optional[_Union[ResyncRequired, _Mapping]] = ..., session_expired: _Optional[_Union[SessionExpired, _Mapping]] = ..., session_closed: _Optional[_Union[SessionClosed, _Mapping]] = ..., heartbeat_ack: _Optional[_Union[HeartbeatAck, _Mapping]] = ..., going_away: _Optional[_Union[GoingAway, _Mapping]] = ..., speech_started: _Optional[_Union[SpeechStarted, _Mapping]] = ..., speech_stopped: _Optional[_Union[SpeechStopped, _Mapping]] = ..., input_committed: _Optional[_Union[InputCommitted, _Mapping]] = ..., input_cleared: _Optional[_Union[InputCleared, _Mapping]] = ..., item_added: _Optional[_Union[ItemAdded, _Mapping]] = ..., item_done: _Optional[_Union[ItemDone, _Mapping]] = ..., item_retrieved: _Optional[_Union[ItemRetrieved, _Mapping]] = ..., item_deleted: _Optional[_Union[ItemDeleted, _Mapping]] = ..., item_truncated: _Optional[_Union[ItemTruncated, _Mapping]] = ..., input_transcription: _Optional[_Union[InputTranscription, _Mapping]] = ..., response_created: _Optional[_Union[ResponseCreated, _Mapping]] = ..., output_audio_delta: _Optional[_Union[OutputAudioDelta, _Mapping]] = ..., output_audio_transcript_delta: _Optional[_Union[OutputAudioTranscriptDelta, _Mapping]] = ..., output_text_delta: _Optional[_Union[OutputTextDelta, _Mapping]] = ..., response_done: _Optional[_Union[ResponseDone, _Mapping]] = ..., response_listen: _Optional[_Union[ResponseListen, _Mapping]] = ..., response_speak: _Optional[_Union[ResponseSpeak, _Mapping]] = ..., playback_acknowledged: _Optional[_Union[PlaybackAcknowledged, _Mapping]] = ..., output_audio_cleared: _Optional[_Union[OutputAudioCleared, _Mapping]] = ..., overlap_decision: _Optional[_Union[OverlapDecision, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class GetCapabilitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetCapabilitiesResponse(_message.Message):
    __slots__ = ("capabilities",)
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    capabilities: Capabilities
    def __init__(self, capabilities: _Optional[_Union[Capabilities, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id", "resume_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    resume_token: str
    def __init__(self, session_id: _Optional[str] = ..., resume_token: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session", "last_seq", "applied_client_seq")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    APPLIED_CLIENT_SEQ_FIELD_NUMBER: _ClassVar[int]
    session: Session
    last_seq: int
    applied_client_seq: int
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., last_seq: _Optional[int] = ..., applied_client_seq: _Optional[int] = ...) -> None: ...

class AudioFormat(_message.Message):
    __slots__ = ("encoding", "sample_rate_hz")
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    encoding: AudioEncoding
    sample_rate_hz: int
    def __init__(self, encoding: _Optional[_Union[AudioEncoding, str]] = ..., sample_rate_hz: _Optional[int] = ...) -> None: ...

class TurnDetection(_message.Message):
    __slots__ = ("type", "threshold", "prefix_padding_ms", "silence_duration_ms", "create_response", "interrupt_response")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    PREFIX_PADDING_MS_FIELD_NUMBER: _ClassVar[int]
    SILENCE_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    CREATE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    INTERRUPT_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    type: TurnDetectionType
    threshold: float
    prefix_padding_ms: int
    silence_duration_ms: int
    create_response: bool
    interrupt_response: bool
    def __init__(self, type: _Optional[_Union[TurnDetectionType, str]] = ..., threshold: _Optional[float] = ..., prefix_padding_ms: _Optional[int] = ..., silence_duration_ms: _Optional[int] = ..., create_response: _Optional[bool] = ..., interrupt_response: _Optional[bool] = ...) -> None: ...

class InputTranscriptionConfig(_message.Message):
    __slots__ = ("enabled", "model", "language")
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    enabled: bool
    model: str
    language: str
    def __init__(self, enabled: _Optional[bool] = ..., model: _Optional[str] = ..., language: _Optional[str] = ...) -> None: ...

class SessionConfig(_message.Message):
    __slots__ = ("model", "output_modalities", "instructions", "voice", "input_audio_format", "output_audio_format", "turn_detection", "overlap_policy", "playback_commit_policy", "idle_timeout", "temperature", "max_output_tokens", "input_transcription", "engine_options")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    INPUT_AUDIO_FORMAT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_AUDIO_FORMAT_FIELD_NUMBER: _ClassVar[int]
    TURN_DETECTION_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_POLICY_FIELD_NUMBER: _ClassVar[int]
    PLAYBACK_COMMIT_POLICY_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TRANSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    ENGINE_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    model: str
    output_modalities: _containers.RepeatedScalarFieldContainer[Modality]
    instructions: str
    voice: str
    input_audio_format: AudioFormat
    output_audio_format: AudioFormat
    turn_detection: TurnDetection
    overlap_policy: OverlapPolicy
    playback_commit_policy: PlaybackCommitPolicy
    idle_timeout: _duration_pb2.Duration
    temperature: float
    max_output_tokens: int
    input_transcription: InputTranscriptionConfig
    engine_options: _struct_pb2.Struct
    def __init__(self, model: _Optional[str] = ..., output_modalities: _Optional[_Iterable[_Union[Modality, str]]] = ..., instructions: _Optional[str] = ..., voice: _Optional[str] = ..., input_audio_format: _Optional[_Union[AudioFormat, _Mapping]] = ..., output_audio_format: _Optional[_Union[AudioFormat, _Mapping]] = ..., turn_detection: _Optional[_Union[TurnDetection, _Mapping]] = ..., overlap_policy: _Optional[_Union[OverlapPolicy, str]] = ..., playback_commit_policy: _Optional[_Union[PlaybackCommitPolicy, str]] = ..., idle_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., temperature: _Optional[float] = ..., max_output_tokens: _Optional[int] = ..., input_transcription: _Optional[_Union[InputTranscriptionConfig, _Mapping]] = ..., engine_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("id", "config", "state", "turn_state", "epoch")
    ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TURN_STATE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    id: str
    config: SessionConfig
    state: SessionState
    turn_state: TurnState
    epoch: int
    def __init__(self, id: _Optional[str] = ..., config: _Optional[_Union[SessionConfig, _Mapping]] = ..., state: _Optional[_Union[SessionState, str]] = ..., turn_state: _Optional[_Union[TurnState, str]] = ..., epoch: _Optional[int] = ...) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("protocol_version", "engine", "input_encodings", "input_sample_rates_hz", "output_audio_format", "max_message_bytes", "journal_window", "journal_max_bytes", "disconnect_grace", "idle_timeout", "supports_resume", "supports_barge_in", "supports_playback_ack", "supports_server_vad", "max_pending_input_bytes", "max_sessions", "ack_interval")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    INPUT_ENCODINGS_FIELD_NUMBER: _ClassVar[int]
    INPUT_SAMPLE_RATES_HZ_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_AUDIO_FORMAT_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_WINDOW_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISCONNECT_GRACE_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_RESUME_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_BARGE_IN_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_PLAYBACK_ACK_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_SERVER_VAD_FIELD_NUMBER: _ClassVar[int]
    MAX_PENDING_INPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    ACK_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    protocol_version: str
    engine: str
    input_encodings: _containers.RepeatedScalarFieldContainer[AudioEncoding]
    input_sample_rates_hz: _containers.RepeatedScalarFieldContainer[int]
    output_audio_format: AudioFormat
    max_message_bytes: int
    journal_window: _duration_pb2.Duration
    journal_max_bytes: int
    disconnect_grace: _duration_pb2.Duration
    idle_timeout: _duration_pb2.Duration
    supports_resume: bool
    supports_barge_in: bool
    supports_playback_ack: bool
    supports_server_vad: bool
    max_pending_input_bytes: int
    max_sessions: int
    ack_interval: _duration_pb2.Duration
    def __init__(self, protocol_version: _Optional[str] = ..., engine: _Optional[str] = ..., input_encodings: _Optional[_Iterable[_Union[AudioEncoding, str]]] = ..., input_sample_rates_hz: _Optional[_Iterable[int]] = ..., output_audio_format: _Optional[_Union[AudioFormat, _Mapping]] = ..., max_message_bytes: _Optional[int] = ..., journal_window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., journal_max_bytes: _Optional[int] = ..., disconnect_grace: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., idle_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., supports_resume: _Optional[bool] = ..., supports_barge_in: _Optional[bool] = ..., supports_playback_ack: _Optional[bool] = ..., supports_server_vad: _Optional[bool] = ..., max_pending_input_bytes: _Optional[int] = ..., max_sessions: _Optional[int] = ..., ack_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ContentPart(_message.Message):
    __slots__ = ("type", "text", "transcript", "audio_duration_ms")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    AUDIO_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    type: ContentType
    text: str
    transcript: str
    audio_duration_ms: float
    def __init__(self, type: _Optional[_Union[ContentType, str]] = ..., text: _Optional[str] = ..., transcript: _Optional[str] = ..., audio_duration_ms: _Optional[float] = ...) -> None: ...

class ConversationItem(_message.Message):
    __slots__ = ("id", "role", "status", "content")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    role: ItemRole
    status: ItemStatus
    content: _containers.RepeatedCompositeFieldContainer[ContentPart]
    def __init__(self, id: _Optional[str] = ..., role: _Optional[_Union[ItemRole, str]] = ..., status: _Optional[_Union[ItemStatus, str]] = ..., content: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "input_audio_ms", "output_audio_ms")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INPUT_AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    input_audio_ms: float
    output_audio_ms: float
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., input_audio_ms: _Optional[float] = ..., output_audio_ms: _Optional[float] = ...) -> None: ...

class TurnLatency(_message.Message):
    __slots__ = ("first_text_ms", "first_audio_ms", "total_ms", "real_time_factor")
    FIRST_TEXT_MS_FIELD_NUMBER: _ClassVar[int]
    FIRST_AUDIO_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    REAL_TIME_FACTOR_FIELD_NUMBER: _ClassVar[int]
    first_text_ms: float
    first_audio_ms: float
    total_ms: float
    real_time_factor: float
    def __init__(self, first_text_ms: _Optional[float] = ..., first_audio_ms: _Optional[float] = ..., total_ms: _Optional[float] = ..., real_time_factor: _Optional[float] = ...) -> None: ...

class Response(_message.Message):
    __slots__ = ("id", "status", "status_reason", "output", "usage", "latency", "output_modalities")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_REASON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    LATENCY_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    id: str
    status: ResponseStatus
    status_reason: str
    output: _containers.RepeatedCompositeFieldContainer[ConversationItem]
    usage: Usage
    latency: TurnLatency
    output_modalities: _containers.RepeatedScalarFieldContainer[Modality]
    def __init__(self, id: _Optional[str] = ..., status: _Optional[_Union[ResponseStatus, str]] = ..., status_reason: _Optional[str] = ..., output: _Optional[_Iterable[_Union[ConversationItem, _Mapping]]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., latency: _Optional[_Union[TurnLatency, _Mapping]] = ..., output_modalities: _Optional[_Iterable[_Union[Modality, str]]] = ...) -> None: ...

class VideoFrame(_message.Message):
    __slots__ = ("data", "mime_type")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ...) -> None: ...

class OpenSession(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: SessionConfig
    def __init__(self, config: _Optional[_Union[SessionConfig, _Mapping]] = ...) -> None: ...

class UpdateSession(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: SessionConfig
    def __init__(self, config: _Optional[_Union[SessionConfig, _Mapping]] = ...) -> None: ...

class ResumeSession(_message.Message):
    __slots__ = ("session_id", "resume_token", "last_received_seq")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LAST_RECEIVED_SEQ_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    resume_token: str
    last_received_seq: int
    def __init__(self, session_id: _Optional[str] = ..., resume_token: _Optional[str] = ..., last_received_seq: _Optional[int] = ...) -> None: ...

class CloseSession(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AckEvents(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class AppendInputAudio(_message.Message):
    __slots__ = ("audio", "encoding", "sample_rate_hz", "audio_end_ms", "video_frames")
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    AUDIO_END_MS_FIELD_NUMBER: _ClassVar[int]
    VIDEO_FRAMES_FIELD_NUMBER: _ClassVar[int]
    audio: bytes
    encoding: AudioEncoding
    sample_rate_hz: int
    audio_end_ms: float
    video_frames: _containers.RepeatedCompositeFieldContainer[VideoFrame]
    def __init__(self, audio: _Optional[bytes] = ..., encoding: _Optional[_Union[AudioEncoding, str]] = ..., sample_rate_hz: _Optional[int] = ..., audio_end_ms: _Optional[float] = ..., video_frames: _Optional[_Iterable[_Union[VideoFrame, _Mapping]]] = ...) -> None: ...

class CommitInputAudio(_message.Message):
    __slots__ = ("create_response",)
    CREATE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    create_response: bool
    def __init__(self, create_response: _Optional[bool] = ...) -> None: ...

class ClearInputAudio(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClearOutputAudio(_message.Message):
    __slots__ = ("response_id",)
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    def __init__(self, response_id: _Optional[str] = ...) -> None: ...

class CreateResponse(_message.Message):
    __slots__ = ("output_modalities", "instructions", "metadata")
    OUTPUT_MODALITIES_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    output_modalities: _containers.RepeatedScalarFieldContainer[Modality]
    instructions: str
    metadata: _struct_pb2.Struct
    def __init__(self, output_modalities: _Optional[_Iterable[_Union[Modality, str]]] = ..., instructions: _Optional[str] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("response_id",)
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    def __init__(self, response_id: _Optional[str] = ...) -> None: ...

class CreateConversationItem(_message.Message):
    __slots__ = ("item", "previous_item_id")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    item: ConversationItem
    previous_item_id: str
    def __init__(self, item: _Optional[_Union[ConversationItem, _Mapping]] = ..., previous_item_id: _Optional[str] = ...) -> None: ...

class RetrieveConversationItem(_message.Message):
    __slots__ = ("item_id",)
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    def __init__(self, item_id: _Optional[str] = ...) -> None: ...

class DeleteConversationItem(_message.Message):
    __slots__ = ("item_id",)
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    def __init__(self, item_id: _Optional[str] = ...) -> None: ...

class TruncateConversationItem(_message.Message):
    __slots__ = ("item_id", "content_index", "audio_end_ms")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    AUDIO_END_MS_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    content_index: int
    audio_end_ms: float
    def __init__(self, item_id: _Optional[str] = ..., content_index: _Optional[int] = ..., audio_end_ms: _Optional[float] = ...) -> None: ...

class AckPlayback(_message.Message):
    __slots__ = ("played_ms", "committed_ms", "response_id", "item_id", "truncate")
    PLAYED_MS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    played_ms: float
    committed_ms: float
    response_id: str
    item_id: str
    truncate: bool
    def __init__(self, played_ms: _Optional[float] = ..., committed_ms: _Optional[float] = ..., response_id: _Optional[str] = ..., item_id: _Optional[str] = ..., truncate: _Optional[bool] = ...) -> None: ...

class CancelInput(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BargeIn(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AppendInputText(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class SessionCreated(_message.Message):
    __slots__ = ("session", "capabilities", "resume_token", "attachment_generation")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ATTACHMENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    capabilities: Capabilities
    resume_token: str
    attachment_generation: int
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., capabilities: _Optional[_Union[Capabilities, _Mapping]] = ..., resume_token: _Optional[str] = ..., attachment_generation: _Optional[int] = ...) -> None: ...

class SessionUpdated(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class SessionResumed(_message.Message):
    __slots__ = ("session", "resume_token", "attachment_generation", "replayed_events")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ATTACHMENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_EVENTS_FIELD_NUMBER: _ClassVar[int]
    session: Session
    resume_token: str
    attachment_generation: int
    replayed_events: int
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., resume_token: _Optional[str] = ..., attachment_generation: _Optional[int] = ..., replayed_events: _Optional[int] = ...) -> None: ...

class SessionReplaced(_message.Message):
    __slots__ = ("session_id", "attachment_generation")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ATTACHMENT_GENERATION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    attachment_generation: int
    def __init__(self, session_id: _Optional[str] = ..., attachment_generation: _Optional[int] = ...) -> None: ...

class ResyncRequired(_message.Message):
    __slots__ = ("session_id", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    reason: ResyncReason
    def __init__(self, session_id: _Optional[str] = ..., reason: _Optional[_Union[ResyncReason, str]] = ...) -> None: ...

class SessionExpired(_message.Message):
    __slots__ = ("session_id", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    reason: ExpiryReason
    def __init__(self, session_id: _Optional[str] = ..., reason: _Optional[_Union[ExpiryReason, str]] = ...) -> None: ...

class SessionClosed(_message.Message):
    __slots__ = ("session_id", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    reason: str
    def __init__(self, session_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class HeartbeatAck(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GoingAway(_message.Message):
    __slots__ = ("time_left", "reason")
    TIME_LEFT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    time_left: _duration_pb2.Duration
    reason: str
    def __init__(self, time_left: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class SpeechStarted(_message.Message):
    __slots__ = ("audio_start_ms", "item_id")
    AUDIO_START_MS_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    audio_start_ms: float
    item_id: str
    def __init__(self, audio_start_ms: _Optional[float] = ..., item_id: _Optional[str] = ...) -> None: ...

class SpeechStopped(_message.Message):
    __slots__ = ("audio_end_ms", "item_id")
    AUDIO_END_MS_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    audio_end_ms: float
    item_id: str
    def __init__(self, audio_end_ms: _Optional[float] = ..., item_id: _Optional[str] = ...) -> None: ...

class InputCommitted(_message.Message):
    __slots__ = ("item_id", "previous_item_id", "audio_duration_ms")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIO_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    previous_item_id: str
    audio_duration_ms: float
    def __init__(self, item_id: _Optional[str] = ..., previous_item_id: _Optional[str] = ..., audio_duration_ms: _Optional[float] = ...) -> None: ...

class InputCleared(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ItemAdded(_message.Message):
    __slots__ = ("item", "previous_item_id")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    item: ConversationItem
    previous_item_id: str
    def __init__(self, item: _Optional[_Union[ConversationItem, _Mapping]] = ..., previous_item_id: _Optional[str] = ...) -> None: ...

class ItemDone(_message.Message):
    __slots__ = ("item", "previous_item_id")
    ITEM_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    item: ConversationItem
    previous_item_id: str
    def __init__(self, item: _Optional[_Union[ConversationItem, _Mapping]] = ..., previous_item_id: _Optional[str] = ...) -> None: ...

class ItemRetrieved(_message.Message):
    __slots__ = ("item",)
    ITEM_FIELD_NUMBER: _ClassVar[int]
    item: ConversationItem
    def __init__(self, item: _Optional[_Union[ConversationItem, _Mapping]] = ...) -> None: ...

class ItemDeleted(_message.Message):
    __slots__ = ("item_id",)
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    def __init__(self, item_id: _Optional[str] = ...) -> None: ...

class ItemTruncated(_message.Message):
    __slots__ = ("item_id", "content_index", "audio_end_ms")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    AUDIO_END_MS_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    content_index: int
    audio_end_ms: float
    def __init__(self, item_id: _Optional[str] = ..., content_index: _Optional[int] = ..., audio_end_ms: _Optional[float] = ...) -> None: ...

class InputTranscription(_message.Message):
    __slots__ = ("item_id", "content_index", "transcript")
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    TRANSCRIPT_FIELD_NUMBER: _ClassVar[int]
    item_id: str
    content_index: int
    transcript: str
    def __init__(self, item_id: _Optional[str] = ..., content_index: _Optional[int] = ..., transcript: _Optional[str] = ...) -> None: ...

class ResponseCreated(_message.Message):
    __slots__ = ("response", "item_id")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    response: Response
    item_id: str
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ..., item_id: _Optional[str] = ...) -> None: ...

class OutputAudioDelta(_message.Message):
    __slots__ = ("audio", "response_id", "item_id", "encoding", "sample_rate_hz", "start_ms", "duration_ms")
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    START_MS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    audio: bytes
    response_id: str
    item_id: str
    encoding: AudioEncoding
    sample_rate_hz: int
    start_ms: float
    duration_ms: float
    def __init__(self, audio: _Optional[bytes] = ..., response_id: _Optional[str] = ..., item_id: _Optional[str] = ..., encoding: _Optional[_Union[AudioEncoding, str]] = ..., sample_rate_hz: _Optional[int] = ..., start_ms: _Optional[float] = ..., duration_ms: _Optional[float] = ...) -> None: ...

class OutputAudioTranscriptDelta(_message.Message):
    __slots__ = ("delta", "response_id", "item_id")
    DELTA_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    delta: str
    response_id: str
    item_id: str
    def __init__(self, delta: _Optional[str] = ..., response_id: _Optional[str] = ..., item_id: _Optional[str] = ...) -> None: ...

class OutputTextDelta(_message.Message):
    __slots__ = ("delta", "response_id", "item_id")
    DELTA_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    delta: str
    response_id: str
    item_id: str
    def __init__(self, delta: _Optional[str] = ..., response_id: _Optional[str] = ..., item_id: _Optional[str] = ...) -> None: ...

class ResponseDone(_message.Message):
    __slots__ = ("response",)
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    response: Response
    def __init__(self, response: _Optional[_Union[Response, _Mapping]] = ...) -> None: ...

class ResponseListen(_message.Message):
    __slots__ = ("response_id", "reason")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    reason: str
    def __init__(self, response_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ResponseSpeak(_message.Message):
    __slots__ = ("response_id", "item_id")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    item_id: str
    def __init__(self, response_id: _Optional[str] = ..., item_id: _Optional[str] = ...) -> None: ...

class PlaybackAcknowledged(_message.Message):
    __slots__ = ("response_id", "item_id", "played_ms", "committed_ms", "truncate", "history_committed")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    PLAYED_MS_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_MS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    HISTORY_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    item_id: str
    played_ms: float
    committed_ms: float
    truncate: bool
    history_committed: bool
    def __init__(self, response_id: _Optional[str] = ..., item_id: _Optional[str] = ..., played_ms: _Optional[float] = ..., committed_ms: _Optional[float] = ..., truncate: _Optional[bool] = ..., history_committed: _Optional[bool] = ...) -> None: ...

class OutputAudioCleared(_message.Message):
    __slots__ = ("response_id",)
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    def __init__(self, response_id: _Optional[str] = ...) -> None: ...

class OverlapDecision(_message.Message):
    __slots__ = ("policy", "action", "reason")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    policy: OverlapPolicy
    action: OverlapAction
    reason: str
    def __init__(self, policy: _Optional[_Union[OverlapPolicy, str]] = ..., action: _Optional[_Union[OverlapAction, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "type", "message", "param", "client_seq", "event_id", "retryable", "retry_after")
    CODE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARAM_FIELD_NUMBER: _ClassVar[int]
    CLIENT_SEQ_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    code: str
    type: ErrorType
    message: str
    param: str
    client_seq: int
    event_id: str
    retryable: bool
    retry_after: _duration_pb2.Duration
    def __init__(self, code: _Optional[str] = ..., type: _Optional[_Union[ErrorType, str]] = ..., message: _Optional[str] = ..., param: _Optional[str] = ..., client_seq: _Optional[int] = ..., event_id: _Optional[str] = ..., retryable: _Optional[bool] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...
