package consul

import (
	"context"
	"errors"
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
	// index is the answer's X-Consul-Index; consistent, whether the read
	// was (see loop.backwards).
	index      uint64
	consistent bool
}

// fetchAll reads keys, at most MaxConcurrency at a time, then asks Consul
// whether the empty answers among them were the token's doing. Reads in
// the datacenters consistent names are consistent (see dcState.settled).
//
// A read that cannot reach the agent at all (no answer, as opposed to an
// error status) ends the refresh: the others would wait for the same
// timeout one after the other, and all are retried after a backoff.
func (l *loop) fetchAll(ctx context.Context, keys []fetchKey, consistent map[string]bool) []fetchResult {
	res := make([]fetchResult, len(keys))
	fctx, abort := context.WithCancel(ctx)
	defer abort()
	var (
		once  sync.Once
		cause error // why the refresh was aborted
	)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(l.opts.MaxConcurrency, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if fctx.Err() == nil {
					res[i] = l.fetch(fctx, keys[i], consistent[keys[i].dc])
				}
				if err := res[i].err; err != nil && !isAnswered(err) && fctx.Err() == nil {
					once.Do(func() { cause = err; abort() })
				}
			}
		}()
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	if cause != nil {
		// Reads done before the abort stand; the others did not happen.
		for i, r := range res {
			if r.key == (fetchKey{}) || r.err != nil && r.err != cause {
				res[i] = fetchResult{key: keys[i], err: fmt.Errorf("reading %s: not done: %w", keys[i], cause)}
			}
		}
	}
	l.checkEmpty(ctx, res)
	return res
}

// isStatusError reports whether err is Consul's answer (an HTTP error
// status) rather than no answer at all.
func isStatusError(err error) bool {
	var se api.StatusError
	return errors.As(err, &se)
}

func (l *loop) fetch(ctx context.Context, k fetchKey, consistent bool) (res fetchResult) {
	var panicked error
	defer func() {
		if panicked != nil {
			res = fetchResult{key: k, err: panicked}
		}
	}()
	defer l.recoverAnswer(fmt.Sprintf("reading %s", k), &panicked)
	ctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	q := (&api.QueryOptions{Datacenter: k.dc, RequireConsistent: consistent}).WithContext(ctx)
	// All health states: PassingOnly is applied by the loop, which needs
	// the nodes of unhealthy instances too.
	entries, meta, err := l.opts.Client.Health().ServiceMultipleTags(k.service, k.tagList(), false, q)
	if ctx.Err() != nil && err != nil {
		return fetchResult{key: k, err: fmt.Errorf("reading %s: %w", k, ctx.Err())}
	}
	l.noteRequest(err)
	if err != nil {
		return fetchResult{key: k, err: fmt.Errorf("reading %s: %w", k, unwrapURLError(err))}
	}
	r := fetchResult{
		key:        k,
		empty:      len(entries) == 0,
		filtered:   meta.ResultsFilteredByACLs,
		instances:  make([]Instance, 0, len(entries)),
		index:      meta.LastIndex,
		consistent: consistent,
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
