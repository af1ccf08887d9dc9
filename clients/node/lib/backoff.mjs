// How long to wait between attempts to reach the session again: capped exponential backoff
// with jitter, so clients cut off together do not all come back at the same instant.

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
