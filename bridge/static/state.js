// What the page knows, in one object: its modules share it and the tests read it (window.omni).

export const RATE = 24000; // pcm16 at 24 kHz, OpenAI's default: nothing resamples on the page

export const omni = {
  carrier: "", // the session's: "websocket" or "webrtc" (a call), once Start chose it
  status: "idle", // idle, connecting, queued, live, reconnecting, resumed, closed
  states: ["idle"], // every status the page went through, in order
  closeReason: "",
  // While the session waits for a place: {position, estimatedWaitMs, priorityClass}; else null.
  queue: null,
  queueNotices: 0, // session.queued events received
  heldChunks: 0, // microphone chunks not sent because the session was still waiting
  sessionId: "",
  token: "",
  // What a page opened with a client secret resumes with (the secret itself is used up).
  resumeSecret: "",
  session: null, // the session object the service last reported (created, updated, resumed)
  capabilities: null,
  lastSeq: 0,
  ackedSeq: 0,
  resumes: 0,
  clientTurns: false, // true when the server does not detect turns: this page commits them
  muted: false,
  bargeIns: 0, // times the person spoke (or typed) over the assistant and the page cut it
  responses: {}, // id -> {audioMs, playedMs, transcript, deltas: [[start, dur]], ...}
  userTranscripts: [],
  // item id -> the words shown while that turn was spoken, before its transcript replaced them
  partials: {},
  typed: [], // the user's typed items, as the service confirmed them
  errors: [],
  acked: {}, // response id -> last playback.acknowledged
  overlaps: [], // every overlap.decision: a reply paused, resumed or cut by speech over it
  turnEnds: [], // every turn_end.decision: how sure the service was a turn ended, its wait
};
