// OpenAI's voice-agent framework (@openai/agents-realtime) as a client of the bridge.
//
// Usage: node agents_client.mjs <ws url> <pcm16 24 kHz file>
// It connects over plain ws:// the way an agents application does, sends the audio as one turn,
// asks for a response, and prints every server event it receives as one JSON line; the Python
// test checks them. Exit code 0 once response.done arrived, 2 on a timeout, 1 on an error.
import { readFileSync } from 'node:fs';
import { RealtimeAgent, RealtimeSession } from '@openai/agents-realtime';

const [url, pcmPath] = process.argv.slice(2);
const timer = setTimeout(() => {
  console.error('timed out waiting for response.done');
  process.exit(2);
}, 30000);

const agent = new RealtimeAgent({ name: 'bridge-probe', instructions: 'Answer briefly.' });
const session = new RealtimeSession(agent, {
  transport: 'websocket',
  model: 'gpt-realtime',
  // The loopback engine has no voice activity detection: this client commits the turn itself.
  config: { audio: { input: { turnDetection: null } } },
});

let updated = false;
session.transport.on('*', (event) => {
  console.log(JSON.stringify(event));
  if (event.type === 'session.updated' && !updated) {
    updated = true;
    const pcm = readFileSync(pcmPath);
    session.sendAudio(pcm.buffer.slice(pcm.byteOffset, pcm.byteOffset + pcm.byteLength),
                      { commit: true });
    session.transport.sendEvent({ type: 'response.create' });
  }
  if (event.type === 'response.done') {
    // No process.exit(): stdout to a pipe is written asynchronously and would lose lines.
    // With the timer cleared and the socket closed, Node exits once everything is out.
    clearTimeout(timer);
    session.close();
  }
});
session.on('error', (error) => console.error('session error', JSON.stringify(error)));

await session.connect({ apiKey: 'test-key', url });
