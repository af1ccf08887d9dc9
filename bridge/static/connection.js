// The websocket to the bridge: opens a session, resumes it after a drop, keeps the cursor.
//
// Every event that belongs to the session's history ends a group with its server_event_seq,
// the resume cursor; after a drop the page reconnects with session.resume from the last seq it
// saw and drops the repeated part of a group it had half received, so nothing is lost or
// doubled. Audio captured while reconnecting waits in a short outbox and goes out after.
//
// A session that waits for a place in the service's queue is told its place and estimated
// wait (session.queued, again as they change): the page shows them, holds its microphone closed
// until the session starts (app.js), and resumes the wait, not a new one, after a drop. A page
// that goes away (pagehide) closes its session at once instead of leaving it for the grace.

import { omni } from "./state.js";

const OUTBOX_MAX = 50; // appends kept while reconnecting: 5 s of audio
const RESUMED_SHOWN_MS = 4000; // "resumed" stays on the badge this long, then "live"
const CLOSE_WAIT_MS = 3000; // after session.close, how long the service gets to close first
const KEEPALIVE_MAX_MS = 30000; // the longest a live page stays silent (keepAlive)
// Events after which the service ends the stream: no reconnecting after them.
const TERMINAL = new Set([
  "session.closed", "session.expired", "session.replaced", "session.resync_required",
]);
const GROUP_PART = /^event_[0-9a-f]+_\d+_\d+$/; // an event id that a replay repeats

export class Connection {
  // onEvent(event) gets every new event; onStatus(status) every change of status;
  // opening() returns the session.update that opens a new session.
  constructor({ onEvent, onStatus, opening }) {
    this.onEvent = onEvent;
    this.onStatus = onStatus;
    this.opening = opening;
    this.ws = null;
    this.live = false; // a session is attached: events may be sent
    this.terminal = false; // the session ended (or the person stopped it): no reconnecting
    this.retry = 0;
    this.timer = 0;
    this.groupIds = new Set(); // ids received since the last event that carried a seq
    this.outbox = []; // [event, afterSend] held while reconnecting
    this.sentAt = 0; // when the page last sent something
  }

  open() {
    Object.assign(omni, { sessionId: "", token: "", lastSeq: 0, ackedSeq: 0, closeReason: "",
                          queue: null, resumeSecret: "" });
    this.terminal = false;
    this.retry = 0;
    this.outbox = [];
    this.connect(false);
  }

  // Ends the session for good: the service answers session.closed and closes the socket.
  stop() {
    this.terminal = true;
    clearTimeout(this.timer);
    this.outbox = [];
    const ws = this.ws;
    if (!this.send({ type: "session.close", reason: "client_close" })) {
      if (ws) ws.close(1000, "stopped");
      this.setStatus("closed");
      return;
    }
    this.live = false; // nothing goes after session.close: the service is closing the socket
    setTimeout(() => ws.readyState < WebSocket.CLOSING && ws.close(1000, "stopped"), CLOSE_WAIT_MS);
  }

  // The page goes away (closed, reloaded, navigated): its session ends now, so its place is
  // free at once rather than after the disconnect grace a dropped network is given.
  leave() {
    if (this.terminal || !this.ws) return;
    this.terminal = true;
    clearTimeout(this.timer);
    if (this.live && this.ws.readyState === WebSocket.OPEN) {
      this.ws.send(JSON.stringify({ type: "session.close", reason: "page_closed" }));
    }
    this.ws.close(1000, "page_closed");
  }

  // A test's network cut seen from the page: the socket goes, the session stays.
  drop() {
    if (this.ws) this.ws.close(4000, "test_drop");
  }

  send(event) {
    if (!this.live || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(event));
    this.sentAt = performance.now();
    return true;
  }

  // A session with no command for its idle timeout expires: a quiet page (muted, say) says
  // it is still here well before that.
  keepAlive() {
    const idleMs = omni.session?.idle_timeout_ms || KEEPALIVE_MAX_MS * 4;
    if (performance.now() - this.sentAt >= Math.min(KEEPALIVE_MAX_MS, idleMs / 4)) {
      this.send({ type: "session.heartbeat" });
    }
  }

