// An open that reaches a server at capacity may wait in its admission queue (see the
// SessionQueued message of the contract): the server answers session_queued, unnumbered and
// again each time the position or the estimate changes, then session_created once the session
// is admitted. The handshake timeout covers only the first answer, since a wait may last
// minutes. A wait cut in the transport is resumed with the wait's id and token
// (last_received_seq 0) on the replica its route names, which keeps its place. A refused wait
// comes first as an unnumbered error event, because a proxy may lose the stream's status.

import { durationMs, grpc, TRANSIENT_STATUSES } from "./contract.mjs";

// The codes of the unnumbered error events that end a wait in the queue, and the status the
// stream ends with after each.
const WAIT_REFUSALS = new Map([
  ["queue_wait_exceeded", grpc.status.RESOURCE_EXHAUSTED],
  ["server_shutting_down", grpc.status.UNAVAILABLE],
]);

/**
 * The refusal an event carries, as { code (the gRPC status), errorCode, message, retryAfterMs },
 * or null when it is not an unnumbered error event with a wait's refusal code.
 */
export function waitRefusalOf(event) {
  const report = event.event === "error" ? event.error : null;
  if (!report || event.seq || !WAIT_REFUSALS.has(report.code)) {
    return null;
  }
  return {
    code: WAIT_REFUSALS.get(report.code),
    errorCode: report.code,
    message: report.message,
    retryAfterMs: durationMs(report.retry_after),
  };
}

/**
 * Whether a wait's stream that ended with status `code` was cut in the transport (resume the
 * wait) rather than refused by the server (RESOURCE_EXHAUSTED: its refusal event was lost).
 */
export function cutWhileWaiting(code) {
  return TRANSIENT_STATUSES.has(code) && code !== grpc.status.RESOURCE_EXHAUSTED;
}

/** The request that takes a cut wait back: the first notice holds the wait's id and token. */
export function resumeWaitRequest(firstNotice) {
  return {
    resume_session: {
      session_id: firstNotice.session_id,
      resume_token: firstNotice.resume_token,
      last_received_seq: 0,
    },
  };
}

/**
 * A wait's stream was cut in the transport: the open starts over with `request` (the wait's
 * resume), with a fresh budget of attempts, since the wait may have lasted long already.
 */
export class WaitCut extends Error {
  constructor(message, request) {
    super(message);
    this.request = request;
  }
}
