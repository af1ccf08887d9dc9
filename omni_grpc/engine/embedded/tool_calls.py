"""Function calls in the embedded engine: SmolLM2 proposes them, llguidance forces their form.

SmolLM2-Instruct was trained on function calling in one format: a system prompt listing the
tools between ``<tools>`` tags, and an answer ``<tool_call>[{"name": ..., "arguments":
{...}}]</tool_call>`` (:data:`CALL_SYSTEM`, from the model card). The 135M model never opens a
call greedily, even for "What is the weather in Paris?", but its probability of opening one
tells the questions apart: measured on six questions, log P(``<tool_call>[``) was -5.8 and -6.6
for two weather questions and -9.6 to -15.5 for greetings, jokes and sums (a third weather
question scored -10.5). So under ``tool_choice: auto`` a call is proposed when that
log-probability is at least :data:`PROPOSE_LOGPROB`; then, as under ``required`` or a named
function, the call itself is written by the model under a grammar: llguidance compiles a JSON
schema (one of the callable tools by name, with that tool's own parameter schema as its
arguments) and masks every token that would leave it, so the arguments always validate.

A response that answers function outputs is not offered a call under ``auto``: it says what
came back (a small model asked again would call again). The echo responder is the scripted,
deterministic stand-in for tests: it calls the first callable tool with arguments built from
its schema (:func:`omni_grpc.engine.kit.tools.example_arguments`), as the loopback does.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from concurrent.futures import Executor

import llguidance
from llguidance.numpy import (
    allocate_token_bitmask,
    apply_token_bitmask_inplace,
    fill_next_token_bitmask,
)

from omni_grpc.core.tools import tool_schema
from omni_grpc.engine.embedded.models.lm import F32, GenerationStats, SmolLM
from omni_grpc.engine.kit import Answer
from omni_grpc.engine.kit.tools import (
    answers_a_call,
    call_schema,
    callable_tools,
    example_arguments,
    must_call,
    scripted_tool,
)
from omni_grpc.wire import pb

CALL_SYSTEM = """You are an expert in composing functions. You are given a question and a set of \
possible functions. Based on the question, you will need to make one or more function/tool \
calls to achieve the purpose. If none of the functions can be used, point it out and refuse to \
answer. If the given question lacks the parameters required by the function, also point it out.

You have access to the following tools:
<tools>{tools}</tools>

The output MUST strictly adhere to the following format, and NO other text MUST be included.
The example format is as follows. Please make sure the parameter type is correct. If no \
function call is needed, please make the tool calls an empty list '[]'.
<tool_call>[
{{"name": "func_name1", "arguments": {{"argument1": "value1", "argument2": "value2"}}}},
... (more tool calls as required)
]</tool_call>"""
OPEN_CALL = "<tool_call>["
PROPOSE_LOGPROB = -8.0
# A call's JSON is short; a model caught repeating inside a string is stopped here.
MAX_CALL_TOKENS = 256


class _Grammar:
    """An llguidance matcher as the model's TokenConstraint."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int) -> None:
        self._matcher = matcher
        self._bitmask = allocate_token_bitmask(1, vocab_size)

    def mask(self, logits: F32) -> None:
        fill_next_token_bitmask(self._matcher, self._bitmask)
        apply_token_bitmask_inplace(logits.reshape(1, -1), self._bitmask)

    def accept(self, token: int) -> None:
        if not self._matcher.consume_token(token):
            raise RuntimeError(f"the grammar refused token {token}")

    @property
    def done(self) -> bool:
        return self._matcher.is_stopped()


class CallWriter:
    """SmolLM2 deciding on and writing function calls; one per engine (the tokenizer's
    llguidance form costs about a second to build, so it is built once, on first use)."""

    def __init__(self, model: SmolLM) -> None:
        self._model = model
        self._tokenizer: llguidance.LLTokenizer | None = None

    def _prompt(self, turns: list[tuple[str, str]], tools: list[pb.FunctionTool]) -> list[int]:
        listed = [
            {"name": t.name, "description": t.description, "parameters": tool_schema(t)}
            for t in tools
        ]
        return self._model.chat_prompt(CALL_SYSTEM.format(tools=json.dumps(listed)), turns)

    def proposes(self, turns: list[tuple[str, str]], tools: list[pb.FunctionTool]) -> bool:
        """Whether the model would open a call here (see the module docstring)."""
        opening = self._model.tokenizer.encode(OPEN_CALL).ids
        logprob = self._model.continuation_logprob(self._prompt(turns, tools), opening)
        return logprob >= PROPOSE_LOGPROB

    def write(
        self,
        turns: list[tuple[str, str]],
        tools: list[pb.FunctionTool],
        seed: int,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> tuple[str, str] | None:
        """The model's call, (name, arguments as JSON text), schema-valid by construction;
        None if it did not finish one within MAX_CALL_TOKENS or was ``cancelled()``."""
        if self._tokenizer is None:
            self._tokenizer = llguidance.LLTokenizer(
                self._model.tokenizer.to_str(), eos_token=self._model.eos_id
            )
        tokenizer = self._tokenizer
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(call_schema(tools)))
        matcher = llguidance.LLMatcher(tokenizer, grammar)
        if matcher.is_error():
            raise RuntimeError(f"llguidance refused the schema: {matcher.get_error()}")
        prompt = self._prompt(turns, tools) + self._model.tokenizer.encode(OPEN_CALL).ids
        stats = GenerationStats()
        text = "".join(
            self._model.generate(
                prompt,
                max_tokens=MAX_CALL_TOKENS,
                temperature=0.0,
                seed=seed,
                cancelled=cancelled,
                stats=stats,
                constraint=_Grammar(matcher, tokenizer.vocab_size),
            )
        )
        if not matcher.is_accepting():
            return None
        call = json.loads(text)
        return call["name"], json.dumps(call["arguments"], separators=(",", ":"))


async def choose_call(
    answer: Answer,
    writer: CallWriter | None,
    turns: list[tuple[str, str]],
    executor: Executor,
    seed: int,
) -> tuple[str, str] | None:
    """The call ``answer`` makes, (name, arguments), or None to answer in words: scripted
    without a model (``writer`` None), else proposed and written by SmolLM2."""
    if writer is None:
        tool = scripted_tool(answer, on_auto=True)
        return None if tool is None else (tool.name, example_arguments(tool))
    tools = callable_tools(answer)
    if not tools:
        return None
    loop = asyncio.get_running_loop()
    if not must_call(answer):
        if answers_a_call(answer):
            return None
        if not await loop.run_in_executor(executor, writer.proposes, turns, tools):
            return None
    stop = threading.Event()  # a cancelled response stops the model at its next token
    try:
        return await loop.run_in_executor(executor, writer.write, turns, tools, seed, stop.is_set)
    finally:
        stop.set()
