package netnsrun

import (
	"errors"
	"strings"
	"testing"
)

func TestDo(t *testing.T) {
	for _, tt := range []struct {
		name, path, want string
	}{
		{"here", "", "ran"},
		{"missing namespace", "/nonexistent/netns", "opening network namespace /nonexistent/netns"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := Do(tt.path, func() error { return errors.New("ran") })
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}
