// The resume bookkeeping on its own: which commands go out again, which events are new.

import assert from "node:assert/strict";
import { test } from "node:test";
import { CommandJournal, EventCursor, ProtocolViolation } from "../lib/bookkeeping.mjs";

test("commands are numbered from 1 and resent exactly above the server's number", () => {
  const journal = new CommandJournal();
  const sent = ["a", "b", "c", "d"].map((text) => journal.number({ append_input_text: { text } }));
  assert.deepEqual(sent.map((request) => request.client_seq), [1, 2, 3, 4]);
  assert.deepEqual(journal.pendingAfter(2).map((request) => request.client_seq), [3, 4]);
  assert.equal(journal.length, 2);
  assert.deepEqual(journal.pendingAfter(4), []);
  assert.equal(journal.number({ heartbeat: {} }).client_seq, 5); // the count goes on
});

test("a server that applied more than was sent breaks the protocol", () => {
  const journal = new CommandJournal();
  journal.number({ heartbeat: {} });
  assert.throws(() => journal.pendingAfter(2), ProtocolViolation);
});

test("the cursor admits each numbered event once and refuses a gap", () => {
  const cursor = new EventCursor();
  assert.equal(cursor.admit(0), true); // unnumbered: session_created, session_resumed
  assert.equal(cursor.admit(1), true);
  assert.equal(cursor.admit(2), true);
  assert.equal(cursor.admit(2), false); // replayed again after a resume
  assert.equal(cursor.duplicates, 1);
  assert.equal(cursor.lastSeq, 2);
  assert.throws(() => cursor.admit(4), /event seq 4 follows 2/);
});

test("numbers a Number cannot hold exactly are refused, not rounded", () => {
  assert.throws(() => new EventCursor().admit(2 ** 53), ProtocolViolation);
  assert.throws(() => new CommandJournal().trim(2 ** 60), ProtocolViolation);
});
