// The session over its carrier: opens it, resumes it after a drop, keeps the cursor.
//
// Two carriers carry the same JSON events (socket.js, a websocket; call.js, a WebRTC call
// with its data channel and audio tracks); everything here is the same on both. Every event
// that belongs to the session's history ends a group with its server_event_seq, the resume
// cursor; after a drop the page comes back (session.resume on a new socket, or a new offer
// with the resume headers) from the last seq it saw and drops the repeated part of a group it
// had half received, so nothing is lost or doubled. Events (and, on a websocket, audio)
// captured while reconnecting wait in a short outbox and go out after.
//
// A session that waits for a place in the service's queue is told its place and estimated
// wait (session.queued, again as they change): the page shows them, holds its microphone closed
// until the session starts (app.js), and resumes the wait, not a new one, after a drop. A page
// that goes away (pagehide) closes its session at once instead of leaving it for the grace.

import { CallLink } from "./call.js";
import { SocketLink } from "./socket.js";
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
  // opening() returns the session.update that opens a new session; microphone() the captured
  // track (or null) and player the <audio> element, for a WebRTC call.
  constructor({ onEvent, onStatus, opening, microphone, player }) {
    this.onEvent = onEvent;
    this.onStatus = onStatus;
    this.opening = opening;
    this.microphone = microphone;
    this.player = player;
    this.carrier = "websocket"; // or "webrtc": chosen by open()
    this.link = null; // the carrier's connection now (SocketLink or CallLink)
    this.live = false; // a session is attached: events may be sent
    this.terminal = false; // the session ended (or the person stopped it): no reconnecting
    this.retry = 0;
    this.timer = 0;
    this.groupIds = new Set(); // ids received since the last event that carried a seq
    this.outbox = []; // [event, afterSend] held while reconnecting
    this.sentAt = 0; // when the page last sent something
  }

  // On a call the audio rides the tracks, not the events: app.js sends no appends and plays
  // no deltas then.
  get audioOnTrack() {
    return this.carrier === "webrtc";
  }

  open(carrier) {
    this.carrier = carrier;
    omni.carrier = carrier;
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
    const link = this.link;
    if (!this.send({ type: "session.close", reason: "client_close" })) {
      if (link) link.close(1000, "stopped");
      this.setStatus("closed");
      return;
    }
    this.live = false; // nothing goes after session.close: the service is closing the carrier
    setTimeout(() => !link.closing && link.close(1000, "stopped"), CLOSE_WAIT_MS);
  }

  // The page goes away (closed, reloaded, navigated): its session ends now, so its place is
  // free at once rather than after the disconnect grace a dropped network is given.
  leave() {
    if (this.terminal || !this.link) return;
    this.terminal = true;
    clearTimeout(this.timer);
    const close = this.live && JSON.stringify({ type: "session.close", reason: "page_closed" });
    this.link.leave(close);
  }

  // A test's network cut seen from the page: the socket (or peer connection) goes, the
  // session stays.
  drop() {
    if (this.link) this.link.close(4000, "test_drop");
  }

  send(event) {
    if (!this.live || !this.link.open) return false;
    this.link.send(JSON.stringify(event));
    this.sentAt = performance.now();
    return true;
  }

  // Whether the microphone reaches the session (a call's track; app.js holds a socket's).
  setMicOpen(open) {
    if (this.link) this.link.setMicOpen(open);
  }

  // What the answer's track has delivered so far (a call's; 0 on a websocket).
  async heardEnergy() {
    return this.link && this.link.heardEnergy ? this.link.heardEnergy() : 0;
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

  // A page opened with a client secret (?key=ek_...) has used it up: it comes back with the
  // resume secret its session was given (it resumes that session only).
  bearer(resuming) {
    const urlKey = new URLSearchParams(location.search).get("key");
    return resuming && omni.resumeSecret ? omni.resumeSecret : urlKey;
  }

  connect(resuming) {
    const first = resuming ? {
      type: "session.resume", session_id: omni.sessionId, resume_token: omni.token,
      last_received_server_event_seq: omni.lastSeq,
    } : this.opening();
    const Link = this.carrier === "webrtc" ? CallLink : SocketLink;
    const link = (this.link = new Link({
      resuming, key: this.bearer(resuming), first, microphone: this.microphone(),
      player: this.player,
      on: {
        message: (event) => link === this.link && this.receive(event),
        closed: (code, reason) => this.closed(link, code, reason),
      },
    }));
    this.live = false;
    this.setStatus(resuming ? "reconnecting" : "connecting");
  }

  closed(link, code, reason) {
    if (link !== this.link) return; // an old carrier, already replaced
    this.live = false;
    if (this.terminal || code === 1008) {
      omni.closeReason = reason || String(code);
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
