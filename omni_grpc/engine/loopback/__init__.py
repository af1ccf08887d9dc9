"""The loopback engine: a deterministic stand-in that answers every turn with the user's audio.

It needs no model and behaves the same way every time, so the server, the bridge and clients
can be tested end to end on any machine. A committed turn is answered (unless the commit, or
else the session's turn detection, says ``create_response: false``) by a response that plays
the turn's audio back in the canonical output form (pcm16, 24 kHz), in chunks of ``chunk_ms``,
each followed by a piece of the transcript "you said 1.23 seconds of audio". A text-only turn
is answered with a quiet tone. Output conversion to the session's format is the transport's
job, not the engine's. Everything but what it says is the engine kit's
(:mod:`omni_grpc.engine.kit`).

Options (strings, from the command line or the server settings):

* ``pace``: ``realtime`` (the default) releases each chunk when its audio would have been
  generated in real time (a reader that falls behind restarts the schedule from the late
  chunk); ``fast`` releases chunks as fast as the reader takes them.
* ``speed``: divides the real-time schedule (``2`` is twice as fast); default ``1``.
* ``chunk_ms``: the length of one output audio chunk, 10 to 5000; default ``100``.
* ``queue_size``: the bound of each session's command and event queues; default ``256``.
* ``max_input_s``: the most input audio kept, uncommitted or unanswered; default ``300``.
* ``mode``: ``turns`` (the default) answers committed turns as above; ``mirror`` answers every
  append at once with the same audio as one output chunk of a single open response, with no
  turns at all, in the append's own format (it takes pcm16 at every supported rate natively, so
  the edge resamples nothing unless the session's output format differs). Benchmarks use it to
  put one chunk in and get one chunk out, like an echo.
* ``recall``: ``1`` appends to each answer's words the words of every earlier item of the
  conversation ("...; earlier: a | b"), so tests can see a history kept (or adopted by another
  replica); default ``0``. The earlier items are those the response read: a conversation
  cut by the session's ``truncation`` lists only what was kept. An earlier answer is listed
  (and counted, below) as what it said before its own recall, so the list does not nest.
* ``context_tokens``: the context of the loopback's notional model, in tokens: a word is a
  token, and so are 100 ms of a user's audio; a response reads what fits in it less the words
  of its instructions (and less, under a session's ``post_instructions`` limit); default
  ``32768``. Its usage's ``input_tokens`` counts what it read.
* ``capacity``: the sessions it says it serves at once (what a server with ``--capacity`` admits
  before new ones wait); default ``64``, which two loaded cores carry in real time.
* ``tool_call``: ``auto`` makes a response whose tool choice is ``auto`` call the first tool,
  with arguments built from its schema, instead of answering; ``off`` (the default) calls only
  when the choice forces a call (``required`` or a named function). A response that answers
  ``function_call_output`` items says what the function returned ("the function returned
  ..."), so a client's whole tool loop can be tried without a model.

Refusals that depend on state are ``error`` events with the command's ``client_seq``:
``response_create_without_input``, ``response_already_active``, ``response_not_active``,
``input_audio_buffer_empty``, ``item_not_found``, ``playback_item_not_found``,
``playback_item_mismatch``, ``input_backpressure``, and ``bad_event`` / ``bad_audio`` /
``unsupported_audio_format`` for input the core should not have let through.
"""

from __future__ import annotations

from omni_grpc.engine.loopback.engine import FEATURES, LoopbackEngine
from omni_grpc.engine.loopback.options import LoopbackOptions
from omni_grpc.engine.loopback.session import LoopbackSession

__all__ = ["FEATURES", "LoopbackEngine", "LoopbackOptions", "LoopbackSession"]
