"""``server_event_seq`` in vLLM-Omni's dialect: a number on every event the journal replays.

The reference numbers every journaled event, and its client acks each number it gets, resumes
after the last one, and drops an event whose number is not above the last it saw (a duplicate
of a replay). Here one contract event (seq ``n``) often becomes several JSON events (a
response's start is five), and the journal replays contract events, so each JSON event gets a
number of its own within the block of ``n``: the events before the last are ``n * BLOCK + i``,
the last takes the block's highest, ``(n + 1) * BLOCK - 1``. So numbers rise from one event to
the next, the same event has the same number on a replay (through any bridge: nothing is
remembered), and a number names a contract event the client has seen whole only when it is the
last of its block: an ack or a resume cursor inside a block covers only ``n - 1``
(:func:`covered`), and a resume from there replays the whole group, whose first part the
client drops by number.

Events outside the journal (contract seq 0) carry no number, as in the reference, but for the
``session.updated`` that follows ``session.created`` (the reference journals it first): it takes
the highest number below every journaled event's, ``BLOCK - 1``. A group of more events than a
block holds (an audio delta split very finely) leaves the events past the block's end
unnumbered, as every event of a group was before.
"""

from __future__ import annotations

from bridge.dialect import Event

BLOCK = 1000  # numbers per contract event: more than any group has at the default delta size


def number(events: list[Event], seq: int) -> None:
    """Puts ``server_event_seq`` on the events of contract event ``seq``, in place."""
    if seq == 0:
        if len(events) == 2 and events[0]["type"] == "session.created":
            events[1]["server_event_seq"] = BLOCK - 1  # the opening session.updated
        return
    first, last = seq * BLOCK, (seq + 1) * BLOCK - 1
    for index, event in enumerate(events[:-1]):
        if first + index < last:
            event["server_event_seq"] = first + index
    if events:
        events[-1]["server_event_seq"] = last


def covered(server_event_seq: int) -> int:
    """The contract seq through which a client that saw ``server_event_seq`` saw everything."""
    return max((server_event_seq + 1) // BLOCK - 1, 0)


__all__ = ["BLOCK", "covered", "number"]
