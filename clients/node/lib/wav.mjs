// Reading the input WAV as mono pcm16 and writing the reply as a WAV file.
//
// Only 16-bit PCM is read (what the protocol's default encoding carries); channels are
// averaged into one. The rate is kept as it is and named in the session's input format:
// the server accepts the common rates and says which in its capabilities.

import { readFileSync, writeFileSync } from "node:fs";

const PCM = 1;
const EXTENSIBLE = 0xfffe;

/** Returns { pcm16: Buffer (mono s16le), rateHz } from a 16-bit PCM WAV file. */
export function readWav(path) {
  const file = readFileSync(path);
  if (file.toString("ascii", 0, 4) !== "RIFF" || file.toString("ascii", 8, 12) !== "WAVE") {
    throw new Error(`${path} is not a WAV file`);
  }
  let format = null;
  for (let at = 12; at + 8 <= file.length; ) {
    const id = file.toString("ascii", at, at + 4);
    const size = file.readUInt32LE(at + 4);
    const body = file.subarray(at + 8, Math.min(file.length, at + 8 + size));
    if (id === "fmt ") {
      format = {
        tag: body.readUInt16LE(0),
        channels: body.readUInt16LE(2),
        rateHz: body.readUInt32LE(4),
        bits: body.readUInt16LE(14),
      };
    } else if (id === "data") {
      if (!format) {
        throw new Error(`${path}: the data chunk comes before the format`);
      }
      return { pcm16: toMono16(body, format, path), rateHz: format.rateHz };
    }
    at += 8 + size + (size % 2); // chunks are padded to an even length
  }
  throw new Error(`${path} has no audio data`);
}

function toMono16(data, { tag, channels, bits }, path) {
  if ((tag !== PCM && tag !== EXTENSIBLE) || bits !== 16 || channels < 1) {
    throw new Error(`${path}: only 16-bit PCM WAV is read (format ${tag}, ${bits} bits)`);
  }
  const frames = Math.floor(data.length / (2 * channels));
  if (channels === 1) {
    return Buffer.from(data.subarray(0, frames * 2));
  }
  const mono = Buffer.alloc(frames * 2);
  for (let frame = 0; frame < frames; frame += 1) {
    let sum = 0;
    for (let channel = 0; channel < channels; channel += 1) {
      sum += data.readInt16LE((frame * channels + channel) * 2);
    }
    mono.writeInt16LE(Math.round(sum / channels), frame * 2);
  }
  return mono;
}

/** Writes mono s16le samples as a WAV file. */
export function writeWav(path, pcm16, rateHz) {
  const header = Buffer.alloc(44);
  header.write("RIFF", 0, "ascii");
  header.writeUInt32LE(36 + pcm16.length, 4);
  header.write("WAVEfmt ", 8, "ascii");
  header.writeUInt32LE(16, 16); // the size of the fmt chunk
  header.writeUInt16LE(PCM, 20);
  header.writeUInt16LE(1, 22); // mono
  header.writeUInt32LE(rateHz, 24);
  header.writeUInt32LE(rateHz * 2, 28); // bytes per second
  header.writeUInt16LE(2, 32); // bytes per frame
  header.writeUInt16LE(16, 34);
  header.write("data", 36, "ascii");
  header.writeUInt32LE(pcm16.length, 40);
  writeFileSync(path, Buffer.concat([header, pcm16]));
}
