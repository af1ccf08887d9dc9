"""The engine kit: what every engine session is made of, so that an engine holds only its own.

* :mod:`.worker`: :class:`WorkerSession`, the mailbox, the worker that applies commands in
  order through a dispatch table, and ``submit`` / ``events`` / ``close``.
* :mod:`.responses`: :class:`ResponseSession`, the response lifecycle (start, cancel, take
  back, finish, barge-in, clear output, the done event) and the history it writes.
* :mod:`.conversation`: :class:`ConversationSession`, a handler for every engine command:
  the plain input buffer and conversation items (create, retrieve, delete, truncate,
  playback ack), on top of the lifecycle. An engine subclasses it and writes ``_play``.
* :mod:`.answers`: :class:`Answer`, one response in flight and the ledger of its output; the
  user input it answers; its output item and done event.
* :mod:`.history`: the bounded, ordered conversation items.
* :mod:`.truncation`: which oldest items a response drops from what it reads, under the
  session's ``truncation`` (a pure rule; :class:`ResponseSession` applies it with the engine's
  token counts and context).
* :mod:`.event_queue`: :class:`EventQueue`, the bounded queue of a session's output events.
* :mod:`.speech`: :class:`SpeechPlayer`, sentences to paced chunks on the media clock.
* :mod:`.clock`: :class:`Clock`, what a session's pacing and latencies are read on.
* :mod:`.tts`: espeak-ng speech synthesis and the sentence splitter.
* :mod:`.options`: reading an engine's string options.
* :mod:`.listening_session`: :class:`~.listening_session.ListeningSession`, a conversation
  session that hears speech itself: server VAD (:mod:`.vad`, Silero; :mod:`.turn_detection`,
  the rules; :mod:`.listening`, the input buffer), and turn-taking: the end of a turn judged
  from its words (:mod:`.end_of_turn`), speech over a reply (:mod:`.overlap`), idle prompts
  (:mod:`.idle`). It is not imported here: the detector's model runtime (onnxruntime) is
  only for the engines that hear, and the loopback engine imports this package.
"""

from __future__ import annotations

from omni_grpc.engine.kit.answers import (
    Answer,
    Modalities,
    Outcome,
    UserInput,
    new_id,
    turn_latency,
)
from omni_grpc.engine.kit.clock import MONOTONIC, Clock
from omni_grpc.engine.kit.conversation import (
    ITEM_AUDIO_KEPT_MS,
    ConversationSession,
    SessionOptions,
    assert_canonical_input,
)
from omni_grpc.engine.kit.event_queue import EventQueue
from omni_grpc.engine.kit.history import History, item_text, user_item
from omni_grpc.engine.kit.responses import ResponseSession
from omni_grpc.engine.kit.speech import LEAD_MS, Pacing, SpeechPlayer, audio_delta
from omni_grpc.engine.kit.worker import (
    Handler,
    Handlers,
    InlineHandler,
    InlineHandlers,
    WorkerSession,
)

__all__ = [
    "ITEM_AUDIO_KEPT_MS",
    "LEAD_MS",
    "MONOTONIC",
    "Answer",
    "Clock",
    "ConversationSession",
    "EventQueue",
    "Handler",
    "Handlers",
    "History",
    "InlineHandler",
    "InlineHandlers",
    "Modalities",
    "Outcome",
    "Pacing",
    "ResponseSession",
    "SessionOptions",
    "SpeechPlayer",
    "UserInput",
    "WorkerSession",
    "assert_canonical_input",
    "audio_delta",
    "item_text",
    "new_id",
    "turn_latency",
    "user_item",
]
