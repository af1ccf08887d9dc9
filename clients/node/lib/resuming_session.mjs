// One omni.duplex.v1 session kept attached across broken streams.
//
// A ResumingSession hides reconnects from its user: every event reaches `onEvent` exactly
// once and in order, and every command is applied by the server exactly once, however often
// the connection drops. When a stream breaks it opens a new Converse stream with
// `resume_session` from its cursor (the last seq it received), reads `session_resumed`, resends
// exactly the commands above the server's `applied_client_seq` with their original numbers,
// and then writes a heartbeat: the server takes the first request on a resumed stream as proof
// that the rotated resume token arrived, and the heartbeat's answer reports how far the server
// got. Attempts back off with jitter and stop at the server's disconnect grace.
//
// Everything that changes state happens synchronously inside the stream's event handlers, so
// replayed events that arrive in the same tick as `session_resumed` cannot overtake the resend.

import { cutWhileWaiting, resumeWaitRequest, WaitCut, waitRefusalOf } from "./admission_queue.mjs";
import { DEFAULT_RECONNECT, retrying } from "./backoff.mjs";
import { CommandJournal, EventCursor, ProtocolViolation } from "./bookkeeping.mjs";
import {
  durationMs,
  grpc,
  loadDuplexService,
  statusName,
  TRANSIENT_STATUSES,
} from "./contract.mjs";
import { ROUTE_HEADER } from "./routing.mjs";
import { StreamBroken, StreamLink } from "./stream_link.mjs";

const TERMINAL_KINDS = new Set(["session_closed", "session_expired"]);
const HANDSHAKE_TIMEOUT_MS = 10000;
const ACK_EVERY_EVENTS = 64; // also ack between ticks, so the server's journal stays small
const MAX_UNCONFIRMED_COMMANDS = 512; // send() waits past this until the server catches up
const CHANNEL_OPTIONS = {
  "grpc.keepalive_time_ms": 20000, // a silent dead path is found within half a minute
  "grpc.keepalive_timeout_ms": 10000,
  "grpc.initial_reconnect_backoff_ms": 100, // our own backoff paces the attempts
  "grpc.max_reconnect_backoff_ms": 2000,
  "grpc.max_receive_message_length": 32 * 1024 * 1024,
  "grpc.max_send_message_length": 32 * 1024 * 1024,
};

/** The session cannot go on: refused, replaced, out of reach, or a broken numbering rule. */
export class SessionError extends Error {
  name = "SessionError";

  constructor(message, { code = null, event = null } = {}) {
    super(message);
    this.code = code; // the gRPC status of a refused stream, when one was refused
    this.event = event; // the event that ended it, when one did
  }
}

/** The server would not admit the session: its wait in the queue was refused. */
export class OpenRefused extends SessionError {
  name = "OpenRefused";

  constructor(message, { code, errorCode, retryAfterMs }) {
    super(message, { code });
    this.errorCode = errorCode; // the server's reason: queue_wait_exceeded, server_shutting_down
    this.retryAfterMs = retryAfterMs; // when trying again may work; 0 when the server gave none
  }
}

export class ResumingSession {
  sessionId = "";
  capabilities = null;
  appliedClientSeq = 0;
  route = ""; // the routing key of the session's replica, sent back on every call ("" : any)
  stats = { reconnects: 0, resentCommands: 0, duplicateEvents: 0, lastResent: [] };

  #client;
  #options;
  #onEvent;
  #token = "";
  #wait = null; // the first session_queued of an open waiting at capacity: its id and token
  #journal = new CommandJournal();
  #cursor = new EventCursor();
  #link = null; // the stream commands go to; null while reconnecting
  #ackedSeq = 0;
  #eventsSinceAck = 0;
  #appliedAtLastTick = 0;
  #resumable = true;
  #closing = false;
  #ended = false;
  #failure = null; // why the session ended, when it failed
  #ackTimer = null;
  #waiters = [];
  #settleEnded;

