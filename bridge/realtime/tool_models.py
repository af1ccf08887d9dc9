"""Inbound: the tool fields of the Realtime dialect, as strict pydantic models.

``session.tools`` and ``response.tools`` list function tools (GA shape: ``type``, ``name``,
``description``, ``parameters``); ``tool_choice`` is ``"auto"``, ``"none"``, ``"required"`` or
``{"type": "function", "name": ...}``. They are models of their own so that
:mod:`bridge.realtime.client_events` only names them; :mod:`bridge.realtime.tools` translates them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class ToolJson(_Model):
    """One tool of ``session.tools`` or ``response.tools``; only functions are served (an MCP
    tool is refused by name when translated, not silently dropped)."""

    type: str = "function"
    name: str = ""
    description: str = ""
    parameters: dict[str, Any] | None = None


class ToolChoiceJson(_Model):
    """``tool_choice`` naming a function (a choice object without a type names one too)."""

    type: str = "function"
    name: str = ""


ToolChoiceSpec = Literal["auto", "none", "required"] | ToolChoiceJson
