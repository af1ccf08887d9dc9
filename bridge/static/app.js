// The omni-grpc talk page: microphone in, the engine's voice out, over the Realtime dialect.
//
// It speaks OpenAI's Realtime events plus the duplex extensions: it acknowledges what it has
// received (session.event_ack) and, on a websocket, what it has played (playback.ack; on a
// WebRTC call the bridge knows what left on the track), and resumes its session after a drop
// (connection.js). The carrier is the person's choice (WebRTC where the browser has it, else
// the websocket; ?carrier=websocket|webrtc picks one); one event handling path serves both.
// Start, stop and mute drive the microphone and the session; typed turns, instructions and
// the voice go as events. Everything a test needs to check is in window.omni (state.js).

import { AudioIO } from "./audio.js";
import { Connection } from "./connection.js";
import { addLine, markCut, markOverlap, setLine, showBargeIn } from "./conversation.js";
import { showTurn } from "./latency.js";
import { RATE, omni } from "./state.js";

const ACK_EVERY_MS = 500;
const SPEECH_RMS = 0.015; // local speech detector, used when the server has no turn detection
const SILENCE_END_MS = 700;
const CHUNK_MS = 100; // one captured chunk (worklet.js)
const INPUT_MARKS_KEPT = 600; // a minute of input clock, to place the server's speech ends
// Silence the service may hold uncommitted before the page clears it: a page left open must
// not fill the service's input buffer (it refuses appends past it) when the page commits.
const IDLE_CLEAR_MS = 10000;

const $ = (id) => document.getElementById(id);
window.omni = omni;

let speaking = false;
let silentMs = 0;
let idleMs = 0; // silence sent since the last turn or clear, while nobody speaks
let turnEndAt = 0; // when the last turn ended (page clock): its answer's latency runs from it
let turnWaitMs = null; // the silence the service waited for before it ended the last turn
let turnDecidedMs = null; // and how long after the end of speech it had decided on that wait
let played = {};
let queuedFrames = 0;
let ackTimer = 0;
let settingsUpdates = 0; // numbers the settings' session.update, so a refusal finds its way back
// The session's input clock: ms of audio sent, and when each chunk was captured. The server
// reports the end of speech on this clock; the marks turn it into a time on the page's clock.
const input = { sentMs: 0, marks: [] };

const audio = new AudioIO({ onMic, onPlayer });
const connection = new Connection({
  onEvent: receive, onStatus: showStatus, opening, player: $("answer"),
  microphone: () => audio.stream?.getAudioTracks()[0] || null,
});

// -- the carrier ---------------------------------------------------------------------------

const CARRIERS = { webrtc: "WebRTC", websocket: "websocket" };

// The query's carrier, else WebRTC where the browser has it: the media path made for a person
// on a real network (Opus, a jitter buffer, echo cancellation fed by what it plays).
function defaultCarrier() {
  const asked = new URLSearchParams(location.search).get("carrier");
  if (asked in CARRIERS) return asked;
  return "RTCPeerConnection" in window ? "webrtc" : "websocket";
}

function showCarrier(carrier) {
  $("carrier-used").textContent = carrier ? `over ${CARRIERS[carrier]}` : "";
}

$("carrier").value = defaultCarrier();
if (!("RTCPeerConnection" in window)) {
  $("carrier").querySelector('[value="webrtc"]').disabled = true;
}

// -- the session ---------------------------------------------------------------------------

function settings() {
  const session = { type: "realtime" };
  const instructions = $("instructions").value.trim();
  const voice = $("voice").value.trim();
  if (instructions) session.instructions = instructions;
  if (voice) session.audio = { output: { voice } };
  return session;
}

function opening() {
  const session = settings();
  session.output_modalities = ["audio"];
  session.audio = {
    // The service judges from the words whether a turn is over, where its engine can.
    input: { format: { type: "audio/pcm", rate: RATE }, turn_detection: { type: "semantic_vad" } },
    output: { ...session.audio?.output, format: { type: "audio/pcm", rate: RATE } },
  };
  return { type: "session.update", session };
}

