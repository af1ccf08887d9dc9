// Behind a proxy in front of several replicas (docs/deploy.md), a session's later calls must
// reach the replica that holds it: the server names it (its routing key, in session_created,
// session_resumed and the response headers), and the client sends the key back as metadata
// on every call. A replica that refuses a resume because the session lives elsewhere names
// the owner the same way, and puts its refusal in the response headers too, because HAProxy
// 2.6 turns such a stream into CANCELLED and its trailers are lost.

import { grpc } from "./contract.mjs";

export const ROUTE_HEADER = "x-omni-route";
export const REFUSAL_HEADER = "x-omni-refusal-bin";

/** The first routing key in the grpc.Metadata given (null ones skipped), "" when none. */
export function routeOf(...metadatas) {
  for (const metadata of metadatas) {
    const [route] = metadata?.get(ROUTE_HEADER) ?? [];
    if (route) {
      return String(route);
    }
  }
  return "";
}

/**
 * The refusal the server also put in `headers`, as { code, details }, when the stream ended
 * CANCELLED (a proxy lost the trailers) and the headers hold one; otherwise null.
 */
export function relayedRefusal(code, headers) {
  if (code !== grpc.status.CANCELLED || !headers) {
    return null;
  }
  const [value] = headers.get(REFUSAL_HEADER);
  if (!Buffer.isBuffer(value)) {
    return null;
  }
  try {
    const status = decodeStatus(value);
    return status.code ? { code: status.code, details: status.message } : null;
  } catch {
    return null; // not a google.rpc.Status: the CANCELLED stands
  }
}

/**
 * Reads a google.rpc.Status's code (field 1, varint) and message (field 2, string); its
 * details are skipped. The whole message is three fields, so no protobuf runtime is needed.
 */
export function decodeStatus(bytes) {
  const status = { code: 0, message: "" };
  let at = 0;
  const varint = () => {
    let value = 0;
    for (let shift = 0; ; shift += 7) {
      if (at >= bytes.length || shift > 28) {
        throw new Error("a truncated or oversized varint");
      }
      const byte = bytes[at++];
      value += (byte & 0x7f) * 2 ** shift;
      if (byte < 0x80) {
        return value;
      }
    }
  };
  while (at < bytes.length) {
    const tag = varint();
    const field = tag >>> 3;
    const wire = tag & 7;
    if (wire === 0) {
      const value = varint();
      if (field === 1) {
        status.code = value | 0; // int32
      }
    } else if (wire === 2) {
      const length = varint();
      if (at + length > bytes.length) {
        throw new Error("a truncated field");
      }
      if (field === 2) {
        status.message = bytes.subarray(at, at + length).toString("utf8");
      }
      at += length;
    } else {
      throw new Error(`wire type ${wire} is not in a google.rpc.Status`);
    }
  }
  return status;
}
