package drift

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

func TestReporterReportsAtOnceThenGathers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var got []string
		r := newReporter()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			r.run(ctx, 100*time.Millisecond, func(what string) { got = append(got, time.Since(start).String()+" "+what) })
			close(done)
		}()
		gone := finding{kind: linkGone, link: "lbd0"}
		down := finding{kind: linkDown, link: "lbd0"}
		r.add(gone)
		synctest.Wait()
		r.add(down) // within quiet of the first report: gathered
		r.add(gone)
		time.Sleep(30 * time.Millisecond)
		r.add(down)
		time.Sleep(time.Second)
		r.add(gone) // long after: at once again
		synctest.Wait()
		cancel()
		<-done
		want := []string{
			"0s addresses: link lbd0 deleted",
			"100ms addresses: link lbd0 set down; and 2 more",
			"1.03s addresses: link lbd0 deleted",
		}
		if !slices.Equal(got, want) {
			t.Errorf("reports\n  %q\nwant\n  %q", got, want)
		}
	})
}

func TestReporterAddNeverBlocks(t *testing.T) {
	r := newReporter() // nobody runs it
	for range 10000 {
		r.add(finding{kind: linkDown, link: "lbd0"})
	}
	if got := r.take(); got != "addresses: link lbd0 set down; and 9999 more" {
		t.Errorf("take = %q", got)
	}
}
