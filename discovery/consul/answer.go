package consul

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strings"
)

// Bounds on one answer of Consul's, so that a broken or hostile agent (or
// a registration storm) cannot make lbd read and decode without end.
const (
	// MaxAnswer bounds every answer but the checks trigger's: one service's
	// instances with their nodes and checks take a few KiB each, and lbd
	// uses at most 1024 of them per service.
	MaxAnswer = 16 << 20
	// MaxChecksAnswer bounds /v1/health/state/any, which lists every check
	// of the datacenter with its output (up to 4 KiB each by default):
	// 64 MiB is about 15,000 checks with full outputs.
	MaxChecksAnswer = 64 << 20
	// maxTagged bounds the services carrying the virtual-service tag that
	// the Watcher reads: each is one request per refresh, and the merge
	// takes at most 4096 of them.
	maxTagged = 8192
)

// errAnswerTooLarge is the error of reading an answer past its bound.
var errAnswerTooLarge = errors.New("answer from Consul larger than lbd reads")

// capTransport bounds the answers of rt's requests.
type capTransport struct {
	rt http.RoundTripper
	// max is the bound of answers to path; all is that of the others.
	max func(path string) int64
}

// answerCap returns the bound of the answers to path.
func answerCap(maxAll, maxChecks int64) func(string) int64 {
	return func(path string) int64 {
		if strings.HasPrefix(path, "/v1/health/state/") {
			return maxChecks
		}
		return maxAll
	}
}

func (t capTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	limit := t.max(req.URL.Path)
	if resp.ContentLength > limit {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %d bytes, more than %s", errAnswerTooLarge, resp.ContentLength, size(limit))
	}
	resp.Body = &capBody{rc: resp.Body, left: limit, limit: limit}
	return resp, nil
}

// capBody fails reads past limit bytes. consul/api decodes from it, and
// drains it before closing: both stop at the bound.
type capBody struct {
	rc          io.ReadCloser
	left, limit int64
}

func (b *capBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// An answer of exactly limit bytes is fine: look for one more.
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 {
			return 0, err
		}
		return 0, fmt.Errorf("%w: more than %s", errAnswerTooLarge, size(b.limit))
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *capBody) Close() error { return b.rc.Close() }

func size(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// errDecodePanic marks the error of a panic on Consul's answer.
var errDecodePanic = errors.New("lbd failed on Consul's answer")

// recoverAnswer turns a panic on what of Consul's answer (a bug that some
// registration triggers) into an error in *err, so that the answer is
// treated as unusable and retried instead of crashing lbd into a restart
// loop on the same data. It must be deferred.
func (w *Watcher) recoverAnswer(what string, err *error) {
	p := recover()
	if p == nil {
		return
	}
	w.log.Error("panic on Consul's answer; ignoring it, please report this bug", "answer", what, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	*err = fmt.Errorf("%s: %w (panic: %.200s); it is ignored", what, errDecodePanic, fmt.Sprint(p))
}

// isAnswered reports whether err comes with Consul's answer (an HTTP error
// status, an answer too large or one lbd failed on) rather than no answer
// at all: the others are still worth asking.
func isAnswered(err error) bool {
	return isStatusError(err) || errors.Is(err, errAnswerTooLarge) || errors.Is(err, errDecodePanic)
}
