// Follows the events of one spoken turn: prints each as a JSON line, keeps the reply audio,
// and says when the answer is complete.

const DEFAULT_OUTPUT_RATE_HZ = 24000; // the contract's default output, until a delta names one

export class ReplyRecorder {
  replyRateHz = DEFAULT_OUTPUT_RATE_HZ;
  done = false;
  #chunks = [];
  #out;
  #vad;
  #inputDone = false;
  #responding = false;
  #settle;

  constructor(out, { vad = false } = {}) {
    this.#out = out;
    this.#vad = vad;
    /** Resolves when the answer to the turn is done; rejects on an error that ends it. */
    this.answered = new Promise((resolve, reject) => {
      this.#settle = (error) => (error ? reject(error) : resolve());
    });
    this.answered.catch(() => {});
  }

  /** The reply audio so far, as mono s16le. */
  get reply() {
    return Buffer.concat(this.#chunks);
  }

  /** The client sent its last audio (and its commit, without VAD). */
  endInput() {
    this.#inputDone = true;
  }

  onEvent(event) {
    const kind = event.event;
    this.#out.write(`${JSON.stringify(printable(event))}\n`);
    if (kind === "response_created") {
      this.#responding = true;
    } else if (kind === "output_audio_delta") {
      this.#audio(event.output_audio_delta);
    } else if (kind === "response_done" || (kind === "response_listen" && !this.#vad)) {
      this.#responding = false;
      if (this.#inputDone) {
        this.#finish(null);
      }
    } else if (kind === "error" && this.#inputDone && !this.#responding) {
      this.#finish(new Error(`${event.error.code}: ${event.error.message}`));
    }
  }

  #audio(delta) {
    if (!["AUDIO_ENCODING_PCM16", "AUDIO_ENCODING_UNSPECIFIED"].includes(delta.encoding)) {
      this.#finish(new Error(`the server sent ${delta.encoding} audio, not pcm16`));
      return;
    }
    this.#chunks.push(delta.audio);
    this.replyRateHz = delta.sample_rate_hz || this.replyRateHz;
  }

  #finish(error) {
    this.done = error === null;
    this.#settle(error);
  }
}

/** The event as JSON-friendly data: the oneof member's name as `type`, bytes as their count. */
function printable(event) {
  const { event: kind, ...fields } = event;
  return { type: kind, ...bytesCounted(fields) };
}

function bytesCounted(value) {
  if (value instanceof Uint8Array) {
    return { bytes: value.length };
  }
  if (Array.isArray(value)) {
    return value.map(bytesCounted);
  }
  if (value && typeof value === "object") {
    const entries = Object.entries(value).map(([key, item]) => [key, bytesCounted(item)]);
    return Object.fromEntries(entries);
  }
  return value;
}
