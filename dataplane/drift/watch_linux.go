package drift

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/dataplane/genl"
)

// tuning is what tests change of Watch: its namespace and delays.
type tuning struct {
	ns netns.NsHandle // netns.None(): the current one
	// settle gathers the address and link events of one change (a link
	// deleted with its 10,000 VIPs) before they are judged.
	settle time.Duration
	// quiet is the least time between two OnDrift calls.
	quiet time.Duration
	// retryMin and retryMax bound the wait before a failed subscription
	// is opened again.
	retryMin, retryMax time.Duration
	// subscribed, when set, is called each time a subscription is open.
	subscribed func(what string)
}

func defaultTuning() tuning {
	return tuning{ns: netns.None(), settle: 20 * time.Millisecond, quiet: 100 * time.Millisecond, retryMin: time.Second, retryMax: 30 * time.Second}
}

// recvBuf sizes each socket's receive buffer (memory the kernel uses only
// while notifications wait): lbd binding 10,000 VIPs at a cold start, or a
// foreign `nft flush ruleset` of a big firewall, sends one per address or
// rule. An overflow is not missed (ENOBUFS): it is reported as drift.
const recvBuf = 8 << 20

// Watch follows the kernel's notifications until ctx ends, calling
// o.OnDrift for drift of lbd's link, addresses and (with o.Tables) rules.
// A subscription that fails is opened again with a bounded backoff, and
// reported as drift, since changes may have gone unseen meanwhile.
func Watch(ctx context.Context, o Options) { watch(ctx, o, defaultTuning()) }

// watcher is one Watch.
type watcher struct {
	o   Options
	t   tuning
	rep *reporter
	log *slog.Logger
}

func watch(ctx context.Context, o Options, t tuning) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.OnDrift == nil {
		o.OnDrift = func(string) {}
	}
	w := &watcher{o: o, t: t, rep: newReporter(), log: o.Logger}
	var wg sync.WaitGroup
	wg.Go(func() { w.rep.run(ctx, t.quiet, o.OnDrift) })
	wg.Go(func() { w.routes(ctx) })
	if len(o.Tables) > 0 {
		wg.Go(func() { w.rules(ctx) })
	}
	wg.Wait()
}

// rules follows nftables transactions.
func (w *watcher) rules(ctx context.Context) {
	var n *nftRules
	w.follow(ctx, "nftables notifications", func() (*socket, error) {
		n = newNFTRules(w.o.Tables, w.o.Own)
		return subscribe(w.t.ns, unix.NETLINK_NETFILTER, nfnlgrpNFTables)
	}, func(m genl.Message) {
		if f, ok := n.message(m); ok {
			w.rep.add(f)
		}
	}, func() { n.reset() })
}

// routes follows lbd's link and its addresses, judging each window of
// events settle after its first one.
func (w *watcher) routes(ctx context.Context) {
	var mu sync.Mutex
	var r *routeEvents
	var pending *time.Timer
	judge := func() {
		mu.Lock()
		fs := r.verdict(w.o.Expect)
		pending = nil
		mu.Unlock()
		for _, f := range fs {
			w.rep.add(f)
		}
	}
	defer func() {
		mu.Lock()
		if pending != nil {
			pending.Stop()
		}
		mu.Unlock()
	}()
	w.follow(ctx, "address notifications", func() (*socket, error) {
		s, err := subscribe(w.t.ns, unix.NETLINK_ROUTE, rtnlgrpLink, rtnlgrpIPv4Ifaddr, rtnlgrpIPv6Ifaddr)
		if err != nil {
			return nil, err
		}
		// Looked up once subscribed, so no change falls in between.
		index, err := linkIndex(w.t.ns, w.o.Link)
		if err != nil {
			s.close()
			return nil, err
		}
		mu.Lock()
		r = newRouteEvents(w.o.Link, index)
		mu.Unlock()
		return s, nil
	}, func(m genl.Message) {
		mu.Lock()
		defer mu.Unlock()
		if r.message(m) && pending == nil {
			pending = time.AfterFunc(w.t.settle, judge)
		}
	}, nil)
}