  /**
   * Opens a session and resolves once the server created it.
   *
   * options: target ("host:port"), apiKey, credentials (insecure by default), config (a
   * SessionConfig object), onEvent (called with every event, session_created first),
   * onQueued (called with each session_queued while the open waits in the server's queue),
   * reconnect (see backoff.mjs), handshakeTimeoutMs (for the first answer of each stream;
   * 10 s), protoRoot. A refused wait rejects with OpenRefused.
   */
  static async open(options) {
    const session = new ResumingSession(options);
    let first = { open_session: { config: options.config ?? {} } };
    try {
      for (;;) {
        try {
          await session.#withRetries(() => first, session.#reconnectPolicy.maxElapsedMs);
          break;
        } catch (error) {
          if (!(error instanceof WaitCut)) {
            throw error;
          }
          first = error.request; // the wait's resume, which keeps its place
        }
      }
    } catch (error) {
      session.#finish(error); // closes the channel, so nothing keeps the process alive
      throw error;
    }
    return session;
  }

  constructor(options) {
    const Service = loadDuplexService(options.protoRoot);
    const credentials = options.credentials ?? grpc.credentials.createInsecure();
    this.#client = new Service(options.target, credentials, CHANNEL_OPTIONS);
    this.#options = options;
    this.#onEvent = options.onEvent ?? (() => {});
    /** Resolves with the terminal event (session_closed or session_expired), or rejects. */
    this.ended = new Promise((resolve, reject) => {
      this.#settleEnded = (error, event) => (error ? reject(error) : resolve(event));
    });
    this.ended.catch(() => {}); // a caller that never awaits it must not crash the process
  }

  get #reconnectPolicy() {
    return { ...DEFAULT_RECONNECT, ...this.#options.reconnect };
  }

  /** The last event seq received: where a resume asks the replay to start. */
  get lastSeq() {
    return this.#cursor.lastSeq;
  }

  /**
   * Numbers `command` (e.g. `{ append_input_audio: { audio } }`), keeps it until the server
   * applied it, and writes it when a stream is up (else the resend after the resume will).
   * Resolves once there is room for more: gRPC flow control and the unconfirmed-command bound.
   */
  async send(command) {
    if (this.#ended || this.#closing) {
      throw this.#failure ?? new SessionError("the session is closing or over");
    }
    const request = this.#journal.number({ ...command });
    if (command.close_session) {
      this.#closing = true;
    }
    this.#write(request);
    while (!this.#ended && !this.#hasRoom()) {
      await this.#changed();
    }
    return request.client_seq;
  }

  /** Sends close_session and resolves with the session's last event. */
  async close(reason = "client_close") {
    if (!this.#closing && !this.#ended) {
      await this.send({ close_session: { reason } });
    }
    return this.ended;
  }

  /**
   * Stops here without closing the session: the stream is cancelled, the server detaches the
   * session and ends it after its disconnect grace. A no-op once the session ended.
   */
  abandon() {
    this.#finish(new SessionError("the client abandoned the session"));
  }

  // -- streams -------------------------------------------------------------------------------

