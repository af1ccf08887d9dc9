// Audio worklets of the omni-grpc page: microphone capture and a jitter-buffered player.
// Both run in an AudioContext at 24 kHz, the rate of OpenAI's pcm16, so nothing resamples here.

const CHUNK_FRAMES = 2400; // 100 ms per append: few messages, little added delay
const PREBUFFER_FRAMES = 2400; // a response starts playing once 100 ms are queued (or it ended)
const REPORT_FRAMES = 2400; // the player reports progress every 100 ms of playback

// Collects microphone samples into 100 ms pcm16 chunks and posts them with their loudness.
class MicCapture extends AudioWorkletProcessor {
  constructor() {
    super();
    this.chunk = new Int16Array(CHUNK_FRAMES);
    this.filled = 0;
    this.energy = 0;
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true;
    for (let i = 0; i < channel.length; i++) {
      const s = Math.max(-1, Math.min(1, channel[i]));
      this.chunk[this.filled++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      this.energy += s * s;
      if (this.filled === CHUNK_FRAMES) {
        const rms = Math.sqrt(this.energy / CHUNK_FRAMES);
        this.port.postMessage({ pcm: this.chunk.buffer, rms }, [this.chunk.buffer]);
        this.chunk = new Int16Array(CHUNK_FRAMES);
        this.filled = 0;
        this.energy = 0;
      }
    }
    return true;
  }
}

// Plays queued pcm16 chunks in order; counts what each response has really played.
class PcmPlayer extends AudioWorkletProcessor {
  constructor() {
    super();
    this.queue = []; // {id, samples: Float32Array, offset}
    this.queued = 0;
    this.ended = new Set(); // responses whose last chunk is queued
    this.started = false;
    this.played = {}; // response id -> frames played
    this.sinceReport = 0;
    this.port.onmessage = (event) => this.command(event.data);
  }

  command(message) {
    if (message.type === "chunk") {
      const pcm = new Int16Array(message.pcm);
      const samples = new Float32Array(pcm.length);
      for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 0x8000;
      this.queue.push({ id: message.id, samples, offset: 0 });
      this.queued += samples.length;
    } else if (message.type === "end") {
      this.ended.add(message.id);
    } else if (message.type === "flush") {
      // Barge-in: what is queued is never played; report where playback stopped.
      this.queue = [];
      this.queued = 0;
      this.started = false;
      this.report(true);
    }
  }

  report(flushed) {
    this.port.postMessage({ played: { ...this.played }, queued: this.queued, flushed });
    this.sinceReport = 0;
  }

  process(inputs, outputs) {
    const out = outputs[0][0];
    out.fill(0);
    const head = this.queue[0];
    if (!this.started && head) {
      // The jitter buffer: wait for 100 ms of audio unless the response has ended.
      this.started = this.queued >= PREBUFFER_FRAMES || this.ended.has(head.id);
    }
    if (!this.started) return true;
    let written = 0;
    while (written < out.length && this.queue.length) {
      const chunk = this.queue[0];
      const n = Math.min(out.length - written, chunk.samples.length - chunk.offset);
      out.set(chunk.samples.subarray(chunk.offset, chunk.offset + n), written);
      chunk.offset += n;
      written += n;
      this.queued -= n;
      this.played[chunk.id] = (this.played[chunk.id] || 0) + n;
      if (chunk.offset === chunk.samples.length) this.queue.shift();
    }
    if (!this.queue.length) this.started = false; // underrun: buffer again before going on
    this.sinceReport += written;
    if (this.sinceReport >= REPORT_FRAMES || (written && !this.queue.length)) this.report(false);
    return true;
  }
}

registerProcessor("mic-capture", MicCapture);
registerProcessor("pcm-player", PcmPlayer);