// linkIndex returns the index of the link named name, 0 if there is none.
func linkIndex(ns netns.NsHandle, name string) (int32, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return 0, fmt.Errorf("opening rtnetlink: %w", err)
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("looking up %s: %w", name, err)
	}
	return int32(l.Attrs().Index), nil
}

// follow keeps one subscription open until ctx ends, handing every
// message to handle. lost is called (when set) after the kernel dropped
// notifications. A subscription opened again after a failure reports
// drift: what changed in between is unknown.
func (w *watcher) follow(ctx context.Context, what string, open func() (*socket, error), handle func(genl.Message), lost func()) {
	backoff := w.t.retryMin
	failed := false
	for ctx.Err() == nil {
		s, err := open()
		if err == nil {
			if failed {
				w.rep.add(finding{kind: missed, source: what + " resubscribed after a failure"})
			}
			if w.t.subscribed != nil {
				w.t.subscribed(what)
			}
			var delivered bool
			delivered, err = w.read(ctx, s, what, handle, lost)
			s.close()
			if ctx.Err() != nil {
				return
			}
			if delivered {
				backoff = w.t.retryMin
			}
		}
		failed = true
		w.log.Warn("drift watcher: subscription failed; retrying", "what", what, "error", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, w.t.retryMax)
	}
}

// read hands the messages of s to handle until s fails or ctx ends.
func (w *watcher) read(ctx context.Context, s *socket, what string, handle func(genl.Message), lost func()) (delivered bool, err error) {
	stop := context.AfterFunc(ctx, s.close)
	defer stop()
	for {
		b, err := s.recv()
		switch {
		case errors.Is(err, unix.ENOBUFS):
			if lost != nil {
				lost()
			}
			w.rep.add(finding{kind: missed, source: what + " lost (receive buffer full)"})
			continue
		case err != nil:
			return delivered, err
		case b == nil: // not from the kernel
			continue
		}
		delivered = true
		for m := range genl.Messages(b) {
			handle(m)
		}
	}
}

// socket is a netlink socket subscribed to multicast groups, read through
// Go's poller so that closing it ends a pending read.
type socket struct {
	once sync.Once
	f    *os.File
	rc   syscall.RawConn
	buf  []byte
}

// subscribe opens a socket of protocol in ns (netns.None(): the current
// namespace) joined to groups.
func subscribe(ns netns.NsHandle, protocol int, groups ...uint) (*socket, error) {
	s, err := nl.SubscribeAt(ns, netns.None(), protocol, groups...)
	if err != nil {
		return nil, fmt.Errorf("subscribing to netlink protocol %d groups %v: %w", protocol, groups, err)
	}
	defer s.Close()
	// A duplicate of vishvananda's descriptor (non-blocking, bound), read
	// with a buffer of our own.
	fd, err := unix.FcntlInt(uintptr(s.GetFd()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicating a netlink socket: %w", err)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, recvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, recvBuf)
	}
	f := os.NewFile(uintptr(fd), "netlink")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	return &socket{f: f, rc: rc, buf: make([]byte, 64<<10)}, nil
}

func (s *socket) close() { s.once.Do(func() { s.f.Close() }) }

// recv returns one datagram, nil for one not sent by the kernel. ENOBUFS
// says notifications were dropped; the socket stays usable.
func (s *socket) recv() ([]byte, error) {
	var n int
	var from unix.Sockaddr
	var rerr error
	err := s.rc.Read(func(fd uintptr) bool {
		for {
			n, from, rerr = unix.Recvfrom(int(fd), s.buf, 0)
			if rerr != unix.EINTR {
				return rerr != unix.EAGAIN
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, rerr
	}
	if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
		return nil, nil
	}
	return s.buf[:n], nil
}
