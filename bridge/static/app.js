// The omni-grpc talk page: microphone in, the engine's voice out, over the Realtime dialect.
//
// It speaks OpenAI's Realtime events plus the duplex extensions: it acknowledges what it has
// played (playback.ack) and what it has received (session.event_ack), and when the network
// drops it reconnects and resumes the session (session.resume) from the last event it got,
// dropping the repeated part of a group it had half received, so no audio is lost or doubled.
// Everything a test needs to check is in window.omni.

const RATE = 24000;
const ACK_EVERY_MS = 500;
const SPEECH_RMS = 0.015; // local speech detector, used when the server has no turn detection
const SILENCE_END_MS = 700;
const OUTBOX_MAX = 50; // appends kept while reconnecting: 5 s of audio
const params = new URLSearchParams(location.search);

const omni = (window.omni = {
  status: "idle",
  sessionId: "",
  token: "",
  lastSeq: 0,
  ackedSeq: 0,
  resumes: 0,
  clientTurns: false, // true when the server does not detect turns: this page commits them
  responses: {}, // id -> {audioMs, playedMs, transcript, deltas: [[start, dur]], ...}
  userTranscripts: [],
  errors: [],
  acked: {}, // response id -> last playback.acknowledged
  dropSocket: () => ws && ws.close(4000, "test_drop"),
});

let ws = null;
let ctx = null;
let player = null;
let groupIds = new Set(); // ids received since the last event that carried a seq
let outbox = [];
let terminal = false;
let retry = 0;
let speaking = false;
let silentMs = 0;
let commitAt = 0;
let played = {};
let queuedFrames = 0;

const $ = (id) => document.getElementById(id);

function setStatus(text) {
  omni.status = text;
  $("status").textContent = text;
}

function send(event) {
  if (ws && ws.readyState === WebSocket.OPEN && omni.status === "live") {
    ws.send(JSON.stringify(event));
    return true;
  }
  return false;
}

function toBase64(buffer) {
  const bytes = new Uint8Array(buffer);
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(text);
}

function fromBase64(text) {
  const raw = atob(text);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes.buffer;
}

// -- the connection -----------------------------------------------------------------------

function connect(resuming) {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const protocols = ["realtime"];
  if (params.get("key")) protocols.push("openai-insecure-api-key." + params.get("key"));
  ws = new WebSocket(`${scheme}://${location.host}/v1/realtime${resuming ? "?resume=1" : ""}`,
                     protocols);
  setStatus(resuming ? "resuming" : "connecting");
  ws.onopen = () => {
    retry = 0;
    ws.send(JSON.stringify(resuming ? {
      type: "session.resume", session_id: omni.sessionId, resume_token: omni.token,
      last_received_server_event_seq: omni.lastSeq,
    } : {
      type: "session.update",
      session: {
        type: "realtime", output_modalities: ["audio"],
        audio: { input: { format: { type: "audio/pcm", rate: RATE } },
                 output: { format: { type: "audio/pcm", rate: RATE } } },
      },
    }));
  };
  ws.onmessage = (message) => receive(JSON.parse(message.data));
  ws.onclose = (close) => {
    if (terminal || close.code === 1008) {
      setStatus(`closed (${close.reason || close.code})`);
      return;
    }
    // Anything else is the network or a bridge going away: come back and resume.
    setStatus("reconnecting");
    const delay = Math.min(4000, 250 * 2 ** retry++) * (0.5 + Math.random() / 2);
    setTimeout(() => connect(Boolean(omni.sessionId)), delay);
  };
}

function receive(event) {
  if (groupIds.has(event.event_id)) return; // the repeated part of a half-received group
  if (event.server_event_seq) {
    omni.lastSeq = event.server_event_seq;
    groupIds = new Set();
  } else if (/^event_[0-9a-f]+_\d+_\d+$/.test(event.event_id)) {
    groupIds.add(event.event_id);
  }
  const handler = HANDLERS[event.type];
  if (handler) handler(event);
}

const HANDLERS = {
  "session.created": (e) => {
    omni.sessionId = e.session.id;
    omni.token = e.resume_token;
    omni.clientTurns = !e.session.audio.input.turn_detection;
    setStatus("live");
  },
  "session.resumed": (e) => {
    omni.token = e.resume_token;
    omni.resumes += 1;
    setStatus("live");
    const waiting = outbox;
    outbox = [];
    waiting.forEach(send);
  },
  "response.created": (e) => {
    omni.responses[e.response.id] = {
      audioMs: 0, playedMs: 0, transcript: "", deltas: [], done: false, status: "in_progress",
      clientLatencyMs: null, serverLatencyMs: null, committedAt: commitAt,
    };
    addLine("assistant", e.response.id, "");
  },
  "response.output_audio.delta": (e) => {
    const r = omni.responses[e.response_id];
    const pcm = fromBase64(e.delta);
    if (r) {
      if (r.clientLatencyMs === null && r.committedAt) {
        r.clientLatencyMs = Math.round(performance.now() - r.committedAt);
      }
      r.audioMs += pcm.byteLength / 2 / (RATE / 1000);
      r.deltas.push([e.start_ms, e.duration_ms]);
    }
    player.port.postMessage({ type: "chunk", id: e.response_id, pcm }, [pcm]);
  },
  "response.output_audio_transcript.delta": (e) => {
    const r = omni.responses[e.response_id];
    if (r) r.transcript += e.delta;
    setLine(e.response_id, r ? r.transcript : e.delta);
  },
  "conversation.item.input_audio_transcription.completed": (e) => {
    omni.userTranscripts.push(e.transcript);
    addLine("you", e.item_id, e.transcript);
  },
  "response.done": (e) => {
    const r = omni.responses[e.response.id];
    if (!r) return;
    r.done = true;
    r.status = e.response.status;
    r.serverLatencyMs = e.response.latency ? Math.round(e.response.latency.first_audio_ms) : null;
    player.port.postMessage({ type: "end", id: e.response.id });
    showTurn(e.response.id, r);
  },
  "input_audio_buffer.speech_started": () => bargeIn(),
  "playback.acknowledged": (e) => { omni.acked[e.response_id] = e; },
  "error": (e) => {
    omni.errors.push(e.error);
    addLine("error", "", `${e.error.code}: ${e.error.message}`);
  },
  "session.replaced": () => { terminal = true; },
  "session.expired": () => { terminal = true; },
  "session.closed": () => { terminal = true; },
  "session.resync_required": () => { terminal = true; },
};

