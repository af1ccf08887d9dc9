// The omni.duplex.v1 contract, loaded from its .proto at run time.
//
// There is no generated code: @grpc/proto-loader reads proto/omni/duplex/v1/duplex.proto when
// the client starts, so the client always speaks the contract this repository holds. Only
// names that the contract promises to keep are used here: field names, oneof names and
// member names (a renamed message type behind a member changes nothing).

import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

export { grpc };

export const SERVICE_NAME = "omni.duplex.v1.DuplexService";
const PROTO_FILE = "omni/duplex/v1/duplex.proto";
const REPOSITORY_PROTO_ROOT = fileURLToPath(new URL("../../../proto", import.meta.url));

// How messages look in JavaScript: the proto's own field names (client_seq, not clientSeq), so
// the code reads like the contract; 64-bit integers as Number, which is exact below 2^53 (a seq
// would need 285 years at a million events a second to get there; the bookkeeping refuses any
// number past it rather than round it); enums as their names; and the name of the set oneof
// member in a virtual field (`event`, `command`).
const AS_JAVASCRIPT = {
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
};

// Statuses that say the stream failed, not the session or the request: trying again, to open
// or to resume, may well work. The same set as the Python client's.
export const TRANSIENT_STATUSES = new Set([
  grpc.status.UNAVAILABLE,
  grpc.status.CANCELLED,
  grpc.status.DEADLINE_EXCEEDED,
  grpc.status.ABORTED,
  grpc.status.INTERNAL,
  grpc.status.UNKNOWN,
  grpc.status.RESOURCE_EXHAUSTED,
]);

/**
 * Returns the DuplexService client class, made from the .proto under `protoRoot` (the
 * repository's proto/ directory unless $OMNI_GRPC_PROTO_ROOT says otherwise).
 */
export function loadDuplexService(protoRoot) {
  const root = protoRoot || process.env.OMNI_GRPC_PROTO_ROOT || REPOSITORY_PROTO_ROOT;
  const definition = protoLoader.loadSync(PROTO_FILE, { ...AS_JAVASCRIPT, includeDirs: [root] });
  const service = definition[SERVICE_NAME];
  if (!service) {
    throw new Error(`${SERVICE_NAME} is not in ${PROTO_FILE} under ${root}`);
  }
  return grpc.makeGenericClientConstructor(service, "DuplexService");
}

/** Names a gRPC status code for people ("UNAVAILABLE"). */
export function statusName(code) {
  return Object.keys(grpc.status).find((name) => grpc.status[name] === code) ?? String(code);
}

/** A google.protobuf.Duration as milliseconds (0 when unset). */
export function durationMs(duration) {
  return duration ? duration.seconds * 1000 + duration.nanos / 1e6 : 0;
}
