// How long to wait between attempts to reach the session again: capped exponential backoff
// with jitter, so clients cut off together do not all come back at the same instant.

import { setTimeout as sleep } from "node:timers/promises";

export const DEFAULT_RECONNECT = Object.freeze({
  initialBackoffMs: 50,
  maxBackoffMs: 2000,
  multiplier: 2,
  jitter: 0.5, // each delay is cut by up to this fraction, at random
  maxAttempts: 20,
  maxElapsedMs: 30000, // also never past the server's disconnect grace
});

/** Yields the wait before each attempt after the first, forever; the caller bounds it. */
export function* backoffDelays(policy = DEFAULT_RECONNECT, random = Math.random) {
  let base = policy.initialBackoffMs;
  for (;;) {
    yield base * (1 - policy.jitter * random());
    base = Math.min(base * policy.multiplier, policy.maxBackoffMs);
  }
}

/**
 * Returns what `attempt()` resolves to, calling it again after a backoff delay each time it
 * throws an error that `transient(error)` accepts. Gives up, throwing `gaveUp(error, attempts)`,
 * after `policy.maxAttempts` attempts or when the next delay would pass `limitMs`; any other
 * error is thrown at once. `stopped()` ends the loop early (it then resolves undefined).
 */
export async function retrying(attempt, { policy, limitMs, transient, gaveUp, stopped }) {
  const delays = backoffDelays(policy);
  const started = Date.now();
  for (let attempts = 1; !stopped(); attempts += 1) {
    try {
      return await attempt();
    } catch (error) {
      if (!transient(error)) {
        throw error;
      }
      const delay = delays.next().value;
      if (attempts >= policy.maxAttempts || Date.now() - started + delay > limitMs) {
        throw gaveUp(error, attempts);
      }
      await sleep(delay);
    }
  }
  return undefined;
}
