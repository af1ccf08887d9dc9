package duplex

import (
	"math/rand"
	"testing"
	"time"
)

func TestBackoffGrowsToItsCapWithJitter(t *testing.T) {
	b := Backoff{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond, MaxAttempts: 10}
	rng := rand.New(rand.NewSource(1))
	ceilings := []time.Duration{10, 20, 40, 80, 80, 80}
	for i, ceiling := range ceilings {
		attempt := i + 1
		seen := map[time.Duration]bool{}
		for n := 0; n < 200; n++ {
			d := b.Delay(attempt, rng)
			if d < 0 || d > ceiling*time.Millisecond {
				t.Fatalf("attempt %d: delay %v outside [0, %v ms]", attempt, d, ceiling)
			}
			seen[d] = true
		}
		if len(seen) < 50 {
			t.Fatalf("attempt %d: only %d distinct delays in 200: no jitter", attempt, len(seen))
		}
	}
}
