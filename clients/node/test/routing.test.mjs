import assert from "node:assert/strict";
import { test } from "node:test";

import { grpc } from "../lib/contract.mjs";
import { decodeStatus, REFUSAL_HEADER, relayedRefusal, ROUTE_HEADER, routeOf } from "../lib/routing.mjs";

// google.rpc.Status{code: 14 (UNAVAILABLE), message: "elsewhere", details: [Any{type_url: "x"}]}
// as protoc encodes it: field 1 varint, field 2 string, field 3 a nested message (skipped).
const REFUSAL = Buffer.from([
  0x08, 0x0e,
  0x12, 0x09, ...Buffer.from("elsewhere"),
  0x1a, 0x03, 0x0a, 0x01, 0x78,
]);

function metadataWith(pairs) {
  const metadata = new grpc.Metadata();
  for (const [name, value] of pairs) {
    metadata.set(name, value);
  }
  return metadata;
}

test("the route is the first one found, trailers before headers", () => {
  const headers = metadataWith([[ROUTE_HEADER, "r2"]]);
  assert.equal(routeOf(null, headers), "r2");
  assert.equal(routeOf(metadataWith([[ROUTE_HEADER, "r1"]]), headers), "r1");
  assert.equal(routeOf(new grpc.Metadata()), "");
});

test("a google.rpc.Status decodes to its code and message", () => {
  assert.deepEqual(decodeStatus(REFUSAL), { code: 14, message: "elsewhere" });
  assert.throws(() => decodeStatus(REFUSAL.subarray(0, 5)));
});

test("a cancelled stream reads the refusal from its headers, and only then", () => {
  const headers = metadataWith([[REFUSAL_HEADER, REFUSAL]]);
  assert.deepEqual(relayedRefusal(grpc.status.CANCELLED, headers), {
    code: grpc.status.UNAVAILABLE,
    details: "elsewhere",
  });
  assert.equal(relayedRefusal(grpc.status.NOT_FOUND, headers), null);
  assert.equal(relayedRefusal(grpc.status.CANCELLED, new grpc.Metadata()), null);
  assert.equal(relayedRefusal(grpc.status.CANCELLED, null), null);
});
