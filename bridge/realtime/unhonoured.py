"""OpenAI GA fields the service cannot honour: refused with an error that names them.

The inbound models ignore fields they do not know, as OpenAI's server ignores unknown ones.
A field OpenAI *does* define and the service cannot carry out is different: dropping it would
leave the client believing it took effect. So a ``session.update`` or ``response.create``
that sets one to anything but the value that means "as without it" is refused whole with
``unsupported_field``, its ``param`` the field's path, before anything of it is applied.

What stock clients send by default passes: OpenAI's agents SDKs send ``speed: 1``, which asks
for nothing. ``tracing`` passes in any form: it says where
OpenAI's own dashboard stores traces, which does not exist here, and changes nothing in the
conversation (the service's traces are OpenTelemetry's, configured on the server).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bridge.errors import DialectError


def _unset(value: Any) -> bool:
    return value is None


def _speed_one(value: Any) -> bool:
    return value is None or (type(value) in (int, float) and value == 1)


def _auto_or_none(value: Any) -> bool:
    return value in (None, "auto", "none")


def _no_effort(value: Any) -> bool:
    return value is None or (isinstance(value, dict) and value.get("effort") is None)


# No engine here is a reasoning model (none lists an effort it would honour).
_NO_REASONING = "no engine here reasons before it answers"


# For each event type: (path in the event, what the field may be, why it cannot be honoured).
_RULES: dict[str, tuple[tuple[tuple[str, ...], Callable[[Any], bool], str], ...]] = {
    "session.update": (
        (("session", "audio", "output", "speed"), _speed_one, "voices speak at one speed"),
        (("session", "speed"), _speed_one, "voices speak at one speed"),
        (("session", "prompt"), _unset, "there are no stored prompts"),
        (("session", "reasoning"), _no_effort, _NO_REASONING),
    ),
    "response.create": (
        (
            ("response", "conversation"),
            _auto_or_none,
            "a response joins the session's one conversation or none",
        ),
        (("response", "audio", "output", "format"), _unset, "the output format is the session's"),
        (("response", "output_audio_format"), _unset, "the output format is the session's"),
        (("response", "prompt"), _unset, "there are no stored prompts"),
        (("response", "reasoning"), _no_effort, _NO_REASONING),
    ),
}


def _find(event: dict[str, Any], path: tuple[str, ...]) -> tuple[bool, Any]:
    node: Any = event
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return True, node


def refuse_unhonoured(event: dict[str, Any]) -> None:
    """Raises ``unsupported_field`` for the first GA field in ``event`` (a decoded client
    event) that asks for something the service cannot do."""
    for path, allowed, why in _RULES.get(event.get("type", ""), ()):
        present, value = _find(event, path)
        if present and not allowed(value):
            param = ".".join(path)
            event_id = event.get("event_id")
            raise DialectError(
                "unsupported_field",
                f"{param} cannot be honoured: {why}",
                param=param,
                event_id=event_id if isinstance(event_id, str) else "",
            )
