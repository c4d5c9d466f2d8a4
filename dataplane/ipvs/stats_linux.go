package ipvs

import (
	"fmt"
	"sync"

	"github.com/lbdproject/lbd/lvs"
	mobyipvs "github.com/moby/ipvs"
)

// Counters are a virtual server's cumulative kernel counters.
type Counters struct {
	Connections, PacketsIn, PacketsOut, BytesIn, BytesOut uint64
}

// StatsReader reads virtual servers' counters through a netlink socket of
// its own, so that metrics scrapes never share (or wait on) the socket the
// syncs write through.
type StatsReader struct {
	mu sync.Mutex // one request at a time on the handle
	h  *mobyipvs.Handle
}

// OpenStats opens a StatsReader in the current network namespace.
func OpenStats() (*StatsReader, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	h, err := mobyipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("opening IPVS netlink socket: %w", err)
	}
	return &StatsReader{h: h}, nil
}

// Close releases the netlink socket.
func (r *StatsReader) Close() { r.h.Close() }

// Read returns the counters of every virtual server: one dump.
func (r *StatsReader) Read() (map[lvs.Key]Counters, error) {
	r.mu.Lock()
	svcs, err := r.h.GetServices()
	r.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("reading IPVS counters: %w", err)
	}
	out := make(map[lvs.Key]Counters, len(svcs))
	for _, s := range svcs {
		if s.FWMark != 0 {
			continue
		}
		key, err := keyOf(s)
		if err != nil {
			return nil, err
		}
		st := s.Stats
		out[key] = Counters{Connections: uint64(st.Connections), PacketsIn: uint64(st.PacketsIn), PacketsOut: uint64(st.PacketsOut), BytesIn: st.BytesIn, BytesOut: st.BytesOut}
	}
	return out, nil
}
