"""The owner of a session killed (kill -9) at each moment of a spoken turn: the turn goes on on
a peer, its committed audio whole, every command applied once, every event told once.

Each test starts a cluster whose replicas carry the fault hook (``OMNI_TEST_KILL_AT``,
omni_grpc/server/fault_hook.py): the replica that owns the session SIGKILLs itself right after
the store has written the moment the test aims at, so the stored ``applied_client_seq`` covers
what was sent before it. The session says 2 s of audio in 100 ms appends and commits it; the
loopback answers a turn with the turn's own audio and says how long it was, so the answer shows
whether the adopter committed all of it (none lost, none twice). Durability ``sync``: nothing a
client holds can be missing from the store. The Python client (``DuplexClient``) resends what
the adopter has not applied; the last tests go through the cluster's bridge (a process of its
own), with the openai SDK and with an extension client: the bridge numbers their commands, so it
is the one that takes the session back and resends, and their sockets stay open.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson
import pytest
from openai import AsyncOpenAI

from omni_grpc.client import DuplexClient
from omni_grpc.wire import pb
from tests.bridge.testkit import check_plain_event
from tests.cluster.local import LOOPBACK, LocalCluster, wait_for
from tests.cluster.speaker import OPTIONS, Speaker, words
from tests.cluster.test_routing_bridge import EXTENSIONS, Page, _words

RATE_HZ = 24_000  # the client's audio is resampled to the engine's: its tail must survive too
CHUNK_MS = 100
CHUNKS = 20  # 2 s of speech
TURN_MS = CHUNK_MS * CHUNKS
# The answer's audio is the turn's, resampled twice: its length may differ by a few samples.
SLACK_MS = 2.0
TOOL = pb.FunctionTool(
    name="lookup",
    description="Looks a word up.",
    parameters_json=json.dumps({"type": "object", "properties": {"word": {"type": "string"}}}),
)


def _config(*, tools: bool = False) -> pb.SessionConfig:
    config = pb.SessionConfig(
        input_audio_format=pb.AudioFormat(encoding=pb.AUDIO_ENCODING_PCM16, sample_rate_hz=RATE_HZ),
        turn_detection=pb.TurnDetection(type=pb.TURN_DETECTION_TYPE_NONE),
    )
    if tools:
        config.tools.tools.append(TOOL)
        config.tool_choice.mode = pb.TOOL_CHOICE_MODE_REQUIRED
    return config


def _chunk(index: int) -> bytes:
    """100 ms of a quiet tone, its pitch the chunk's own."""
    t = np.arange(RATE_HZ * CHUNK_MS // 1000) / RATE_HZ
    samples = 0.2 * np.sin(2 * np.pi * (200 + 10 * index) * t)
    return (samples * 32767).astype("<i2").tobytes()


@pytest.fixture
def armed(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LocalCluster]:
    """A cluster whose replicas kill themselves at the moment the test's marker names."""
    monkeypatch.setenv("OMNI_TEST_KILL_AT", request.param)
    local = LocalCluster(tmp_path, serve_args=(*LOOPBACK, "--durability", "sync"))
    try:
        yield local.wait_ready()
    finally:
        local.stop()


async def _speak(speaker: Speaker, *, pause_s: float = 0.02) -> None:
    for index in range(CHUNKS):
        await speaker.client.append_audio(_chunk(index))
        await asyncio.sleep(pause_s)  # not all at once: a kill lands between appends


async def _killed(cluster: LocalCluster, victim: str) -> None:
    await wait_for(lambda: not cluster.alive(victim), 60, "the replica to kill itself")


def _check(speaker: Speaker, victim: str, turns: int) -> list[pb.Response]:
    """Everything told once and in order, the session moved, each turn's audio whole."""
    seqs = speaker.seqs()
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    assert speaker.client.stats.duplicate_events == 0
    assert speaker.route != victim
    committed = [e.input_committed for e in speaker.of_kind("input_committed")]
    assert len(committed) == turns, committed
    for turn in committed:
        assert abs(turn.audio_duration_ms - TURN_MS) <= SLACK_MS, turn
    errors = speaker.of_kind("error")
    assert not errors, errors
    responses = speaker.responses()
    assert len({r.id for r in responses}) == len(responses)
    return responses


def _answered_whole(speaker: Speaker, response: pb.Response) -> None:
    """A completed answer to one spoken turn: it says the turn was 2 s, and plays 2 s."""
    assert response.status == pb.RESPONSE_STATUS_COMPLETED, response
    assert f"you said {TURN_MS / 1000:.2f} seconds" in words(response), words(response)
    played = sum(
        e.output_audio_delta.duration_ms
        for e in speaker.of_kind("output_audio_delta")
        if e.output_audio_delta.response_id == response.id
    )
    assert abs(played - TURN_MS) <= SLACK_MS + CHUNK_MS, played


async def _open(cluster: LocalCluster, *, tools: bool = False) -> tuple[Speaker, str]:
    client = await DuplexClient.connect(
        cluster.target, config=_config(tools=tools), options=OPTIONS
    )
    speaker = Speaker(client)
    return speaker, speaker.route


@pytest.mark.parametrize("armed", ["command:append_input_audio:10"], indirect=True)
async def test_a_kill_mid_append_loses_no_audio(armed: LocalCluster) -> None:
    speaker, victim = await _open(armed)
    await _speak(speaker)
    await _killed(armed, victim)
    await speaker.client.commit()
    response = await speaker.answered(1)
    _answered_whole(speaker, response)
    _check(speaker, victim, turns=1)
    await speaker.close()


@pytest.mark.parametrize("armed", [f"command:append_input_audio:{CHUNKS}"], indirect=True)
async def test_a_kill_between_the_last_append_and_the_commit_loses_no_audio(
    armed: LocalCluster,
) -> None:
    speaker, victim = await _open(armed)
    await _speak(speaker)
    await _killed(armed, victim)  # every append landed before: the commit finds them all
    await speaker.client.commit()
    response = await speaker.answered(1)
    _answered_whole(speaker, response)
    _check(speaker, victim, turns=1)
    await speaker.close()


@pytest.mark.parametrize("armed", ["command:commit_input_audio:1"], indirect=True)
async def test_a_kill_mid_commit_commits_once(armed: LocalCluster) -> None:
    speaker, victim = await _open(armed)
    await _speak(speaker)
    await speaker.client.commit()
    await _killed(armed, victim)
    first = await speaker.answered(1)
    turns = 1
    if first.status == pb.RESPONSE_STATUS_FAILED:
        # The commit's answer had begun when its replica died: cut, with the reason, and the
        # committed turn (its length checked below) is history now. The next turn shows the
        # adopter hears whole turns.
        assert first.status_reason == "session_moved"
        await _speak(speaker, pause_s=0)
        await speaker.client.commit()
        first, turns = await speaker.answered(2), 2
    _answered_whole(speaker, first)
    _check(speaker, victim, turns=turns)
    await speaker.close()


@pytest.mark.parametrize("armed", ["event:output_audio_delta:3"], indirect=True)
async def test_a_kill_mid_answer_keeps_the_turn_and_the_next(armed: LocalCluster) -> None:
    speaker, victim = await _open(armed)
    await _speak(speaker)
    await speaker.client.commit()
    await _killed(armed, victim)
    cut = await speaker.answered(1)
    assert (cut.status, cut.status_reason) == (pb.RESPONSE_STATUS_FAILED, "session_moved")
    await _speak(speaker, pause_s=0)  # a second turn, said whole on the adopter
    await speaker.client.commit()
    _answered_whole(speaker, await speaker.answered(2))
    _check(speaker, victim, turns=2)
    await speaker.close()


@pytest.mark.parametrize("armed", ["command:create_conversation_item:1"], indirect=True)
async def test_a_kill_mid_tool_call_applies_the_output_once(armed: LocalCluster) -> None:
    speaker, victim = await _open(armed, tools=True)
    await _speak(speaker, pause_s=0)
    await speaker.client.commit()
    call = await speaker.answered(1)  # the required tool's call is the whole response
    (item,) = [i for i in call.output if i.type == pb.ITEM_TYPE_FUNCTION_CALL]
    output = pb.ConversationItem(
        type=pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT, call_id=item.call_id, output="found"
    )
    await speaker.client.create_item(output)
    await _killed(armed, victim)  # the output's number is stored; was its item?
    await speaker.client.create_response()
    answer = await speaker.answered(2)
    assert answer.status == pb.RESPONSE_STATUS_COMPLETED, answer
    assert 'the function returned "found"' in words(answer), words(answer)
    outputs = [
        e
        for e in speaker.of_kind("item_added")
        if e.item_added.item.type == pb.ITEM_TYPE_FUNCTION_CALL_OUTPUT
    ]
    assert len(outputs) == 1, outputs
    _check(speaker, victim, turns=1)
    await speaker.close()


async def _sdk_events(conn: Any, until: str) -> list[dict[str, Any]]:
    """Raw events off the SDK's socket up to ``until``, each checked against OpenAI's GA types
    (the client asked for no extensions) and read by the SDK's own parser."""
    events: list[dict[str, Any]] = []
    while not events or events[-1]["type"] != until:
        raw = await asyncio.wait_for(conn.recv_bytes(), 60)
        event = orjson.loads(raw)
        check_plain_event(event)
        conn.parse_event(raw)
        events.append(event)
    return events


@pytest.mark.parametrize("armed", ["command:append_input_audio:10"], indirect=True)
async def test_through_the_bridge_the_openai_sdk_rides_out_a_kill_mid_append(
    armed: LocalCluster,
) -> None:
    """The stock SDK through the cluster's bridge, its owner killed mid-turn: the socket stays
    open, the bridge takes the session back on a peer and sends again what the dead replica had
    not applied, and the turn is committed and answered whole, once, with no error."""
    routes = [r["route"] for r in armed.state["replicas"]]
    base = f"ws://{armed.state['proxy']['http']}/v1"
    client = AsyncOpenAI(api_key="test-key", websocket_base_url=base)
    fmt = {"type": "audio/pcm", "rate": RATE_HZ}
    update = {"type": "realtime", "audio": {"input": {"format": fmt, "turn_detection": None}}}
    async with client.realtime.connect(model="gpt-realtime") as conn:
        events = await _sdk_events(conn, "session.created")
        await conn.session.update(session=update)  # type: ignore[arg-type]
        events += await _sdk_events(conn, "session.updated")
        for index in range(CHUNKS):
            await conn.input_audio_buffer.append(audio=base64.b64encode(_chunk(index)).decode())
            await asyncio.sleep(0.02)  # the owner dies after the tenth, with more on the way
        await wait_for(lambda: any(not armed.alive(r) for r in routes), 60, "the owner to die")
        await conn.input_audio_buffer.commit()
        await conn.response.create()
        events += await _sdk_events(conn, "response.done")
    kinds = [e["type"] for e in events]
    assert "error" not in kinds, [e for e in events if e["type"] == "error"]
    assert kinds.count("input_audio_buffer.committed") == 1, kinds
    assert kinds.count("response.created") == 1, kinds
    done = events[-1]
    assert done["response"]["status"] == "completed", done
    assert f"you said {TURN_MS / 1000:.2f} seconds" in _words(done), _words(done)


@pytest.mark.parametrize("armed", ["command:commit_input_audio:1"], indirect=True)
async def test_through_the_bridge_an_extension_client_rides_out_a_kill_mid_commit(
    armed: LocalCluster,
) -> None:
    """An extension client (the page) through the bridge, its owner killed right after the
    commit was stored: its socket stays open, the turn is answered whole and once, every event
    numbered once and in order, and the rotated token the bridge's resume brought (in
    ``session.resumed``) is the one that resumes the session on a new socket afterwards."""
    base = f"http://{armed.state['proxy']['http']}"
    page = Page()
    pcm = {"type": "audio/pcm", "rate": RATE_HZ}
    update = {"type": "realtime", "audio": {"input": {"format": pcm, "turn_detection": None}}}
    seqs: list[int] = []
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(base + EXTENSIONS) as ws:
            await ws.send_json({"type": "session.update", "session": update})
            await page.until(ws, "session.created")
            first_token = page.token
            events = await _turn(ws, page)
            turns = 1
            if events[-1]["response"]["status"] == "failed":
                # Its answer had begun when the replica died: cut, with the reason, and the
                # committed turn is history now. The next turn shows the adopter hears it whole.
                assert events[-1]["response"]["status_details"]["error"]["code"] == (
                    "session_moved"
                ), events[-1]
                events += await _turn(ws, page)
                turns = 2
            seqs = [e["server_event_seq"] for e in events if e.get("server_event_seq")]
        kinds = [e["type"] for e in events]
        assert kinds.count("session.resumed") == 1, kinds
        assert page.token != first_token  # the bridge's resume rotated it and said so
        assert kinds.count("input_audio_buffer.committed") == turns, kinds
        done = events[-1]
        assert done["response"]["status"] == "completed", done
        assert f"you said {TURN_MS / 1000:.2f} seconds" in _words(done), _words(done)
        async with http.ws_connect(base + EXTENSIONS + "&resume=1") as ws:
            await page.resume(ws)  # with the token session.resumed brought
            done = await page.say(ws, "and after")
            assert done["response"]["status"] == "completed", done
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs


async def _turn(ws: aiohttp.ClientWebSocketResponse, page: Page) -> list[dict[str, Any]]:
    """One spoken turn, all at once, committed and answered: the events up to its answer."""
    for index in range(CHUNKS):
        audio = base64.b64encode(_chunk(index)).decode()
        await ws.send_json({"type": "input_audio_buffer.append", "audio": audio})
    await ws.send_json({"type": "input_audio_buffer.commit"})
    await ws.send_json({"type": "response.create"})
    events = [await page.next(ws)]
    while events[-1]["type"] != "response.done":
        events.append(await page.next(ws))
    return events
