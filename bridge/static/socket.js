// The websocket carrier: the session's events as JSON text frames, its audio as base64 appends
// and deltas among them (app.js sends and plays those).

export class SocketLink {
  // first: the event that opens or resumes the session on the new socket; on: {message(event),
  // closed(code, reason)}.
  constructor({ resuming, key, first, on }) {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const protocols = ["realtime"];
    if (key) protocols.push("openai-insecure-api-key." + key);
    // The page resumes and acks, so it asks for the duplex extensions (seq, resume token).
    const query = resuming ? "?extensions=1&resume=1" : "?extensions=1";
    const ws = (this.ws = new WebSocket(`${scheme}://${location.host}/v1/realtime${query}`,
                                        protocols));
    ws.onopen = () => ws.send(JSON.stringify(first));
    ws.onmessage = (message) => on.message(JSON.parse(message.data));
    ws.onclose = (close) => on.closed(close.code, close.reason);
  }

  get open() {
    return this.ws.readyState === WebSocket.OPEN;
  }

  get closing() {
    return this.ws.readyState >= WebSocket.CLOSING;
  }

  send(text) {
    this.ws.send(text);
  }

  close(code, reason) {
    this.ws.close(code, reason);
  }

  // The page goes away: its last word, then the socket (a socket delivers what it was given).
  leave(text) {
    if (text && this.open) this.ws.send(text);
    this.ws.close(1000, "page_closed");
  }

  setMicOpen() {} // on a websocket, app.js sends the microphone's chunks or holds them
}