function showSession(session) {
  omni.session = session;
  // A server that records says so of each session; the person talking should see it.
  $("recorded").hidden = !session.recording?.enabled;
  const voice = session.audio?.output?.voice;
  $("voice").placeholder = voice || "the engine's default";
  if (voice && !$("voice").value) $("voice").value = voice;
  if (session.instructions && !$("instructions").value) {
    $("instructions").value = session.instructions;
  }
}

function showStatus(status) {
  const badge = $("status");
  badge.textContent = status === "closed" && omni.closeReason ? `closed · ${omni.closeReason}`
                    : status === "queued" && omni.queue ? queueText(omni.queue)
                    : status;
  badge.className = `status ${status}`;
  const attached = status === "live" || status === "resumed";
  $("send").disabled = $("apply").disabled = !attached;
  holdMic();
  if (status === "closed") stopped();
}

// A call's microphone track is open unless muted or waiting in the queue (a socket's chunks
// are held in onMic).
function holdMic() {
  connection.setMicOpen(!omni.muted && omni.status !== "queued");
}

// Where a waiting session stands, as the service last said it.
function queueText({ position, estimatedWaitMs }) {
  const wait = estimatedWaitMs > 0 ? ` · about ${Math.ceil(estimatedWaitMs / 1000)} s` : "";
  return `waiting for a place · ${position} in line${wait} · the microphone opens then`;
}

