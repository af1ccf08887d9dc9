package duplex

import (
	"math/rand"
	"time"
)

// Backoff spaces reconnect attempts: exponential growth from Initial up to Max, with full
// jitter so that many clients cut at once do not come back in step.
type Backoff struct {
	Initial     time.Duration
	Max         time.Duration
	MaxAttempts int // attempts per outage before giving up
}

// DefaultBackoff suits a person's client: quick first retry, patient after.
var DefaultBackoff = Backoff{Initial: 50 * time.Millisecond, Max: 5 * time.Second, MaxAttempts: 30}

// Delay is how long to wait before attempt n (from 1): a uniform draw in [0, cap], where cap
// doubles from Initial each attempt and stops at Max.
func (b Backoff) Delay(attempt int, rng *rand.Rand) time.Duration {
	ceiling := b.Initial
	for i := 1; i < attempt && ceiling < b.Max; i++ {
		ceiling *= 2
	}
	if ceiling > b.Max {
		ceiling = b.Max
	}
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rng.Int63n(int64(ceiling) + 1))
}
