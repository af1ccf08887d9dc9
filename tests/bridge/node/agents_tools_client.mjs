// @openai/agents-realtime with a function tool and a handoff, as a client of the bridge.
//
// Usage: node agents_tools_client.mjs <ws url> <pcm16 24 kHz file> [auto|required]
// With auto (the default) the service behind the bridge calls the first tool it is offered (the
// loopback's tool_call=auto, the embedded engine's scripted responder); with required each
// turn's response.create asks for tool_choice required, so a model writes the call. Turn 1 is spoken (the audio, committed, then response.create): the service
// calls the handoff and the SDK moves to the weather agent. Turn 2 is typed: the service calls
// get_weather, the SDK runs it here and sends its output, and the answer is spoken.
// Prints one JSON line per thing seen: {"transport": event} for every server event,
// {"session": name, ...} for the session's own events (handoffs, tool runs, errors); the Python
// test checks them. Exit code 0 once the answer after the tool ended, 2 on a timeout.
import { readFileSync } from 'node:fs';
import { RealtimeAgent, RealtimeSession, tool } from '@openai/agents-realtime';

const [url, pcmPath, choice = 'auto'] = process.argv.slice(2);
const respond = choice === 'required'
  ? { type: 'response.create', response: { tool_choice: 'required' } }
  : { type: 'response.create' };
const WEATHER_REPORT = 'sunny, 21 degrees';
const timer = setTimeout(() => {
  console.error('timed out');
  process.exit(2);
}, 150000);
const print = (line) => console.log(JSON.stringify(line));

const getWeather = tool({
  name: 'get_weather',
  description: 'The weather in a city.',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  },
  strict: true,
  execute: async ({ city }) => {
    print({ session: 'tool_ran', city });
    return WEATHER_REPORT;
  },
});
const weather = new RealtimeAgent({
  name: 'weather_agent',
  instructions: 'Say the weather.',
  handoffDescription: 'Knows the weather.',
  tools: [getWeather],
});
const triage = new RealtimeAgent({ name: 'triage', instructions: 'Hand off.', handoffs: [weather] });
const session = new RealtimeSession(triage, {
  transport: 'websocket',
  model: 'gpt-realtime',
  // The loopback engine has no voice activity detection: this client commits its turns.
  config: { audio: { input: { turnDetection: null } } },
});

// The answer to a tool's output is the first response after it that calls nothing; the SDK's
// own agent_end cannot tell it from the end of the call's response, which may come before or
// after the SDK ran the tool.
const callsNothing = (event) =>
  event.type === 'response.done' &&
  !(event.response?.output ?? []).some((item) => item.type === 'function_call');
let phase = 'opening';
session.transport.on('*', (event) => {
  print({ transport: event });
  if (event.type === 'session.updated' && phase === 'opening') {
    phase = 'spoken';
    const pcm = readFileSync(pcmPath);
    session.sendAudio(pcm.buffer.slice(pcm.byteOffset, pcm.byteOffset + pcm.byteLength),
                      { commit: true });
    session.transport.sendEvent(respond);
  } else if (callsNothing(event) && phase === 'handed_off') {
    // The handoff's output was answered: the typed turn.
    phase = 'typed';
    const text = 'What is the weather in Paris?';
    session.transport.sendEvent({
      type: 'conversation.item.create',
      item: { type: 'message', role: 'user', content: [{ type: 'input_text', text }] },
    });
    session.transport.sendEvent(respond);
  } else if (callsNothing(event) && phase === 'answering') {
    // No process.exit(): stdout to a pipe is written asynchronously and would lose lines.
    clearTimeout(timer);
    session.close();
  }
});
session.on('agent_handoff', (context, from, to) => {
  print({ session: 'handoff', from: from.name, to: to.name });
  if (phase === 'spoken') phase = 'handed_off';
});
session.on('agent_tool_start', (context, agent, called) => {
  print({ session: 'tool_start', agent: agent.name, tool: called.name });
});
session.on('agent_tool_end', (context, agent, called, result) => {
  print({ session: 'tool_end', agent: agent.name, tool: called.name, result });
  if (called.name === 'get_weather') phase = 'answering';
});
session.on('agent_end', (context, agent, output) => {
  print({ session: 'agent_end', agent: agent.name, output });
});
session.on('audio', () => print({ session: 'audio' }));
session.on('error', (error) => print({ session: 'error', error: String(error.error ?? error) }));

await session.connect({ apiKey: 'test-key', url });