  // Sends now, or keeps the event (the last few only) to send once the session is back.
  // afterSend runs when the event really goes out.
  sendOrKeep(event, afterSend) {
    if (this.send(event)) {
      afterSend();
    } else if (omni.sessionId && !this.terminal) {
      this.outbox.push([event, afterSend]);
      if (this.outbox.length > OUTBOX_MAX) this.outbox.shift();
    }
  }

  setStatus(status) {
    omni.status = status;
    if (omni.states[omni.states.length - 1] !== status) omni.states.push(status);
    this.onStatus(status);
  }

  connect(resuming) {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    // A page opened with a client secret (?key=ek_...) has used it up: it comes back with the
    // resume secret its session was given (it resumes that session only).
    const urlKey = new URLSearchParams(location.search).get("key");
    const key = resuming && omni.resumeSecret ? omni.resumeSecret : urlKey;
    const protocols = ["realtime"];
    if (key) protocols.push("openai-insecure-api-key." + key);
    // The page resumes and acks, so it asks for the duplex extensions (seq, resume token).
    const query = resuming ? "?extensions=1&resume=1" : "?extensions=1";
    const url = `${scheme}://${location.host}/v1/realtime${query}`;
    const ws = (this.ws = new WebSocket(url, protocols));
    this.live = false;
    this.setStatus(resuming ? "reconnecting" : "connecting");
    ws.onopen = () => {
      ws.send(JSON.stringify(resuming ? {
        type: "session.resume", session_id: omni.sessionId, resume_token: omni.token,
        last_received_server_event_seq: omni.lastSeq,
      } : this.opening()));
    };
    ws.onmessage = (message) => this.receive(JSON.parse(message.data));
    ws.onclose = (close) => this.closed(ws, close);
  }

  closed(ws, close) {
    if (ws !== this.ws) return; // an old socket, already replaced
    this.live = false;
    if (this.terminal || close.code === 1008) {
      omni.closeReason = close.reason || String(close.code);
      this.setStatus("closed");
      return;
    }
    // Anything else is the network or a bridge going away: come back and resume.
    this.setStatus("reconnecting");
    const delay = Math.min(4000, 250 * 2 ** this.retry++) * (0.5 + Math.random() / 2);
    this.timer = setTimeout(() => this.connect(Boolean(omni.sessionId)), delay);
  }

  receive(event) {
    if (this.groupIds.has(event.event_id)) return; // the repeated part of a half-received group
    if (event.server_event_seq) {
      omni.lastSeq = event.server_event_seq;
      this.groupIds = new Set();
    } else if (GROUP_PART.test(event.event_id)) {
      this.groupIds.add(event.event_id);
    }
    if (event.resume_secret) omni.resumeSecret = event.resume_secret;
    if (event.type === "session.created") {
      omni.sessionId = event.session.id;
      omni.token = event.resume_token;
      this.attached("live");
    } else if (event.type === "session.resumed") {
      omni.token = event.resume_token;
      omni.resumes += 1;
      this.attached("resumed");
      setTimeout(() => omni.status === "resumed" && this.setStatus("live"), RESUMED_SHOWN_MS);
    } else if (event.type === "session.queued") {
      // The wait's own id and token: a drop while waiting resumes the wait, keeping its place.
      omni.sessionId = event.session_id;
      omni.token = event.resume_token;
      omni.queue = { position: event.position, estimatedWaitMs: event.estimated_wait_ms,
                     priorityClass: event.priority_class };
      omni.queueNotices += 1;
      this.retry = 0;
      this.setStatus("queued"); // shown again with each notice: a new place, a new wait
    } else if (TERMINAL.has(event.type)) {
      // The service ends the stream after this: nothing more to send on it.
      this.terminal = true;
      this.live = false;
    }
    this.onEvent(event);
  }

  attached(status) {
    omni.queue = null;
    this.live = true;
    this.retry = 0;
    this.sentAt = performance.now(); // the opening message or the resume
    this.setStatus(status);
    // The first thing written on a resumed stream confirms the rotated token: the resends.
    const waiting = this.outbox;
    this.outbox = [];
    for (const [event, afterSend] of waiting) this.sendOrKeep(event, afterSend);
  }
}
