// WAV in and out: what is written reads back the same; stereo is mixed; other widths refused.

import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { readWav, writeWav } from "../lib/wav.mjs";

const directory = mkdtempSync(path.join(tmpdir(), "omni-wav-"));

test("a written WAV reads back as the same samples and rate", () => {
  const samples = Buffer.alloc(200);
  for (let i = 0; i < 100; i += 1) samples.writeInt16LE(i * 300 - 15000, i * 2);
  const file = path.join(directory, "mono.wav");
  writeWav(file, samples, 16000);
  assert.deepEqual(readWav(file), { pcm16: samples, rateHz: 16000 });
});

function header(channels, bits, dataBytes) {
  const head = Buffer.alloc(44);
  head.write("RIFF", 0, "ascii");
  head.writeUInt32LE(36 + dataBytes, 4);
  head.write("WAVEfmt ", 8, "ascii");
  head.writeUInt32LE(16, 16);
  head.writeUInt16LE(1, 20);
  head.writeUInt16LE(channels, 22);
  head.writeUInt32LE(8000, 24);
  head.writeUInt32LE((8000 * channels * bits) / 8, 28);
  head.writeUInt16LE((channels * bits) / 8, 32);
  head.writeUInt16LE(bits, 34);
  head.write("data", 36, "ascii");
  head.writeUInt32LE(dataBytes, 40);
  return head;
}

test("stereo is averaged into mono", () => {
  const frames = Buffer.alloc(8);
  [100, 300, -200, -400].forEach((value, i) => frames.writeInt16LE(value, i * 2));
  const file = path.join(directory, "stereo.wav");
  writeFileSync(file, Buffer.concat([header(2, 16, 8), frames]));
  const { pcm16, rateHz } = readWav(file);
  assert.equal(rateHz, 8000);
  assert.deepEqual([pcm16.readInt16LE(0), pcm16.readInt16LE(2)], [200, -300]);
});

test("8-bit audio and files that are not WAV are refused with a reason", () => {
  const file = path.join(directory, "eight.wav");
  writeFileSync(file, Buffer.concat([header(1, 8, 4), Buffer.alloc(4)]));
  assert.throws(() => readWav(file), /only 16-bit PCM/);
  const text = path.join(directory, "text.wav");
  writeFileSync(text, "hello, not a wav file at all, not even close");
  assert.throws(() => readWav(text), /not a WAV file/);
});
