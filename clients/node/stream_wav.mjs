#!/usr/bin/env node
// Says a WAV file to an omni-grpc server and saves the spoken reply, surviving broken
// connections on the way.
//
//   node clients/node/stream_wav.mjs --target HOST:PORT --api-key KEY --wav in.wav --out reply.wav
//
// The audio goes out in chunks at real-time pace (or --fast), then the turn ends with a commit
// that asks for a response (or, with --vad, trailing silence lets the server's voice activity
// detection end it). Every event is printed to stdout as one JSON line (audio bytes as their
// count); when the answer is done the session is closed, the reply audio is written as WAV, and
// one JSON summary line goes to stderr. On a server at capacity with a queue, each
// session_queued goes to stderr as "queued: position N, ...". Exit status: 0 answered, 1 the
// session failed, 2 unusable arguments or input, 3 the server refused the wait in its queue
// (after "refused: CODE, retry after N ms").

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { durationMs, grpc } from "./lib/contract.mjs";
import { OpenRefused, ResumingSession } from "./lib/resuming_session.mjs";
import { readWav, writeWav } from "./lib/wav.mjs";
import { ReplyRecorder } from "./lib/reply_recorder.mjs";

const VAD_TAIL_MS = 1200; // silence after the input, so the detector sees the turn end
const CLOSE_TIMEOUT_S = 10;
const USAGE = `usage: stream_wav.mjs --wav IN.wav [--out REPLY.wav] [--target HOST:PORT]
  [--api-key KEY] [--fast] [--vad] [--chunk-ms MS] [--timeout SECONDS] [--tls]
  [--root-cert PEM] [--instructions TEXT] [--voice NAME]`;

const FLAGS = {
  wav: { type: "string" },
  out: { type: "string" },
  target: { type: "string", default: process.env.OMNI_GRPC_TARGET || "127.0.0.1:50051" },
  "api-key": { type: "string", default: process.env.OMNI_GRPC_API_KEY || "" },
  fast: { type: "boolean", default: false },
  vad: { type: "boolean", default: false },
  "chunk-ms": { type: "string", default: "100" },
  timeout: { type: "string", default: "60" },
  tls: { type: "boolean", default: false },
  "root-cert": { type: "string" },
  instructions: { type: "string" },
  voice: { type: "string" },
  help: { type: "boolean", short: "h", default: false },
};

function settingsFrom(argv) {
  const { values } = parseArgs({ args: argv, options: FLAGS, strict: true });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  const chunkMs = Number(values["chunk-ms"]);
  const timeoutS = Number(values.timeout);
  if (!values.wav || !(chunkMs > 0) || !(timeoutS > 0)) {
    throw new Error("--wav is required; --chunk-ms and --timeout must be positive numbers");
  }
  return { ...values, chunkMs, timeoutS, audio: readWav(values.wav) };
}

function sessionConfig(settings) {
  const config = {
    input_audio_format: { encoding: "AUDIO_ENCODING_PCM16", sample_rate_hz: settings.audio.rateHz },
    output_audio_format: { encoding: "AUDIO_ENCODING_PCM16" },
    output_modalities: ["MODALITY_AUDIO"],
    turn_detection: {
      type: settings.vad ? "TURN_DETECTION_TYPE_SERVER_VAD" : "TURN_DETECTION_TYPE_NONE",
    },
    input_transcription: { enabled: true },
  };
  if (settings.instructions !== undefined) config.instructions = settings.instructions;
  if (settings.voice !== undefined) config.voice = settings.voice;
  return config;
}

function credentialsFrom(settings) {
  if (settings["root-cert"]) {
    return grpc.credentials.createSsl(readFileSync(settings["root-cert"]));
  }
  return settings.tls ? grpc.credentials.createSsl() : grpc.credentials.createInsecure();
}

