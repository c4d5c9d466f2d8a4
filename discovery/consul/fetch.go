package consul

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/consul/api"
)

// fetchResult is one /v1/health/service read.
type fetchResult struct {
	key       fetchKey
	err       error
	instances []Instance // all health states, sorted
	empty     bool       // Consul's answer had no entries
	filtered  bool       // ACLs removed entries from the answer
	problems  []string   // entries that could not be used
}

// fetchAll reads keys, at most MaxConcurrency at a time, then asks Consul
// whether the empty answers among them were the token's doing.
func (l *loop) fetchAll(ctx context.Context, keys []fetchKey) []fetchResult {
	res := make([]fetchResult, len(keys))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(l.opts.MaxConcurrency, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res[i] = l.fetch(ctx, keys[i])
			}
		}()
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	l.checkEmpty(ctx, res)
	return res
}

func (l *loop) fetch(ctx context.Context, k fetchKey) fetchResult {
	ctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	q := (&api.QueryOptions{Datacenter: k.dc}).WithContext(ctx)
	// All health states: PassingOnly is applied by the loop, which needs
	// the nodes of unhealthy instances too.
	entries, meta, err := l.opts.Client.Health().ServiceMultipleTags(k.service, k.tagList(), false, q)
	l.noteRequest(err)
	if err != nil {
		return fetchResult{key: k, err: fmt.Errorf("reading %s: %w", k, unwrapURLError(err))}
	}
	r := fetchResult{
		key:       k,
		empty:     len(entries) == 0,
		filtered:  meta.ResultsFilteredByACLs,
		instances: make([]Instance, 0, len(entries)),
	}
	for _, e := range entries {
		in, err := instanceOf(e)
		if err != nil {
			r.problems = append(r.problems, fmt.Sprintf("%s: %v", k, err))
			continue
		}
		r.instances = append(r.instances, in)
	}
	sortInstances(r.instances)
	return r
}

// checkEmpty marks as filtered the empty answers for services the token
// may not read. Consul flags filtered answers for real tokens only; for the
// anonymous token an unreadable service looks like one without instances.
// One request per datacenter, only when some answer was empty.
func (l *loop) checkEmpty(ctx context.Context, res []fetchResult) {
	byDC := map[string][]int{}
	for i, r := range res {
		if r.err == nil && r.empty && !r.filtered {
			byDC[r.key.dc] = append(byDC[r.key.dc], i)
		}
	}
	for dc, idx := range byDC {
		names := make([]string, 0, len(idx))
		seen := map[string]bool{}
		for _, i := range idx {
			if s := res[i].key.service; !seen[s] {
				seen[s] = true
				names = append(names, s)
			}
		}
		rctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
		allowed, err := l.opts.Client.canRead(rctx, dc, names)
		cancel()
		l.noteRequest(err)
		for _, i := range idx {
			switch {
			case err != nil:
				res[i] = fetchResult{key: res[i].key, err: fmt.Errorf("reading %s: empty answer, and asking whether ACLs hid it failed: %w", res[i].key, err)}
			case !allowed[res[i].key.service]:
				res[i].filtered = true
			}
		}
	}
}
