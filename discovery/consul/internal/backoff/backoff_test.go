package backoff

import (
	"testing"
	"time"
)

func TestNextGrowsWithinJitterAndCaps(t *testing.T) {
	b := New(time.Second, 30*time.Second)
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30, 30}
	for round := 0; round < 50; round++ {
		b.Reset()
		for i, w := range want {
			full := w * time.Second
			got := b.Next()
			if got < full/2 || got > full {
				t.Fatalf("round %d, retry %d: delay %v outside [%v, %v]", round, i, got, full/2, full)
			}
		}
	}
}

func TestResetStartsAgainAtMin(t *testing.T) {
	b := New(time.Second, 30*time.Second)
	for range 10 {
		b.Next()
	}
	b.Reset()
	if got := b.Next(); got > time.Second {
		t.Fatalf("first delay after Reset = %v, want at most 1s", got)
	}
}