/** The input cut into chunks of chunkMs (and, with --vad, the silence that ends the turn). */
function chunksOf(settings) {
  const { pcm16, rateHz } = settings.audio;
  const step = Math.max(2, Math.floor((rateHz * settings.chunkMs) / 1000) * 2);
  const audio = settings.vad
    ? Buffer.concat([pcm16, Buffer.alloc(Math.floor((rateHz * VAD_TAIL_MS) / 1000) * 2)])
    : pcm16;
  const chunks = [];
  for (let at = 0; at < audio.length; at += step) {
    chunks.push(audio.subarray(at, at + step));
  }
  return chunks;
}

async function streamAudio(session, settings) {
  const rateHz = settings.audio.rateHz;
  const started = performance.now();
  let sentMs = 0;
  for (const chunk of chunksOf(settings)) {
    sentMs += (chunk.length / 2 / rateHz) * 1000;
    if (!settings.fast) {
      // Like a microphone: a chunk goes out once its last sample exists, on the audio clock.
      const wait = started + sentMs - performance.now();
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, wait)));
    }
    await session.send({ append_input_audio: { audio: chunk } });
  }
  if (!settings.vad) {
    await session.send({ commit_input_audio: { create_response: true } });
  }
}

/** Settles like `promise`, or rejects with "`what` within `seconds` s" when it takes longer. */
async function within(promise, seconds, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} within ${seconds} s`)), seconds * 1000);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

async function run(settings) {
  const recorder = new ReplyRecorder(process.stdout, { vad: settings.vad });
  const session = await ResumingSession.open({
    target: settings.target,
    apiKey: settings["api-key"],
    credentials: credentialsFrom(settings),
    config: sessionConfig(settings),
    onEvent: (event) => recorder.onEvent(event),
    onQueued: (queued) => {
      const waitMs = Math.round(durationMs(queued.estimated_wait));
      const where = `position ${queued.position}, estimated wait ${waitMs} ms`;
      process.stderr.write(`queued: ${where}, class ${queued.priority_class}\n`);
    },
  });
  let status = 0;
  try {
    await streamAudio(session, settings);
    recorder.endInput();
    await within(Promise.race([recorder.answered, session.ended]), settings.timeoutS, "no answer");
  } catch (error) {
    process.stderr.write(`stream_wav: ${error.message}\n`);
    status = 1;
  }
  try {
    await within(session.close(), CLOSE_TIMEOUT_S, "no session_closed");
  } catch (error) {
    if (status === 0) {
      process.stderr.write(`stream_wav: ${error.message}\n`);
    }
    status = 1;
  } finally {
    session.abandon(); // nothing left to wait for; a no-op once the session ended
  }
  if (settings.out && recorder.reply.length > 0) {
    writeWav(settings.out, recorder.reply, recorder.replyRateHz);
  }
  const summary = {
    session_id: session.sessionId,
    route: session.route,
    reconnects: session.stats.reconnects,
    resent_commands: session.stats.resentCommands,
    duplicate_events: session.stats.duplicateEvents,
    reply_ms: (recorder.reply.length / 2 / recorder.replyRateHz) * 1000,
    answered: recorder.done,
  };
  process.stderr.write(`${JSON.stringify(summary)}\n`);
  return status || (recorder.done ? 0 : 1);
}

let settings;
try {
  settings = settingsFrom(process.argv.slice(2));
} catch (error) {
  process.stderr.write(`stream_wav: ${error.message}\n${USAGE}\n`);
  process.exit(2);
}
run(settings).then(
  (status) => {
    process.exitCode = status;
  },
  (error) => {
    process.stderr.write(`stream_wav: ${error.message}\n`);
    process.exitCode = 1;
    if (error instanceof OpenRefused) {
      // Its own status and line: a caller may try again after the server's delay.
      process.stderr.write(`refused: ${error.errorCode}, retry after ${error.retryAfterMs} ms\n`);
      process.exitCode = 3;
    }
  },
);
