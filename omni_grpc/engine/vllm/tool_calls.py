"""Function calls on the vllm engine: vLLM's structured outputs for a forced call, vLLM's tool
parsers for the model's own calls.

The tools go into the prompt the way the model's chat template lists them (OpenAI's chat tool
shape). Under ``tool_choice: required`` or a named function the request carries the JSON schema
of one call of a callable tool (:func:`omni_grpc.engine.kit.tools.call_schema`) as vLLM's
structured outputs, so the model can write nothing else, and its end-of-text bias and minimum
length (test options for a random model) are dropped, since the grammar decides where the text
ends. Under ``auto`` the model writes freely; its text is gathered whole and the engine's
``tool_parser`` reads any calls out of it in the model's own format; a text with no call is
spoken. (Gathering costs the streaming of that answer; it happens only when tools are offered.)
A parser may read several calls in one answer, and the response makes them all unless the
session or the response says ``parallel_tool_calls: false``; then it makes the first.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from omni_grpc.core.tools import tool_schema
from omni_grpc.engine import kit
from omni_grpc.engine.kit.tools import call_schema
from omni_grpc.engine.vllm.runtime import Generation, Sampling
from omni_grpc.wire import pb

# Room for a forced call's JSON, whatever the session's cap on spoken answers.
FORCED_MIN_TOKENS = 256


def chat_tools(tools: list[pb.FunctionTool]) -> list[dict[str, Any]]:
    """The tools in OpenAI's chat shape, as chat templates and vLLM's parsers read them."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool_schema(tool),
            },
        }
        for tool in tools
    ]


def forced_sampling(sampling: Sampling, tools: list[pb.FunctionTool]) -> Sampling:
    """The sampling of a response that must call one of ``tools``."""
    return dataclasses.replace(
        sampling,
        json_schema=json.dumps(call_schema(tools)),
        min_tokens=0,
        logit_bias={},
        max_tokens=max(sampling.max_tokens, FORCED_MIN_TOKENS),
    )


def forced_call(text: str) -> tuple[str, str] | None:
    """The (name, arguments JSON) of a forced call's text; None if it was cut short."""
    try:
        call = json.loads(text)
    except ValueError:
        return None
    return call["name"], json.dumps(call["arguments"], separators=(",", ":"))


def kept_calls(answer: kit.Answer, calls: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The calls a response makes of those its model wrote (a parser may read several): the
    first alone where it may not call several at once (``parallel_tool_calls`` false)."""
    return calls if answer.parallel_tool_calls else calls[:1]


async def gathered(answer: kit.Answer, generation: Generation) -> tuple[str, str]:
    """The whole text of ``generation`` and vLLM's finish reason, counting its tokens."""
    text, finish = [], "stop"
    answer.output_tokens = 0
    async for delta in generation:
        answer.output_tokens += len(delta.token_ids)
        answer.input_tokens = delta.prompt_tokens
        if delta.finish_reason is not None:
            finish = delta.finish_reason
        text.append(delta.text)
    return "".join(text), finish