const HANDLERS = {
  "session.created": (e) => {
    omni.capabilities = e.capabilities;
    omni.clientTurns = !e.session.audio.input.turn_detection;
    input.sentMs = 0;
    input.marks = [];
    $("engine").textContent = e.capabilities ? `engine: ${e.capabilities.engine}` : "";
    showSession(e.session);
    if (e.capabilities?.supports_interruption_by_words) {
      // "mm-hm" or a cough over a reply holds it, and it goes on; words cut it.
      const interruption = { mode: "words", resume_false_interruption: true };
      connection.send({ type: "session.update",
                        session: { overlap_policy: "barge_in_on_speech", interruption } });
    }
  },
  "session.resumed": (e) => showSession(e.session),
  "session.updated": (e) => {
    showSession(e.session);
    $("settings-state").textContent = "applied";
  },
  "input_audio_buffer.committed": (e) => {
    const transcribed = omni.session?.audio?.input?.transcription;
    const placeholder = transcribed ? "…" : "(not transcribed)";
    addLine("you", e.item_id, omni.partials[e.item_id] || placeholder, "spoken");
  },
  // Words of the turn while it is spoken; the transcript replaces them when it comes.
  "conversation.item.input_audio_transcription.delta": (e) => {
    omni.partials[e.item_id] = (omni.partials[e.item_id] || "") + e.delta;
    addLine("you", e.item_id, omni.partials[e.item_id], "spoken partial");
  },
  // Speech over a reply cuts it here at once, unless the service judges that speech first.
  // (The service heard that speech: what becomes of its reply is its own to decide.)
  "input_audio_buffer.speech_started": () => { if (!judgedByService()) bargeIn(false); },
  "input_audio_buffer.speech_stopped": (e) => {
    turnEndAt = inputTime(e.audio_end_ms);
    const judged = omni.turnEnds.at(-1);
    const ours = judged?.item_id === e.item_id;
    turnWaitMs = ours ? judged.wait_ms : null;
    turnDecidedMs = ours ? judged.decided_ms : null;
  },
  "turn_end.decision": (e) => omni.turnEnds.push(e),
  "overlap.decision": (e) => {
    omni.overlaps.push(e);
    if (e.action === "pause" || e.action === "resume") markOverlap(e.response_id, e);
  },
  "conversation.item.input_audio_transcription.completed": (e) => {
    omni.userTranscripts.push(e.transcript);
    addLine("you", e.item_id, e.transcript, "spoken").classList.remove("partial");
  },
  "conversation.item.added": (e) => {
    const part = e.item.content?.find((c) => c.type === "input_text");
    if (e.item.role !== "user" || !part) return;
    if (!omni.typed.some((item) => item.id === e.item.id)) {
      omni.typed.push({ id: e.item.id, text: part.text });
    }
    addLine("you", e.item.id, part.text, "typed");
  },
  "response.created": (e) => {
    omni.responses[e.response.id] = {
      audioMs: 0, playedMs: 0, transcript: "", deltas: [], done: false, status: "in_progress",
      turnEndAt, turnWaitMs, turnDecidedMs, firstAudioAt: null, clientLatencyMs: null, serverLatencyMs: null,
      firstTextMs: null, latency: null, audioEnded: false,
    };
    turnWaitMs = turnDecidedMs = null;
    addLine("assistant", e.response.id, "");
  },
  "response.output_audio.delta": (e) => {
    const r = omni.responses[e.response_id];
    const pcm = fromBase64(e.delta);
    if (r) {
      firstAudio(r);
      r.audioMs += pcm.byteLength / 2 / (RATE / 1000);
      r.deltas.push([e.start_ms, e.duration_ms]);
    }
    audio.play(e.response_id, pcm);
  },
  "response.output_audio_transcript.delta": (e) => {
    const r = omni.responses[e.response_id];
    if (r) r.transcript += e.delta;
    setLine(e.response_id, r ? r.transcript : e.delta);
  },
  "response.done": (e) => {
    const r = omni.responses[e.response.id];
    if (!r || r.done) return;
    r.done = true;
    r.status = e.response.status;
    r.reason = e.response.status_details?.detail || "";
    r.latency = e.response.latency;
    const firstTextMs = r.latency?.first_text_ms;
    if (firstTextMs > 0) r.firstTextMs = Math.round(firstTextMs);
    audio.end(e.response.id);
    if (r.status === "cancelled" && r.audioMs > 0) markCut(e.response.id, r.playedMs);
    showResponse(e.response.id, r);
  },
  "playback.acknowledged": (e) => {
    omni.acked[e.response_id] = e;
    const r = omni.responses[e.response_id];
    if (!r || !connection.audioOnTrack) return;
    // On a call the bridge acknowledges what left on the track: all of the answer when it
    // played out, up to the cut when it was cut. That is the audio the page heard.
    r.playedMs = e.played_ms;
    r.audioMs = Math.max(r.audioMs, e.played_ms);
    if (e.truncate) {
      r.cutOnTrack = true;
      markCut(e.response_id, r.playedMs);
    }
    showResponse(e.response_id, r);
  },
  // A call's answer on its track. "First audio" on WebRTC is output_audio_buffer.started: the
  // bridge sends it as the answer's first packet leaves on the track, so it reaches the page
  // about with that packet (the browser's jitter buffer then holds it some tens of ms more).
  "output_audio_buffer.started": (e) => {
    const r = omni.responses[e.response_id];
    if (r) firstAudio(r);
    if (r) showResponse(e.response_id, r);
  },
  "output_audio_buffer.stopped": (e) => trackEnded(e.response_id),
  "output_audio_buffer.cleared": (e) => trackEnded(e.response_id),
  "error": (e) => {
    omni.errors.push(e.error);
    addLine("error", "", `${e.error.code}: ${e.error.message}`);
    if (e.error.event_id === `settings_${settingsUpdates}`) {
      $("settings-state").textContent = `not applied: ${e.error.code}`;
    }
  },
};

// The first audio of a response reached the page: the latency the person waited.
function firstAudio(r) {
  if (r.firstAudioAt !== null) return;
  r.firstAudioAt = performance.now();
  if (r.turnEndAt) r.clientLatencyMs = Math.round(r.firstAudioAt - r.turnEndAt);
}

// A response's row, once it is done: its service latency counts if it had audio (on a call,
// its audio may start leaving after the service is done with it, so the row is shown again).
function showResponse(id, r) {
  if (!r.done) return;
  if (r.latency && r.firstAudioAt !== null) {
    r.serverLatencyMs = Math.round(r.latency.first_audio_ms);
  }
  showTurn(id, r);
}

