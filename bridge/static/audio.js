// The page's audio: the microphone captured in 100 ms pcm16 chunks, and a jitter-buffered
// player that reports what each response has really played (both are worklets: worklet.js).

import { RATE } from "./state.js";

export class AudioIO {
  // onMic({pcm, rms}) gets each captured chunk; onPlayer({played, queued, flushed}) each
  // progress report of the player.
  constructor({ onMic, onPlayer }) {
    this.onMic = onMic;
    this.onPlayer = onPlayer;
    this.ctx = null;
    this.stream = null;
    this.player = null;
  }

  // Starts the player, then the microphone; returns why the microphone could not start (the
  // page then still plays and takes typed turns), or null.
  async start() {
    this.ctx = new AudioContext({ sampleRate: RATE });
    await this.ctx.audioWorklet.addModule("/static/worklet.js");
    this.player = new AudioWorkletNode(this.ctx, "pcm-player", { outputChannelCount: [1] });
    this.player.port.onmessage = (event) => this.onPlayer(event.data);
    this.player.connect(this.ctx.destination);
    await this.ctx.resume();
    try {
      await this.startMic();
    } catch (error) {
      return error;
    }
    return null;
  }

  async startMic() {
    if (!navigator.mediaDevices) {
      throw new Error("this page has no microphone here: open it over https or on localhost");
    }
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: false,
               autoGainControl: false },
    });
    const mic = new AudioWorkletNode(this.ctx, "mic-capture");
    mic.port.onmessage = (event) => this.onMic(event.data);
    const silent = new GainNode(this.ctx, { gain: 0 }); // a capture node must be pulled to run
    this.ctx.createMediaStreamSource(this.stream).connect(mic).connect(silent)
      .connect(this.ctx.destination);
  }

  async stop() {
    if (this.stream) this.stream.getTracks().forEach((track) => track.stop());
    if (this.ctx) await this.ctx.close();
    this.ctx = this.stream = this.player = null;
  }

  play(id, pcm) {
    if (this.player) this.player.port.postMessage({ type: "chunk", id, pcm }, [pcm]);
  }

  end(id) {
    if (this.player) this.player.port.postMessage({ type: "end", id });
  }

  // Barge-in: what is queued is never played; the player reports where it stopped.
  flush() {
    if (this.player) this.player.port.postMessage({ type: "flush" });
  }
}
