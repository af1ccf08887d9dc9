// The open that waits in the server's queue, against a scripted in-process server: notices
// reported, the wait outlasting the handshake timeout, a cut wait resumed with its id, token
// and route, and a refused wait typed.

import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { cutWhileWaiting, waitRefusalOf } from "../lib/admission_queue.mjs";
import { grpc, loadDuplexService } from "../lib/contract.mjs";
import { OpenRefused, ResumingSession } from "../lib/resuming_session.mjs";
import { ROUTE_HEADER } from "../lib/routing.mjs";
import { StreamLink } from "../lib/stream_link.mjs";

const HANDSHAKE_TIMEOUT_MS = 2000;
const FAST_RETRY = { initialBackoffMs: 1, maxBackoffMs: 5 };
const queued = (fields) => ({ seq: 0, session_queued: { session_id: "s1", ...fields } });
const created = { seq: 1, session_created: { session: { id: "s1" }, resume_token: "t2" } };

// Each Converse call gets the next script: (call, firstRequest, metadata) => void.
const scripts = [];
const seen = []; // [firstRequest, metadata] of each call
let server;
let target;

before(async () => {
  const Service = loadDuplexService();
  server = new grpc.Server();
  server.addService(Service.service, {
    Converse: (call) => {
      call.once("data", (request) => {
        seen.push([request, call.metadata]);
        scripts.shift()(call);
      });
      call.on("error", () => {}); // the client cancels the streams it is done with
    },
  });
  const port = await new Promise((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (error, bound) =>
      error ? reject(error) : resolve(bound),
    ),
  );
  target = `127.0.0.1:${port}`;
});

after(() => server.forceShutdown());

function open(notices) {
  return ResumingSession.open({
    target,
    handshakeTimeoutMs: HANDSHAKE_TIMEOUT_MS,
    reconnect: FAST_RETRY,
    onQueued: (notice) => notices.push(notice),
  });
}

test("a queued open reports each notice and outlasts the handshake timeout", async () => {
  seen.length = 0;
  scripts.push(async (call) => {
    call.write(queued({ resume_token: "t1", position: 2, priority_class: "default" }));
    call.write(queued({ position: 1 }));
    await sleep(HANDSHAKE_TIMEOUT_MS * 1.5); // past the timeout: the wait must not be cut
    call.write(created);
  });
  const notices = [];
  const session = await open(notices);
  session.abandon();
  assert.equal(session.sessionId, "s1");
  assert.deepEqual(notices.map((n) => n.position), [2, 1]);
  assert.equal(notices[0].priority_class, "default");
  assert.equal(seen.length, 1); // one stream: no retry
});

test("a cut wait is resumed with its id and token on the replica its route names", async () => {
  seen.length = 0;
  scripts.push((call) => {
    call.write(queued({ resume_token: "t1", position: 3, route: "r9" }));
    call.emit("error", { code: grpc.status.UNAVAILABLE, details: "cut" });
  });
  scripts.push((call) => {
    call.write(queued({ position: 1 })); // a later notice: no token
    call.write(created);
  });
  const notices = [];
  const session = await open(notices);
  session.abandon();
  assert.equal(session.sessionId, "s1");
  assert.deepEqual(notices.map((n) => n.position), [3, 1]);
  const [resume, metadata] = seen[1];
  assert.deepEqual(resume.resume_session, {
    session_id: "s1",
    resume_token: "t1",
    last_received_seq: 0,
  });
  assert.deepEqual(metadata.get(ROUTE_HEADER), ["r9"]);
});

test("a refused wait rejects with OpenRefused, its code and retry delay", async () => {
  scripts.push((call) => {
    call.write(queued({ resume_token: "t1", position: 1 }));
    call.write({
      seq: 0,
      error: { code: "queue_wait_exceeded", message: "waited", retry_after: { seconds: 2 } },
    });
    call.emit("error", { code: grpc.status.RESOURCE_EXHAUSTED, details: "queue_wait_exceeded" });
  });
  const notices = [];
  const refused = await open(notices).catch((error) => error);
  assert.ok(refused instanceof OpenRefused, refused);
  assert.equal(refused.errorCode, "queue_wait_exceeded");
  assert.equal(refused.retryAfterMs, 2000);
  assert.equal(refused.code, grpc.status.RESOURCE_EXHAUSTED);
  assert.equal(notices.length, 1);
});

test("only an unnumbered error with a wait's code is a wait refusal", () => {
  const refusal = (seq, code) => waitRefusalOf({ seq, event: "error", error: { code } });
  assert.equal(refusal(0, "server_shutting_down").code, grpc.status.UNAVAILABLE);
  assert.equal(refusal(4, "queue_wait_exceeded"), null);
  assert.equal(refusal(0, "invalid_request"), null);
  assert.equal(waitRefusalOf({ seq: 0, event: "session_queued", session_queued: {} }), null);
});

test("a wait is resumed after a cut in the transport, not after the server's refusal", () => {
  assert.ok(cutWhileWaiting(grpc.status.UNAVAILABLE));
  assert.ok(cutWhileWaiting(grpc.status.CANCELLED));
  assert.ok(!cutWhileWaiting(grpc.status.RESOURCE_EXHAUSTED));
  assert.ok(!cutWhileWaiting(grpc.status.NOT_FOUND));
});

test("a link that heard its answer has no handshake timeout left", async () => {
  // The answer comes in the same tick as the link is made, before any timer can fire.
  const call = Object.assign(new EventEmitter(), { write: () => true, cancel() {}, end() {} });
  const broken = [];
  const on = { data: (link) => link.heard(), route() {}, drain() {}, broken: (...a) => broken.push(a) };
  const link = new StreamLink({ Converse: () => call }, null, {}, on, 1);
  call.emit("data", queued({ position: 1 }));
  await sleep(20);
  assert.deepEqual(broken, []);
  assert.equal(link.phase, "handshake");
});
