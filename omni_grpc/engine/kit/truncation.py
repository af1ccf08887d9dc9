"""What a response reads of a conversation too long for its model: OpenAI's ``truncation``.

A pure rule over the conversation's items, oldest first, each with its token count as the
engine's model counts it, and the number of tokens the conversation may take after the
instructions (``limit``: the engine's context less its instructions and output, or the
session's ``post_instructions`` limit where that is lower; None where the engine knows no
bound). It says which item is the first a response reads; the items before it are dropped from
what the model reads and stay in the conversation.

* ``auto``: the oldest items are dropped until the rest fits.
* ``retention_ratio``: while the items from the first one kept last time fit, that first item
  stays first (so the prompt's start stays the same, and a model's cache of it stays good);
  once they pass the limit, the oldest are dropped until what is left is at most ``ratio`` x
  ``limit``, which leaves room for the next turns before the next cut.
* ``disabled``: nothing is dropped; a conversation over the limit does not fit, and the
  response fails (``context_length_exceeded``).

The newest item is always read (a response answers it): under ``auto`` and ``retention_ratio``
an item longer than the limit alone is what is read, and the engine's model clips it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from omni_grpc.wire import pb
from omni_grpc.wire.names import CONTEXT_LENGTH_EXCEEDED

__all__ = ["CONTEXT_LENGTH_EXCEEDED", "ContextTooLong", "Cut", "cut", "limit_of"]


@dataclass(frozen=True, slots=True)
class Cut:
    """Where a response's reading starts, and what it reads."""

    first: int  # the index of the first item read (len(tokens) when there are none)
    tokens: int  # the tokens of the items read
    fits: bool = True  # False: disabled truncation, and the conversation is over the limit


class ContextTooLong(Exception):
    """A response's conversation does not fit, and truncation is disabled."""

    def __init__(self, tokens: int, limit: int) -> None:
        super().__init__(f"the conversation has {tokens} tokens, over the limit of {limit}")
        self.tokens = tokens
        self.limit = limit


def cut(
    tokens: Sequence[int],
    limit: int | None,
    truncation: pb.Truncation,
    kept_first: int = 0,
) -> Cut:
    """The cut of a conversation whose items (oldest first) count ``tokens``; ``kept_first``:
    the index of the first item the last cut kept (retention_ratio keeps it while it fits)."""
    count = len(tokens)
    total = sum(tokens)
    ratio = truncation.type == pb.TRUNCATION_TYPE_RETENTION_RATIO
    if limit is None or (total <= limit and not ratio):
        return Cut(0, total)
    if truncation.type == pb.TRUNCATION_TYPE_DISABLED:
        return Cut(0, total, fits=False)
    first = 0
    if ratio:
        first = min(max(kept_first, 0), max(count - 1, 0))
        kept = sum(tokens[first:])
        if kept <= limit:
            return Cut(first, kept)
        target = int(truncation.retention_ratio * limit)
    else:
        target = limit
    return _drop_until(tokens, first, target)


def _drop_until(tokens: Sequence[int], first: int, target: int) -> Cut:
    """Drops the oldest items from ``first`` on until the rest count at most ``target``
    tokens, or only the newest is left."""
    kept = sum(tokens[first:])
    while kept > target and first < len(tokens) - 1:
        kept -= tokens[first]
        first += 1
    return Cut(first, kept)


def limit_of(truncation: pb.Truncation, window: int | None) -> int | None:
    """The tokens the conversation may take: the engine's ``window`` (None: no bound known),
    lowered to the session's ``post_instructions`` limit where it sets one."""
    if truncation.HasField("post_instructions_token_limit"):
        asked = truncation.post_instructions_token_limit
        return asked if window is None else min(asked, window)
    return window
