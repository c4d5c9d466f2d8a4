package errcap

import (
	"fmt"
	"testing"
)

func TestList(t *testing.T) {
	tests := []struct {
		n    int
		want string
	}{
		{0, ""},
		{2, "e0\ne1"},
		{8, "e0\ne1\ne2\ne3\ne4\nand 3 more entries that failed"},
	}
	for _, tt := range tests {
		l := List{What: "entries"}
		for i := range tt.n {
			l.Add(fmt.Errorf("e%d", i))
		}
		err := l.Err()
		if got := fmt.Sprint(err); (err == nil) != (tt.want == "") || err != nil && got != tt.want {
			t.Errorf("%d errors: %q; want %q", tt.n, got, tt.want)
		}
	}
}