// -- microphone and turns -----------------------------------------------------------------

function onMic({ pcm, rms }) {
  $("meter").value = Math.min(1, rms * 8);
  const append = { type: "input_audio_buffer.append", audio: toBase64(pcm) };
  if (!send(append) && omni.sessionId) {
    outbox.push(append); // reconnecting: keep the last few seconds and send them after
    if (outbox.length > OUTBOX_MAX) outbox.shift();
  }
  if (!omni.clientTurns) return;
  if (rms >= SPEECH_RMS) {
    if (!speaking && queuedFrames > 0) bargeIn();
    speaking = true;
    silentMs = 0;
  } else if (speaking && (silentMs += 100) >= SILENCE_END_MS) {
    speaking = false;
    commitAt = performance.now();
    send({ type: "input_audio_buffer.commit", create_response: true });
  }
}

function bargeIn() {
  // The person speaks over the assistant: stop playing now and cut history to what was heard.
  if (queuedFrames <= 0) return;
  player.port.postMessage({ type: "flush" });
  const id = Object.keys(omni.responses).pop();
  if (!id) return;
  send({ type: "output_audio_buffer.clear", response_id: id });
}

function onPlayer({ played: counts, queued, flushed }) {
  played = counts;
  queuedFrames = queued;
  for (const [id, frames] of Object.entries(counts)) {
    if (omni.responses[id]) omni.responses[id].playedMs = frames / (RATE / 1000);
  }
  if (flushed) acknowledge(true);
}

function acknowledge(truncate) {
  for (const [id, frames] of Object.entries(played)) {
    const r = omni.responses[id];
    if (!r || r.ackedMs === r.playedMs) continue;
    if (send({ type: "playback.ack", response_id: id, played_ms: frames / (RATE / 1000),
               truncate: Boolean(truncate) })) {
      r.ackedMs = r.playedMs;
    }
  }
  if (omni.lastSeq > omni.ackedSeq &&
      send({ type: "session.event_ack", server_event_seq: omni.lastSeq })) {
    omni.ackedSeq = omni.lastSeq;
  }
}

// -- the page -----------------------------------------------------------------------------

function addLine(who, id, text) {
  const line = document.createElement("p");
  line.className = who;
  line.dataset.id = id;
  line.innerHTML = `<b>${who}</b> <span></span>`;
  line.querySelector("span").textContent = text;
  $("transcript").append(line);
}

function setLine(id, text) {
  const line = document.querySelector(`p[data-id="${id}"] span`);
  if (line) line.textContent = text;
}

function showTurn(id, r) {
  const row = document.createElement("tr");
  const cells = [id.slice(-8), r.status, `${Math.round(r.audioMs)} ms`,
                 r.clientLatencyMs === null ? "–" : `${r.clientLatencyMs} ms`,
                 r.serverLatencyMs === null ? "–" : `${r.serverLatencyMs} ms`];
  for (const value of cells) {
    const cell = document.createElement("td");
    cell.textContent = value;
    row.append(cell);
  }
  $("turns").append(row);
}

async function start() {
  $("start").disabled = true;
  ctx = new AudioContext({ sampleRate: RATE });
  await ctx.audioWorklet.addModule("/static/worklet.js");
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: true, noiseSuppression: false,
             autoGainControl: false },
  });
  const mic = new AudioWorkletNode(ctx, "mic-capture");
  mic.port.onmessage = (event) => onMic(event.data);
  const mute = new GainNode(ctx, { gain: 0 }); // a capture node must be pulled to run
  ctx.createMediaStreamSource(stream).connect(mic).connect(mute).connect(ctx.destination);
  player = new AudioWorkletNode(ctx, "pcm-player", { outputChannelCount: [1] });
  player.port.onmessage = (event) => onPlayer(event.data);
  player.connect(ctx.destination);
  await ctx.resume();
  setInterval(() => acknowledge(false), ACK_EVERY_MS);
  connect(false);
}

$("start").addEventListener("click", () => start().catch((error) => {
  omni.errors.push({ code: "page", message: String(error) });
  setStatus(`failed: ${error}`);
}));
