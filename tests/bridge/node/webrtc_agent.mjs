// The stock @openai/agents-realtime RealtimeSession in a browser page, with its default
// transport (WebRTC), as a client of the bridge. Bundled for the page by esbuild
// (tests/bridge/test_webrtc_browser.py); the page's query names the calls URL and the client
// secret. Everything the test checks is kept on window.omni: every transport event, the tool's
// runs, errors, and the answer's audio as the peer connection's own statistics count it.
import { RealtimeAgent, RealtimeSession, tool } from '@openai/agents-realtime';

const query = new URLSearchParams(location.search);
const omni = { events: [], toolRuns: [], errors: [], connected: false };
window.omni = omni;

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
    omni.toolRuns.push(city);
    return 'sunny, 21 degrees';
  },
});
const agent = new RealtimeAgent({
  name: 'assistant',
  instructions: 'Answer briefly.',
  tools: query.get('tools') === '1' ? [getWeather] : [],
});
// No transport option: the browser default, WebRTC. The loopback engine behind the bridge has
// no voice activity detection, so those tests commit the turns themselves; with ?vad=1 the
// session asks for server VAD (an engine that hears speech, for a spoken barge-in).
const turnDetection = query.get('vad') === '1' ? { type: 'server_vad' } : null;
const session = new RealtimeSession(agent, {
  model: 'gpt-realtime',
  config: { audio: { input: { turnDetection } } },
});
session.transport.on('*', (event) => omni.events.push(event));
const said = (thing) => (thing instanceof Error ? thing.message : JSON.stringify(thing));
session.on('error', (event) => omni.errors.push(said(event?.error ?? event)));

// The answer heard: the inbound audio's energy, as the browser's WebRTC stack measured it.
omni.heardEnergy = async () => {
  const peer = session.transport.connectionState.peerConnection;
  let energy = 0;
  (await peer.getStats()).forEach((report) => {
    if (report.type === 'inbound-rtp' && report.kind === 'audio') {
      energy += report.totalAudioEnergy ?? 0;
    }
  });
  return energy;
};
omni.send = (event) => session.transport.sendEvent(event);
omni.interrupt = () => session.interrupt();
omni.say = (text) => session.sendMessage(text);
omni.history = () => session.history;
omni.callId = () => session.transport.callId;

session
  .connect({ apiKey: query.get('key'), url: query.get('url') })
  .then(() => {
    omni.connected = true;
  })
  .catch((error) => omni.errors.push(`connect: ${said(error)}`));
