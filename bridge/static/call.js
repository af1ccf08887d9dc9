// The WebRTC carrier, as OpenAI's calls have it: an SDP offer posted to /v1/realtime/calls,
// the session's events as the same JSON on the "oai-events" data channel, the microphone on
// the peer connection's audio track (the browser's own echo cancellation, fed by the answer it
// plays) and the answer on the remote track, played by an <audio> element. No audio events on
// the channel: the bridge says when an answer's audio starts, stops or is cut
// (output_audio_buffer.*), and acknowledges what left on the track itself.
//
// A resume is a new offer with the session's id, its resume token and the last event seen
// (the Omni-* headers), as a websocket's session.resume: the new channel replays what followed.

const CALLS = "/v1/realtime/calls";
const REFUSED = 1008; // as a websocket's refused handshake: the page does not come back
const LOST = 1006; // the network or the bridge: the page comes back and resumes
// A peer connection that stays "disconnected" this long is taken as lost: the browser itself
// calls it "failed" only after about 30 s, as long as the session's disconnect grace.
const DISCONNECTED_MS = 4000;

export class CallLink {
  // first: the session.update that opens a new session, or the session.resume that resumes
  // one (its fields become the resume headers); microphone: the captured track, or null;
  // player: the <audio> element for the answer; on: {message(event), closed(code, reason)}.
  constructor({ resuming, key, first, microphone, player, on }) {
    this.on = on;
    this.key = key;
    this.ended = false;
    this.disconnected = 0; // the timer that gives up on a disconnected peer connection
    const peer = (this.peer = new RTCPeerConnection());
    // The call's own copy of the microphone: holding it closed leaves the page's meter be.
    // Without a microphone the offer still has its audio line: the answer comes back on it.
    this.microphone = microphone ? microphone.clone() : null;
    peer.addTransceiver(this.microphone || "audio", { direction: "sendrecv" });
    peer.ontrack = (event) => { player.srcObject = new MediaStream([event.track]); };
    this.player = player;
    const channel = (this.channel = peer.createDataChannel("oai-events"));
    channel.onmessage = (message) => on.message(JSON.parse(message.data));
    channel.onclose = () => this.lost(LOST, "channel_closed");
    peer.onconnectionstatechange = () => {
      clearTimeout(this.disconnected);
      if (peer.connectionState === "failed") this.lost(LOST, "peer_failed");
      if (peer.connectionState === "disconnected") {
        this.disconnected = setTimeout(() => this.lost(LOST, "peer_disconnected"), DISCONNECTED_MS);
      }
    };
    this.call(resuming, first).catch((error) => this.lost(LOST, String(error)));
  }

  async call(resuming, first) {
    await this.peer.setLocalDescription(await this.peer.createOffer());
    const headers = {};
    if (this.key) headers.Authorization = `Bearer ${this.key}`;
    let body;
    if (resuming) {
      headers["Content-Type"] = "application/sdp";
      headers["Omni-Session-Id"] = first.session_id;
      headers["Omni-Resume-Token"] = first.resume_token;
      headers["Omni-Last-Event-Seq"] = String(first.last_received_server_event_seq);
      body = this.peer.localDescription.sdp;
    } else {
      // The form a server posts for a browser: the session opens with the page's settings.
      body = new FormData();
      body.set("sdp", this.peer.localDescription.sdp);
      body.set("session", JSON.stringify(first.session));
    }
    // The page resumes and acks, so it asks for the duplex extensions (seq, resume token).
    const answer = await fetch(`${CALLS}?extensions=1`, { method: "POST", headers, body });
    if (this.ended) return;
    if (!answer.ok) {
      // A refusal is typed ({error: {code, ...}}): a full queue or a busy service is tried
      // again, anything else (a bad key, a foreign page, an expired session) ends the page's.
      const error = (await answer.json().catch(() => ({}))).error || {};
      const again = answer.status === 429 || answer.status >= 500;
      this.lost(again ? LOST : REFUSED, error.code || String(answer.status));
      return;
    }
    await this.peer.setRemoteDescription({ type: "answer", sdp: await answer.text() });
  }

  // Reported once, and only by the link the peer connection is still alive for.
  lost(code, reason) {
    if (this.ended) return;
    this.ended = true;
    clearTimeout(this.disconnected);
    this.channel.onclose = this.peer.onconnectionstatechange = null;
    this.peer.close();
    if (this.microphone) this.microphone.stop();
    this.player.srcObject = null;
    this.on.closed(code, reason);
  }

  get open() {
    return this.channel.readyState === "open";
  }

  get closing() {
    return this.ended;
  }

  send(text) {
    this.channel.send(text);
  }

  close(code, reason) {
    this.lost(code, reason);
  }

  // The page goes away: its last word (session.close) goes on the channel, and the peer
  // connection is left to close with the page, as closing it here could overtake that word.
  // A session not yet attached (waiting in the queue) has no word to say: its call just
  // ends, and the bridge detaches the wait as it does a dropped websocket's.
  leave(text) {
    const last = text && this.open;
    if (last) this.channel.send(text);
    this.ended = true;
    clearTimeout(this.disconnected);
    this.channel.onclose = this.peer.onconnectionstatechange = null;
    if (!last) this.peer.close();
  }

  // Held closed (muted, or waiting in the queue): the track sends silence, not the room.
  setMicOpen(open) {
    if (this.microphone) this.microphone.enabled = open;
  }

  get micOpen() {
    return this.microphone ? this.microphone.enabled : null;
  }

  // What the answer's track has delivered (the browser's own count): a test hears with it.
  async heardEnergy() {
    let energy = 0;
    (await this.peer.getStats()).forEach((report) => {
      if (report.type === "inbound-rtp" && report.kind === "audio") {
        energy += report.totalAudioEnergy || 0;
      }
    });
    return energy;
  }
}