// A call's answer left the track whole, or was cut: nothing of it plays any more.
function trackEnded(id) {
  if (omni.responses[id]) omni.responses[id].audioEnded = true;
}

function receive(event) {
  const handler = HANDLERS[event.type];
  if (handler) handler(event);
}

// -- microphone, turns and playback ------------------------------------------------------

function onMic({ pcm, rms }) {
  const capturedAt = performance.now();
  $("meter").value = omni.muted ? 0 : Math.min(1, rms * 8);
  if (omni.muted) return; // muted: nothing leaves the page
  if (omni.status === "queued") {
    // Held closed until the session starts: speech now would reach no one (the page says so).
    omni.heldChunks += 1;
    $("meter").value = 0;
    return;
  }
  const sent = () => {
    input.sentMs += CHUNK_MS;
    input.marks.push([input.sentMs, capturedAt]);
    if (input.marks.length > INPUT_MARKS_KEPT) input.marks.shift();
  };
  if (!connection.audioOnTrack) {
    connection.sendOrKeep({ type: "input_audio_buffer.append", audio: toBase64(pcm) }, sent);
  } else if (connection.live) {
    // The track carries this chunk (less the tens of ms of its own path) into the session's
    // input clock; its marks place the server's speech ends as a socket's do.
    sent();
  }
  if (!omni.clientTurns) return;
  if (rms >= SPEECH_RMS) {
    // Speech over a reply cuts it, whether its audio is queued or, paced in real time, the
    // jitter buffer has just run dry while the reply goes on (interrupt() tells them apart).
    if (!speaking) bargeIn(true);
    speaking = true;
    silentMs = 0;
  } else if (speaking) {
    if ((silentMs += CHUNK_MS) >= SILENCE_END_MS) endTurn(capturedAt - silentMs);
  } else if ((idleMs += CHUNK_MS) >= IDLE_CLEAR_MS &&
             connection.send({ type: "input_audio_buffer.clear" })) {
    idleMs = 0;
  }
}

// The page ends a spoken turn itself (when the server detects none).
function endTurn(at) {
  speaking = false;
  idleMs = 0;
  turnEndAt = at;
  connection.send({ type: "input_audio_buffer.commit", create_response: true });
}

// When the audio at ``audioMs`` on the input clock was captured, on the page's clock.
function inputTime(audioMs) {
  const mark = input.marks.find(([endMs]) => endMs >= audioMs);
  return mark ? mark[1] - (mark[0] - audioMs) : performance.now();
}

// Whether the service judges speech over a reply (its pause, resume or cut are its own).
function judgedByService() {
  const rules = omni.session?.interruption;
  return Boolean(rules && (rules.mode === "words" || rules.min_duration_ms > 0 ||
                           rules.resume_false_interruption));
}

// The person speaks over the assistant: stop playing now and cut history to what was heard.
function bargeIn(cancel) {
  if (!interrupt(cancel)) return;
  omni.bargeIns += 1;
  showBargeIn(omni.bargeIns);
}

// Stops the reply that plays; returns whether one did. cancel: the service has not heard the
// interruption (typed, or speech the page detected), so a reply still being made must stop.
//
// On a websocket output_audio_buffer.clear does both. On a call the output buffer is the
// bridge's: the clear stops the track at once and cuts the history to what left on it, but
// stops no generation, so a reply still being made is cancelled instead (response.cancel
// stops the track too).
function interrupt(cancel) {
  const id = Object.keys(omni.responses).pop();
  const r = id && omni.responses[id];
  const running = r && !r.done;
  const onTrack = connection.audioOnTrack && r && r.firstAudioAt !== null && !r.audioEnded;
  if (queuedFrames <= 0 && !running && !onTrack) return false;
  audio.flush();
  queuedFrames = 0;
  if (connection.audioOnTrack && cancel && running) {
    connection.send({ type: "response.cancel", response_id: id });
  } else {
    connection.send({ type: "output_audio_buffer.clear", response_id: id });
  }
  return true;
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
  // A call's playback is acknowledged by the bridge, which sent it on the track.
  for (const [id, frames] of Object.entries(connection.audioOnTrack ? {} : played)) {
    const r = omni.responses[id];
    if (!r || r.ackedMs === r.playedMs) continue;
    if (connection.send({ type: "playback.ack", response_id: id,
                          played_ms: frames / (RATE / 1000), truncate: Boolean(truncate) })) {
      r.ackedMs = r.playedMs;
    }
  }
  if (omni.lastSeq > omni.ackedSeq &&
      connection.send({ type: "session.event_ack", server_event_seq: omni.lastSeq })) {
    omni.ackedSeq = omni.lastSeq;
  }
}

