package iptables

import "testing"

func TestChildrenKeepsTheLatest(t *testing.T) {
	var c Children
	for pid := 1000; pid < 1000+childrenKept+6; pid++ {
		c.add(pid)
	}
	for _, tt := range []struct {
		pid  int
		want bool
	}{
		{0, false}, {-1, false},
		{1000, false}, {1005, false}, // forgotten: 64 newer ones came after
		{1006, true}, {1000 + childrenKept + 5, true},
		{1000 + childrenKept + 6, false}, // never started
	} {
		if got := c.Started(tt.pid); got != tt.want {
			t.Errorf("Started(%d) = %v, want %v", tt.pid, got, tt.want)
		}
	}
	var empty Children
	if empty.Started(0) || empty.Started(1) {
		t.Error("an empty record claims a process")
	}
}
