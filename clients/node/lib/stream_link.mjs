// One Converse stream of a session: its phase, its flow control, and how it ends.
//
// A link starts in the handshake (its first request written, no answer yet), goes live when
// the session adopts it, and is dead once its call ended or was dropped. The session ignores
// whatever a dead link still reports, so a stream that broke can never feed it again.

import { grpc } from "./contract.mjs";
import { relayedRefusal, routeOf } from "./routing.mjs";

/**
 * One stream that ended or failed; `code` is its gRPC status, `route` the replica a refusal
 * named as the session's ("" when none did).
 */
export class StreamBroken extends Error {
  constructor(message, code, route = "") {
    super(message);
    this.code = code;
    this.route = route;
  }
}

export class StreamLink {
  phase = "handshake"; // then "live" (or "queued" first), and "dead" at the end
  congested = false; // the call's buffer is full: wait for "drain" before writing more
  #call;
  #settle;
  #headers = null; // the response headers, once they came
  #timer; // the handshake timeout, until the first answer

  /**
   * Opens a Converse call on `client` and writes `first`. What the call does is reported to
   * `on.data(link, event)`, `on.route(route)` (a routing key in the response headers),
   * `on.broken(link, code, details, route)` and `on.drain()`; `answered`
   * settles with the handshake (see settle), or fails after `timeoutMs` without an answer.
   */
  constructor(client, metadata, first, on, timeoutMs) {
    this.answered = new Promise((resolve, reject) => {
      this.#settle = (error) => (error ? reject(error) : resolve());
    });
    this.#timer = setTimeout(() => {
      on.broken(this, grpc.status.DEADLINE_EXCEEDED, "no answer to the handshake in time");
      this.drop();
    }, timeoutMs);
    this.answered.then(
      () => this.heard(),
      () => this.heard(),
    );
    this.#call = client.Converse(metadata);
    this.#call.on("data", (event) => on.data(this, event));
    this.#call.on("metadata", (headers) => {
      this.#headers = headers;
      const route = routeOf(headers);
      if (route) {
        on.route(route);
      }
    });
    this.#call.on("status", ({ code, details, metadata }) => {
      // A proxy may have turned a refusal into CANCELLED: the headers hold the real one.
      const relayed = relayedRefusal(code, this.#headers);
      const route = routeOf(metadata, this.#headers);
      on.broken(this, relayed?.code ?? code, relayed?.details || details || "the stream ended", route);
    });
    this.#call.on("error", () => {}); // the same failure arrives as a status
    this.#call.on("drain", () => {
      this.congested = false;
      on.drain();
    });
    this.#call.write(first);
  }

  get alive() {
    return this.phase !== "dead";
  }

  /**
   * The server answered: the handshake timeout is off. An open queued at capacity calls it at
   * the first session_queued, since the wait that follows may last minutes.
   */
  heard() {
    clearTimeout(this.#timer);
  }

  /** Ends the handshake: fulfilled when `error` is null. Later calls change nothing. */
  settle(error) {
    this.#settle(error);
  }

  write(request) {
    if (this.alive && !this.#call.write(request)) {
      this.congested = true;
    }
  }

  /** Marks the link dead and ends its call: half-closed when `clean`, else cancelled. */
  drop({ clean = false } = {}) {
    this.phase = "dead";
    if (clean) {
      this.#call.end();
    } else {
      this.#call.cancel();
    }
  }
}