// -- the controls --------------------------------------------------------------------------

async function start() {
  $("start").disabled = true;
  const micProblem = await audio.start();
  if (micProblem) {
    // No microphone (refused, absent, an insecure page): the conversation goes on in text.
    omni.errors.push({ code: "microphone", message: String(micProblem) });
    const why = micProblem.message || String(micProblem);
    addLine("error", "", `microphone: ${why}; typed turns still work`);
  }
  ackTimer = setInterval(() => {
    acknowledge(false);
    connection.keepAlive();
  }, ACK_EVERY_MS);
  connection.open($("carrier").value);
  showCarrier(omni.carrier);
  $("carrier").disabled = true;
  $("stop").disabled = false;
  $("mute").disabled = Boolean(micProblem);
}

function stop() {
  $("stop").disabled = true;
  connection.stop();
}

// The session is over (stopped, or ended by the service): the microphone goes off too.
// Once per session: a carrier may report its end more than once (a call closed by the page
// says so at once, and the stop that closed it says so too).
function stopped() {
  if (!ackTimer) return;
  clearInterval(ackTimer);
  ackTimer = 0;
  speaking = false;
  queuedFrames = 0;
  played = {};
  setMuted(false);
  audio.stop();
  $("carrier").disabled = false;
  $("stop").disabled = $("mute").disabled = true;
  $("start").disabled = false;
}

function setMuted(muted) {
  if (muted && speaking) endTurn(performance.now()); // what was said so far is a turn
  omni.muted = muted;
  holdMic();
  $("mute").textContent = muted ? "Unmute" : "Mute";
  $("mute").setAttribute("aria-pressed", String(muted));
  document.body.classList.toggle("muted", muted);
}

// A typed turn: the text becomes a user item and the assistant answers it, cutting short a
// reply that still plays (typing over the assistant is an interruption too).
function sendText(event) {
  event.preventDefault();
  const text = $("text").value.trim();
  if (!text) return;
  interrupt(true);
  const item = { type: "message", role: "user", content: [{ type: "input_text", text }] };
  if (connection.send({ type: "conversation.item.create", item })) {
    turnEndAt = performance.now();
    connection.send({ type: "response.create" });
    $("text").value = "";
  }
}

function applySettings() {
  settingsUpdates += 1;
  $("settings-state").textContent = "sending…";
  connection.send({ type: "session.update", event_id: `settings_${settingsUpdates}`,
                    session: settings() });
}

function fail(error) {
  omni.errors.push({ code: "page", message: String(error) });
  addLine("error", "", String(error));
  connection.stop();
}

$("start").addEventListener("click", () => start().catch(fail));
$("stop").addEventListener("click", stop);
$("mute").addEventListener("click", () => setMuted(!omni.muted));
$("compose").addEventListener("submit", sendText);
$("apply").addEventListener("click", applySettings);
omni.dropSocket = () => connection.drop(); // the socket, or the call's peer connection
omni.heardEnergy = () => connection.heardEnergy();
omni.callMicOpen = () => connection.link?.micOpen ?? null; // null on a websocket
// A page closed or navigated away (not one kept in the back-forward cache) ends its session.
addEventListener("pagehide", (event) => { if (!event.persisted) connection.leave(); });

// -- base64 --------------------------------------------------------------------------------

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