  /** Opens a stream whose first request is `firstRequest()`, retrying transient failures. */
  async #withRetries(firstRequest, limitMs) {
    const retried = retrying(() => this.#attempt(firstRequest()), {
      policy: this.#reconnectPolicy,
      limitMs,
      transient: (error) => error instanceof StreamBroken && TRANSIENT_STATUSES.has(error.code),
      gaveUp: (error, attempts) =>
        new SessionError(
          `cannot reach ${this.#options.target} after ${attempts} attempts: ${error.message}`,
          { code: error.code },
        ),
      stopped: () => this.#ended,
    });
    try {
      return await retried;
    } catch (error) {
      throw this.#refusal(error);
    }
  }

  #refusal(error) {
    if (!(error instanceof StreamBroken)) {
      return error;
    }
    const what = this.sessionId ? "the resume" : "the session";
    return new SessionError(
      `the server refused ${what}: ${statusName(error.code)} ${error.message}`,
      { code: error.code },
    );
  }

  /** Opens one stream, writes its first request; settles when the handshake is answered. */
  #attempt(first) {
    const on = {
      data: (link, event) => this.#onData(link, event),
      route: (route) => this.#learnRoute(route),
      broken: (link, code, details, route) => this.#onBroken(link, code, details, route),
      drain: () => this.#wake(),
    };
    const timeoutMs = this.#options.handshakeTimeoutMs ?? HANDSHAKE_TIMEOUT_MS;
    return new StreamLink(this.#client, this.#metadata(), first, on, timeoutMs).answered;
  }

  #metadata() {
    const metadata = new grpc.Metadata();
    if (this.#options.apiKey) {
      metadata.set("authorization", `Bearer ${this.#options.apiKey}`);
    }
    if (this.route) {
      metadata.set(ROUTE_HEADER, this.route); // a proxy takes the call to the session's replica
    }
    return metadata;
  }

  #learnRoute(route) {
    if (route) {
      this.route = route;
    }
  }

  #onData(link, event) {
    if (!link.alive || this.#ended) {
      return;
    }
    try {
      if (link.phase === "handshake" || link.phase === "queued") {
        this.#onHandshake(link, event);
      } else {
        this.#receive(event);
      }
    } catch (error) {
      const failure = error instanceof SessionError ? error : new SessionError(error.message);
      link.settle(failure); // a handshake still awaited fails with it (settled ones ignore it)
      this.#finish(failure);
    }
  }

  #onHandshake(link, event) {
    const kind = event.event;
    if (!this.sessionId && this.#onWaitEvent(link, event)) {
      return;
    }
    const expected = this.sessionId ? "session_resumed" : "session_created";
    // A session admitted just as its cut wait was resumed answers that resume.
    const admittedOnResume = !this.sessionId && this.#wait && kind === "session_resumed";
    if (kind !== expected && !admittedOnResume) {
      link.drop();
      const message = kind === "resync_required"
        ? `the server cannot replay the missed events (${event.resync_required.reason})`
        : `expected ${expected}, got ${kind}`;
      link.settle(new SessionError(message, { event }));
      return;
    }
    if (kind === "session_created") {
      this.#adoptCreated(event.session_created);
    } else {
      if (admittedOnResume) {
        this.sessionId = this.#wait.session_id;
        this.#startAcking();
      }
      this.#adoptResumed(event);
    }
    this.#noteApplied(event.applied_client_seq);
    this.#onEvent(event);
    link.phase = "live";
    this.#link = link;
    if (kind === "session_resumed") {
      this.#resend(link);
    }
    link.settle(null);
    this.#wake();
  }

  /** Handles what an open hears while it waits in the queue; false for any other event. */
  #onWaitEvent(link, event) {
    const refusal = waitRefusalOf(event);
    if (refusal) {
      link.drop();
      const message = `the server refused the session: ${refusal.errorCode} ${refusal.message}`;
      link.settle(new OpenRefused(message, refusal));
      return true;
    }
    if (event.event !== "session_queued") {
      return false;
    }
    const queued = event.session_queued;
    this.#wait ??= queued; // later notices carry no token
    link.heard(); // the wait may last far longer than the handshake timeout
    link.phase = "queued";
    this.#learnRoute(queued.route); // a resume of the wait must reach this replica
    this.#options.onQueued?.(queued);
    return true;
  }

  #adoptCreated(created) {
    this.sessionId = created.session.id;
    this.capabilities = created.capabilities;
    this.#token = created.resume_token;
    this.#learnRoute(created.route);
    this.#startAcking();
  }

  #adoptResumed(event) {
    if (event.applied_client_seq > this.#journal.lastSeq) {
      throw new ProtocolViolation(
        `the server applied client_seq ${event.applied_client_seq}` +
          ` of ${this.#journal.lastSeq} sent`,
      );
    }
    const resumed = event.session_resumed;
    if (resumed.resume_token) {
      this.#token = resumed.resume_token; // a resume that only replays an ending has none
    }
    this.#learnRoute(resumed.route); // an adopted session names its new replica
  }

  /** Writes what the server has not applied, then a heartbeat that confirms the new token. */
  #resend(link) {
    const pending = this.#journal.pendingAfter(this.appliedClientSeq);
    for (const request of pending) {
      this.#write(request, link);
    }
    this.#write({ heartbeat: {} }, link);
    this.stats.resentCommands += pending.length;
    this.stats.lastResent = pending.map((request) => request.client_seq);
  }

  #write(request, link = this.#link) {
    link?.write(request);
  }

  #onBroken(link, code, details, route = "") {
    if (!link.alive) {
      return;
    }
    this.#learnRoute(route); // a refusal that names the session's replica: the retry goes there
    const handshaking = link.phase === "handshake";
    const waiting = link.phase === "queued";
    link.phase = "dead";
    if (this.#link === link) {
      this.#link = null;
    }
    this.#wake();
    if (waiting && cutWhileWaiting(code)) {
      const why = `the wait was cut: ${statusName(code)} ${details}`;
      link.settle(new WaitCut(why, resumeWaitRequest(this.#wait)));
    } else if (waiting) {
      // The server ended the wait (its refusal event, if any, was lost): no retry helps.
      const why = `the server ended the wait: ${statusName(code)} ${details}`;
      link.settle(new SessionError(why, { code }));
    } else if (handshaking) {
      link.settle(new StreamBroken(details, code, route));
    } else if (!this.#ended) {
      this.#reconnect(`${statusName(code)} ${details}`);
    }
  }

  async #reconnect(why) {
    if (!this.#resumable) {
      this.#finish(new SessionError(`the stream broke (${why}) after the journal overflowed`));
      return;
    }
    this.stats.reconnects += 1;
    const policy = this.#reconnectPolicy;
    const graceMs = durationMs(this.capabilities?.disconnect_grace) || policy.maxElapsedMs;
    const resume = () => ({
      resume_session: {
        session_id: this.sessionId,
        resume_token: this.#token,
        last_received_seq: this.#cursor.lastSeq,
      },
    });
    try {
      await this.#withRetries(resume, Math.min(policy.maxElapsedMs, graceMs));
    } catch (error) {
      if (this.#closing && error.code === grpc.status.NOT_FOUND) {
        this.#finish(null, null); // the close was applied and its ending already delivered
      } else {
        this.#finish(error);
      }
    }
  }

  // -- events ----------------------------------------------------------------------------------

  #receive(event) {
    this.#noteApplied(event.applied_client_seq);
    const kind = event.event;
    if (kind === "session_replaced") {
      throw new SessionError("another stream took the session over", { event });
    }
    if (!this.#cursor.admit(event.seq)) {
      this.stats.duplicateEvents += 1;
      return;
    }
    if (kind === "resync_required") {
      this.#resumable = false; // the journal overflowed: live on, but no resume can replay
    }
    this.#onEvent(event);
    if (TERMINAL_KINDS.has(kind)) {
      this.#finish(null, event);
    } else if (kind === "going_away" && this.#link) {
      // Resume now, on a server that stays (or on this one, once it is back).
      const link = this.#link;
      this.#onBroken(link, grpc.status.UNAVAILABLE, "the server is going away");
      link.drop();
    } else if (event.seq && ++this.#eventsSinceAck >= ACK_EVERY_EVENTS) {
      this.#ack();
    }
  }

  #noteApplied(applied) {
    if (applied > this.appliedClientSeq) {
      this.appliedClientSeq = applied;
      this.#journal.trim(applied);
      this.#wake();
    }
  }

  // -- acknowledgements ------------------------------------------------------------------------

  #startAcking() {
    const intervalMs = durationMs(this.capabilities?.ack_interval) || 1000;
    this.#ackTimer = setInterval(() => this.#tick(), intervalMs);
  }

  #tick() {
    this.#ack();
    // Appends produce no events, so nothing would tell how far the server got; a heartbeat
    // does (its answer carries applied_client_seq), and the journal can shrink.
    const stalled = this.#journal.length > 0 && this.appliedClientSeq === this.#appliedAtLastTick;
    if (stalled) {
      this.#write({ heartbeat: {} });
    }
    this.#appliedAtLastTick = this.appliedClientSeq;
  }

  #ack() {
    if (this.#link && this.#cursor.lastSeq > this.#ackedSeq) {
      this.#write({ ack_events: { seq: this.#cursor.lastSeq } });
      this.#ackedSeq = this.#cursor.lastSeq;
      this.#eventsSinceAck = 0;
    }
  }

  // -- waiting and ending ----------------------------------------------------------------------

  #hasRoom() {
    const flowing = !this.#link || !this.#link.congested;
    return flowing && this.#journal.length < MAX_UNCONFIRMED_COMMANDS;
  }

  #changed() {
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  #wake() {
    for (const resolve of this.#waiters.splice(0)) {
      resolve();
    }
  }

  #finish(error, event = null) {
    if (this.#ended) {
      return;
    }
    this.#ended = true;
    this.#failure = error;
    clearInterval(this.#ackTimer);
    const link = this.#link;
    this.#link = null;
    link?.drop({ clean: !error });
    this.#client.close();
    this.#wake();
    this.#settleEnded(error, event);
  }
}
