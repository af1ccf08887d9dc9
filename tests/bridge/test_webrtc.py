"""WebRTC calls on the bridge, with a real aiortc caller: Opus both ways, events on the channel.

The caller speaks real speech on its track; the loopback engine says the turn back, and the
caller must hear it on the answer's track, with OpenAI's call events on the channel and no
audio deltas there. Refused calls are HTTP errors with the dialect's error object, and leave
no peer connection, task or socket behind.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import os
from typing import Any

import aiohttp
import orjson
import pytest
from aiortc import RTCPeerConnection, RTCSessionDescription

from omni_grpc.server.app import RunningServer
from omni_grpc.wire import pb
from tests.bridge.test_resume import wait_for_journal
from tests.bridge.testkit import check_plain_event, running_bridge
from tests.bridge.webrtc_caller import RATE, Caller, Refused, calling, voiced_ms
from tests.serving import eventually, serving, settings

MODEL = "?model=loopback-test"


def held() -> tuple[int, int, int]:
    """What calls hold in this process: live peer connections, tasks, open descriptors."""
    gc.collect()
    peers = sum(
        1
        for o in gc.get_objects()
        if isinstance(o, RTCPeerConnection) and o.connectionState != "closed"
    )
    return peers, len(asyncio.all_tasks()), len(os.listdir("/proc/self/fd"))


NO_TURN_DETECTION = {
    "type": "session.update",
    "session": {"type": "realtime", "audio": {"input": {"turn_detection": None}}},
}


async def ask(caller: Caller, speech: bytes) -> dict[str, Any]:
    """Says ``speech`` (and a second of silence, so all of it is in), commits and asks for an
    answer; returns its ``response.done``."""
    start = len(caller.events)
    caller.microphone.say(speech + bytes(RATE * 2))
    await caller.microphone.spoken.wait()
    caller.send({"type": "input_audio_buffer.commit"})
    caller.send({"type": "response.create"})
    return await caller.until("response.done", after=start)


async def test_a_call_is_heard_and_answered_on_its_tracks(bridge_port: int, speech: bytes) -> None:
    async with calling(bridge_port, MODEL) as caller:
        assert caller.call_id.startswith("rtc_")
        caller.send(NO_TURN_DETECTION)
        await caller.until("session.updated")
        done = await ask(caller, speech)
        assert done["response"]["status"] == "completed"
        response_id = done["response"]["id"]
        stopped = await caller.until("output_audio_buffer.stopped")
        assert stopped["response_id"] == response_id
        types = caller.types()
        for event in caller.events:
            check_plain_event(event)
        # The answer's audio rides the track, never the channel; its start and end are told.
        assert "response.output_audio.delta" not in types
        assert types.count("output_audio_buffer.started") == 1
        assert types.index("output_audio_buffer.started") < types.index(
            "output_audio_buffer.stopped"
        )
        assert "error" not in types, [e for e in caller.events if e["type"] == "error"]
        # The loopback says the turn back: the speech heard is the speech said (Opus both
        # ways, so measured by its voiced length, within 20%).
        said = voiced_ms(speech)
        assert said > 1000
        # The last frames left the bridge; they reach the caller's jitter buffer just after.
        await eventually(lambda: voiced_ms(caller.heard) >= 0.8 * said)
        await asyncio.sleep(0.3)
        assert voiced_ms(caller.heard) <= 1.2 * said, (said, voiced_ms(caller.heard))


async def test_a_clear_stops_the_answer_at_once_and_the_history_keeps_what_was_sent(
    service: RunningServer, speech: bytes
) -> None:
    async with running_bridge(service) as port, calling(port, MODEL + "&extensions=1") as caller:
        caller.send(NO_TURN_DETECTION)
        await caller.until("session.updated")
        start = len(caller.events)
        caller.microphone.say(speech + bytes(RATE * 2))
        await caller.microphone.spoken.wait()
        caller.send({"type": "input_audio_buffer.commit"})
        caller.send({"type": "response.create"})
        started = await caller.until("output_audio_buffer.started", after=start)
        await eventually(lambda: voiced_ms(caller.heard) >= 500)  # some of the answer heard
        # What the stock client sends to interrupt (its response may be done on the service
        # and still playing here).
        caller.send({"type": "output_audio_buffer.clear"})
        cleared = await caller.until("output_audio_buffer.cleared", after=start)
        assert cleared["response_id"] == started["response_id"]
        heard_at_clear = len(caller.heard)
        acked = await caller.until("playback.acknowledged", after=start)
        assert acked["truncate"] and acked["response_id"] == started["response_id"]
        # The history keeps what left on the track: more than was heard before the clear was
        # sent, less than the whole answer.
        assert 500 <= acked["played_ms"] < len(speech) / (RATE * 2) * 1000 - 500, acked
        await caller.until("response.done", after=start)
        # Nothing more of the answer is heard: what was in flight and in the caller's jitter
        # buffer (under 300 ms), then silence.
        await asyncio.sleep(0.5)
        assert voiced_ms(caller.heard[heard_at_clear + RATE * 2 * 3 // 10 :]) == 0
        assert "output_audio_buffer.stopped" not in caller.types()[start:]
        assert caller.types()[start:].count("output_audio_buffer.cleared") == 1


async def test_refused_calls_are_typed_http_errors_and_leave_nothing(
    service: RunningServer,
) -> None:
    async with running_bridge(service.target, api_keys=("sk-good",)) as port:
        url = f"http://127.0.0.1:{port}/v1/realtime/calls"

        async def refused(headers: dict[str, str], sdp: str | None = None) -> tuple[int, Any]:
            caller = Caller()
            try:
                await caller.call(url, headers, offer_sdp=sdp)
            except Refused as refusal:
                return refusal.status, orjson.loads(refusal.body)
            finally:
                await caller.close()
            raise AssertionError("the call was answered")

        before = held()
        status, body = await refused({"Authorization": "Bearer sk-bad"})
        assert status == 401 and body["error"]["code"] == "invalid_api_key"
        status, body = await refused(
            {"Authorization": "Bearer sk-good", "Origin": "https://evil.example"}
        )
        assert status == 403 and body["error"]["code"] == "origin_not_allowed"
        status, body = await refused({"Authorization": "Bearer sk-good"}, sdp="v=0\r\nnot sdp")
        assert status == 400 and body["error"]["code"] == "invalid_offer"
        status, body = await refused(
            {"Authorization": "Bearer sk-good", "Content-Type": "text/plain"}
        )
        assert status == 415 and body["error"]["code"] == "unsupported_media_type"
        assert len(service.sessions.registry) == 0  # no session was opened for a refused call
        # No peer connection is left, and no task or descriptor more than before (what other
        # tests of this process left may still end meanwhile).
        await eventually(
            lambda: (now := held())[0] == 0 and now[1] <= before[1] and now[2] <= before[2]
        )


@pytest.mark.parametrize("path", ["in_process", "grpc"])
async def test_a_call_to_a_full_service_is_refused_typed_with_nothing_left(path: str) -> None:
    from omni_grpc.server.settings import QueueSettings
    from tests.bridge.testkit import service_settings
    from tests.serving import serving

    chosen = service_settings(queue=QueueSettings(capacity=1, max_wait_s=30.0, max_length=0))
    async with serving(chosen) as running:
        target: str | RunningServer = running if path == "in_process" else running.target
        async with running_bridge(target) as port, calling(port, MODEL) as first:
            first.send(NO_TURN_DETECTION)
            await first.until("session.updated")
            caller = Caller()
            try:
                with pytest.raises(Refused) as refused:
                    await caller.call(f"http://127.0.0.1:{port}/v1/realtime/calls{MODEL}")
            finally:
                await caller.close()
            assert refused.value.status == 429
            error = orjson.loads(refused.value.body)["error"]
            assert (error["type"], error["code"]) == ("rate_limit_error", "queue_full")
            assert held()[0] == 2  # the first call's two ends (caller and bridge), no other


def journaled(events: list[dict[str, Any]]) -> list[tuple[int, int, dict[str, Any]]]:
    """(seq, index in its group, event) of each journaled event (ids ``event_<tag>_<seq>_<k>``),
    in the order received."""
    out = []
    for event in events:
        parts = event.get("event_id", "").split("_")
        if len(parts) == 4:
            out.append((int(parts[2]), int(parts[3]), event))
    return out


async def test_a_cut_call_resumes_on_a_new_peer_connection_with_nothing_lost_or_doubled(
    speech: bytes,
) -> None:
    from omni_grpc.server.app import start_server
    from tests.bridge.testkit import service_settings

    # The loopback answers at twice real time, so the answer is still being made at the cut.
    paced = await start_server(service_settings(engine_options={"pace": "realtime", "speed": "2"}))
    try:
        async with running_bridge(paced) as port:
            first = Caller()
            await first.call(f"http://127.0.0.1:{port}/v1/realtime/calls{MODEL}&extensions=1")
            created = await first.until("session.created")
            first.send(NO_TURN_DETECTION)
            await first.until("session.updated")
            first.microphone.say(speech + bytes(RATE * 2))
            await first.microphone.spoken.wait()
            first.send({"type": "input_audio_buffer.commit"})
            first.send({"type": "response.create"})
            await first.until("output_audio_buffer.started")
            await first.until("response.output_audio_transcript.delta")
            await first.close()  # the network goes: no hang-up, no session.close
            assert "response.done" not in first.types()
            seen = [e["server_event_seq"] for e in first.events if "server_event_seq" in e]
            # The answer goes on while no call carries it: the resume has events to replay.
            await wait_for_journal(paced, created, max(seen) + 1)
            second = Caller()
            await second.call(
                f"http://127.0.0.1:{port}/v1/realtime/calls{MODEL}&extensions=1",
                {
                    "Omni-Session-Id": created["session"]["id"],
                    "Omni-Resume-Token": created["resume_token"],
                    "Omni-Last-Event-Seq": str(max(seen)),
                },
            )
            try:
                resumed = await second.until("session.resumed")
                assert resumed["session_id"] == created["session"]["id"]
                assert resumed["replayed_events"] > 0  # made while no call carried them
                done = await second.until("response.done")
                assert done["response"]["status"] == "completed"
                await second.until("output_audio_buffer.stopped")
                # Every journaled event once and in order, across the two calls: a group the
                # first call saw in part comes again whole, with the same ids, which drop out.
                events = journaled(first.events) + journaled(second.events)
                unique = list(dict.fromkeys((seq, k) for seq, k, _ in events))
                assert unique == sorted(unique)
                words = "".join(
                    event["delta"]
                    for event in {e["event_id"]: e for _, _, e in events}.values()
                    if event["type"] == "response.output_audio_transcript.delta"
                )
                assert words == done["response"]["output"][0]["content"][0]["transcript"]
                # The audio of replayed events is not played again on the new track: what both
                # tracks carried together is at most the answer, once.
                await asyncio.sleep(0.3)
                said = voiced_ms(speech)
                assert voiced_ms(first.heard) + voiced_ms(second.heard) <= 1.2 * said
                assert voiced_ms(second.heard) > 0
            finally:
                await second.close()
    finally:
        await paced.stop()


async def test_a_barge_in_cuts_the_answer_and_acks_what_left_on_the_track() -> None:
    """The carrier alone, its answer's track pulled as aiortc pulls it: speech_started from the
    service stops the audio at once and tells the session how far the item had gone."""
    from bridge.webrtc.carrier import CallCarrier

    carrier = CallCarrier(1.0, lambda: None)
    pcm = (b"\x00\x10" * (RATE // 10)) * 10  # a second of loud audio
    await carrier.send(
        {
            "type": "response.output_audio.delta",
            "response_id": "r1",
            "item_id": "i1",
            "delta": base64.b64encode(pcm).decode(),
        }
    )
    frames = [await carrier.track.recv() for _ in range(15)]  # 300 ms leave, in real time
    assert all(bytes(f.planes[0])[:2] == b"\x00\x10" for f in frames)
    await carrier.send({"type": "input_audio_buffer.speech_started", "item_id": "u2"})
    after = bytes((await carrier.track.recv()).planes[0])
    assert after == bytes(len(after))  # silence from the next frame on
    told = [orjson.loads(text) for text in carrier._early]
    assert [e["type"] for e in told] == [
        "output_audio_buffer.started",
        "input_audio_buffer.speech_started",
        "output_audio_buffer.cleared",
    ]
    ack = await carrier.receive()
    assert isinstance(ack, pb.ConverseRequest)
    assert ack.ack_playback.truncate and ack.ack_playback.item_id == "i1"
    assert ack.ack_playback.played_ms == 300.0
    # Late audio of the cut response is not played.
    await carrier.send(
        {
            "type": "response.output_audio.delta",
            "response_id": "r1",
            "item_id": "i1",
            "delta": base64.b64encode(pcm).decode(),
        }
    )
    assert not carrier.track.busy
    carrier.ended()


def test_ice_servers_take_stun_and_turn_with_credentials() -> None:
    from bridge.webrtc.ice import ice_servers

    stun, turn = ice_servers(["stun:stun.example:3478", "turns:me:s%40cret@turn.example:5349"])
    assert (stun.urls, stun.username, stun.credential) == ("stun:stun.example:3478", None, None)
    assert (turn.urls, turn.username, turn.credential) == (
        "turns:turn.example:5349",
        "me",
        "s@cret",
    )


async def test_a_lossy_jittery_uplink_still_gets_whole_answers(
    service: RunningServer, speech: bytes
) -> None:
    """One caller packet in ten lost and one in ten held back 30 ms, on the way to the bridge:
    the bridge's jitter buffer and Opus's concealment carry the turn, the answer arrives
    whole, and the session goes on to a second turn."""
    async with running_bridge(service) as port, calling(port, MODEL) as caller:
        [sender] = caller.peer.getSenders()
        dtls = sender.transport
        send_rtp = dtls._send_rtp
        packets = 0

        async def lossy(data: bytes) -> None:
            nonlocal packets
            if data[1] & 0x7F in range(72, 77):  # RTCP (sender reports): always through
                await send_rtp(data)
                return
            packets += 1
            if packets % 10 == 3:
                return  # lost
            if packets % 10 == 7:
                await asyncio.sleep(0.03)  # late
            await send_rtp(data)

        dtls._send_rtp = lossy  # type: ignore[method-assign]
        caller.send(NO_TURN_DETECTION)
        await caller.until("session.updated")
        said = voiced_ms(speech)
        for turn in range(2):
            start, heard_before = len(caller.events), len(caller.heard)
            done = await ask(caller, speech)
            assert done["response"]["status"] == "completed", turn
            await caller.until("output_audio_buffer.stopped", after=start)
            await eventually(
                lambda since=heard_before: voiced_ms(caller.heard[since:]) >= 0.75 * said
            )
        assert packets > 300  # the loss was on the path the whole time
        assert "error" not in caller.types()


@pytest.mark.parametrize("lost_every", [0, 10, 4])
def test_the_call_jitter_buffer_skips_lost_packets_and_keeps_its_depth(lost_every: int) -> None:
    from aiortc.rtp import RtpPacket

    from bridge.webrtc.jitter import CallJitterBuffer

    buffer = CallJitterBuffer(capacity=16, prefetch=4)
    released: list[tuple[int, int]] = []  # (the newest packet's number, the frame's)
    sent = [n for n in range(300) if not lost_every or n % lost_every != 3]
    for number in sent:
        packet = RtpPacket(payload_type=111, sequence_number=number, timestamp=number * 960)
        packet._data = number.to_bytes(2, "big")  # type: ignore[attr-defined]
        _, frame = buffer.add(packet)
        if frame is not None:
            released.append((number, int.from_bytes(frame.data, "big")))
    frames = [frame for _, frame in released]
    assert frames == sent[: len(frames)]  # every packet that came, once, in order
    assert len(frames) >= len(sent) - 5
    assert max(newest - frame for newest, frame in released) <= 6  # 120 ms at most


async def test_a_resume_takes_the_session_from_a_call_whose_path_died_unnoticed(
    service: RunningServer,
) -> None:
    """The old call's path is dead but nothing said so (no hang-up, ICE still thinks it is
    up): the new offer's resume takes the session over, and the old call is ended, its peer
    connection closed on the bridge."""
    async with running_bridge(service) as port:
        url = f"http://127.0.0.1:{port}/v1/realtime/calls{MODEL}&extensions=1"
        first = Caller()
        await first.call(url)
        created = await first.until("session.created")
        second = Caller()
        try:
            await second.call(
                url,
                {
                    "Omni-Session-Id": created["session"]["id"],
                    "Omni-Resume-Token": created["resume_token"],
                    "Omni-Last-Event-Seq": "0",
                },
            )
            resumed = await second.until("session.resumed")
            assert resumed["session_id"] == created["session"]["id"]
            await first.until("session.replaced")
            await eventually(lambda: first.peer.connectionState == "closed", timeout_s=15)
            # The session carries on over the new call.
            second.send({"type": "conversation.item.retrieve", "item_id": "none"})
            await second.until("error", after=1)
        finally:
            await first.close()
            await second.close()


async def test_a_call_opened_with_a_client_secret_resumes_with_its_resume_secret(
    service: RunningServer,
) -> None:
    """A call a client secret opened holds no key to come back with: like a page's websocket
    it is handed a resume secret, which resumes that session on a new call and nothing else."""
    async with running_bridge(service, api_keys=("sk-backend",)) as port:
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"http://127.0.0.1:{port}/v1/realtime/client_secrets",
                headers={"Authorization": "Bearer sk-backend"},
                json={},
            ) as minted,
        ):
            secret = (await minted.json())["value"]
        url = f"http://127.0.0.1:{port}/v1/realtime/calls{MODEL}&extensions=1"
        async with calling(
            port, f"{MODEL}&extensions=1", {"Authorization": f"Bearer {secret}"}
        ) as first:
            created = await first.until("session.created")
        resume_secret = created["resume_secret"]
        assert resume_secret.startswith("rs_")
        named = {
            "Authorization": f"Bearer {resume_secret}",
            "Omni-Session-Id": created["session"]["id"],
            "Omni-Resume-Token": created["resume_token"],
        }

        async def refused(headers: dict[str, str]) -> int:
            caller = Caller()
            try:
                await caller.call(url, headers)
            except Refused as refusal:
                return refusal.status
            finally:
                await caller.close()
            raise AssertionError("answered")

        # Not a new session, not another session's resume.
        assert await refused({"Authorization": f"Bearer {resume_secret}"}) == 401
        assert await refused({**named, "Omni-Session-Id": "sess_other"}) == 401
        second = Caller()
        try:
            await second.call(url, named)
            resumed = await second.until("session.resumed")
            assert resumed["session_id"] == created["session"]["id"]
            assert resumed["resume_secret"].startswith("rs_")
        finally:
            await second.close()


async def test_a_call_opened_with_a_secret_minted_with_a_session_starts_with_it(
    service: RunningServer,
) -> None:
    """A client secret minted with a session opens a call's session with it, as it opens a
    websocket's; the session's audio formats are the call's whatever the minted ones say."""
    async with running_bridge(service, api_keys=("sk-backend",)) as port:
        session = {
            "instructions": "Answer the phone.",
            "audio": {"input": {"format": {"type": "audio/pcmu"}}},
        }
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"http://127.0.0.1:{port}/v1/realtime/client_secrets",
                headers={"Authorization": "Bearer sk-backend"},
                json={"session": session},
            ) as minted,
        ):
            secret = (await minted.json())["value"]
        async with calling(port, "", {"Authorization": f"Bearer {secret}"}) as caller:
            created = (await caller.until("session.created"))["session"]
            assert created["instructions"] == "Answer the phone."
            assert created["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
            assert "error" not in caller.types()


async def test_a_server_starts_a_call_with_the_form_of_sdp_and_session(
    service: RunningServer,
) -> None:
    """The multipart form a backend posts to start a call for a browser: the offer, and the
    session's configuration, which opens the call's session."""
    async with running_bridge(service) as port:
        caller = Caller()
        try:
            await caller.peer.setLocalDescription(await caller.peer.createOffer())
            form = aiohttp.FormData(default_to_multipart=True)  # as curl -F and browsers send it
            form.add_field("sdp", caller.peer.localDescription.sdp)
            session = {"type": "realtime", "model": "loopback-test", "instructions": "Be brief."}
            form.add_field("session", orjson.dumps(session).decode())
            async with (
                aiohttp.ClientSession() as http,
                http.post(f"http://127.0.0.1:{port}/v1/realtime/calls", data=form) as answer,
            ):
                assert answer.status == 201, await answer.text()
                sdp = await answer.text()
            await caller.peer.setRemoteDescription(RTCSessionDescription(sdp, "answer"))
            # The form's session opened the call's session, as a websocket's first
            # session.update opens one: created with it.
            created = await caller.until("session.created")
            assert created["session"]["instructions"] == "Be brief."
            assert "error" not in caller.types()
        finally:
            await caller.close()


async def test_a_hang_up_ends_the_call_and_an_unknown_call_is_not_found(
    service: RunningServer,
) -> None:
    async with running_bridge(service) as port, calling(port, MODEL) as caller:
        await caller.until("session.created")
        base = f"http://127.0.0.1:{port}/v1/realtime/calls"
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{base}/rtc_unknown/hangup") as unknown:
                assert unknown.status == 404
                assert (await unknown.json())["error"]["code"] == "call_not_found"
            async with http.post(f"{base}/{caller.call_id}/hangup") as hung_up:
                assert hung_up.status == 200
        await eventually(lambda: caller.peer.connectionState == "closed", timeout_s=15)
        # The session ended with the call (a call that just went would keep it for its grace).
        assert len(service.sessions.registry) == 0


async def test_a_call_runs_a_function_tool_and_is_answered_after_its_output(
    speech: bytes,
) -> None:
    """A spoken question over a call whose session has a function tool: the answer calls it
    (the loopback calls the first tool under tool choice ``auto``), the caller sends the tool's
    output on the channel, and the next answer reads it and calls nothing."""
    weather = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    update = {
        "type": "session.update",
        "session": {
            "type": "realtime",
            "tools": [weather],
            "tool_choice": "auto",
            "audio": {"input": {"turn_detection": None}},
        },
    }
    options = {"tool_call": "auto"}
    async with (
        serving(settings(engine_options=options)) as service,
        running_bridge(service) as port,
        calling(port, MODEL) as caller,
    ):
        caller.send(update)
        await caller.until("session.updated")
        done = await ask(caller, speech)
        (call,) = [i for i in done["response"]["output"] if i["type"] == "function_call"]
        assert call["name"] == "get_weather"
        start = len(caller.events)
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
        caller.send({"type": "conversation.item.create", "item": output})
        caller.send({"type": "response.create"})
        answer = await caller.until("response.done", after=start)
        assert answer["response"]["status"] == "completed", answer
        assert not [i for i in answer["response"]["output"] if i["type"] == "function_call"]
        said = " ".join(
            str(part.get("transcript") or part.get("text") or "")
            for item in answer["response"]["output"]
            for part in item.get("content", [])
        )
        assert 'the function returned "sunny"' in said, said
        for event in caller.events:
            check_plain_event(event)
        assert "error" not in caller.types()
