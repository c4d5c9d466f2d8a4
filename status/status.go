// Package status serves what the daemon is doing to `lbd status`, over a
// root-only unix socket, and renders it for people and scripts.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/lbdproject/lbd/dataplane/onlink"
)

// Snapshot is everything `lbd status` shows. It is JSON on the socket and
// the -o json output, so field names are part of lbd's interface.
type Snapshot struct {
	Version  string     `json:"version"`
	Time     time.Time  `json:"time"`
	Config   Config     `json:"config"`
	Sync     Sync       `json:"sync"`
	Services []Service  `json:"services"`
	Announce []Announce `json:"announce,omitempty"`
	Consul   *Consul    `json:"consul,omitempty"`
	// VRRP lists the failover instances; VRRPError says why they do not
	// run (their sockets cannot be opened).
	VRRP      []VRRP `json:"vrrp,omitempty"`
	VRRPError string `json:"vrrp_error,omitempty"`
	// IPVSSync lists the connection-sync daemons lbd keeps running, with
	// the kernel's defaults resolved; the last sync's error says whether
	// they run.
	IPVSSync []SyncDaemon `json:"ipvs_sync,omitempty"`
	// Conntrackd is the conntrackd lbd runs for the pair, if any.
	Conntrackd *Conntrackd `json:"conntrackd,omitempty"`
	// Problems are what lbd runs with but the admin should fix: each is
	// neither refused nor drained.
	Problems []Problem `json:"problems,omitempty"`
}

// Problem is one thing lbd found wrong at run time.
type Problem struct {
	// Kind names the problem for scripts: "dr_not_on_link" (a
	// direct-routing real server that no connected route of the director
	// covers).
	Kind       string `json:"kind"`
	Source     string `json:"source"` // file:line, or "consul NODE/ID"
	Service    string `json:"service"`
	RealServer string `json:"real_server"`
	Message    string `json:"message"`
}

// AddOffLink adds the direct-routing real servers found off every link of
// the director to the problems.
func (s *Snapshot) AddOffLink(ps []onlink.Problem) {
	for _, p := range ps {
		s.Problems = append(s.Problems, Problem{Kind: "dr_not_on_link", Source: p.Source.String(), Service: p.Service,
			RealServer: p.Addr.String(), Message: p.String()})
	}
}

// Conntrackd is the state of the conntrackd lbd supervises.
type Conntrackd struct {
	Running  bool      `json:"running"`
	PID      int       `json:"pid,omitempty"`
	Since    time.Time `json:"since,omitzero"`
	Restarts int       `json:"restarts"`
	LastExit string    `json:"last_exit,omitempty"`
	// Waiting says why it has not started (its link has no address yet).
	Waiting string `json:"waiting,omitempty"`
	// LastCommand is the latest transition's commands (commit, lead,
	// follow), when they ran and their error.
	LastCommand      string    `json:"last_command,omitempty"`
	LastCommandAt    time.Time `json:"last_command_at,omitzero"`
	LastCommandError string    `json:"last_command_error,omitempty"`
}

// SyncDaemon is one IPVS connection-sync daemon.
type SyncDaemon struct {
	Role      string `json:"role"`
	Interface string `json:"interface"`
	SyncID    int    `json:"sync_id"`
	Group     string `json:"group"`
	Port      int    `json:"port"`
	TTL       int    `json:"ttl"`
	MaxLen    int    `json:"max_len"`
}

// VRRP is one VRRP instance of a failover pair.
type VRRP struct {
	Name      string `json:"name"`
	Group     string `json:"group,omitempty"`
	Interface string `json:"interface"`
	Family    int    `json:"family"`
	VRID      int    `json:"vrid"`
	Version   int    `json:"version"`
	Priority  int    `json:"priority"`
	State     string `json:"state"`
	// Holding: backup or fault on the wire, still holding the addresses until the
	// new master has advertised twice.
	Holding bool      `json:"holding,omitempty"`
	Since   time.Time `json:"since,omitzero"`
	// Master is the master last heard (this box's own address when it is
	// master).
	Master         string            `json:"master,omitempty"`
	MasterPriority int               `json:"master_priority,omitempty"`
	Transitions    uint64            `json:"transitions"`
	Sent           uint64            `json:"adverts_sent"`
	Received       uint64            `json:"adverts_received"`
	SendErrors     uint64            `json:"send_errors"`
	Refused        map[string]uint64 `json:"adverts_refused,omitempty"`
}

// Consul is the state of the Consul source, when it is enabled.
type Consul struct {
	Connected     bool      `json:"connected"`
	Synced        bool      `json:"synced"`
	Error         string    `json:"error,omitempty"`
	LastContact   time.Time `json:"last_contact,omitzero"`
	LastError     string    `json:"last_error,omitempty"`
	LastErrorTime time.Time `json:"last_error_time,omitzero"`
	Queries       int       `json:"queries"`
	Tagged        int       `json:"tagged"`
	Requests      uint64    `json:"requests"`
	Errors        uint64    `json:"errors"`
	// Problems lists the registrations lbd refused and why.
	Problems []string `json:"problems,omitempty"`
	// Registrations are lbd's own VIPs registered into Consul.
	Registrations []Registration `json:"registrations,omitempty"`
}

// Registration is one VIP lbd registers into Consul.
type Registration struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Address string `json:"address"`
	Healthy bool   `json:"healthy"`
	Error   string `json:"error,omitempty"`
}

// Announce is one interface lbd answers ARP on.
type Announce struct {
	Interface string   `json:"interface"`
	MAC       string   `json:"mac"`
	VIPs      []string `json:"vips"`
	State     string   `json:"state"`
	Error     string   `json:"error,omitempty"`
}

// Config is the configuration in force and the latest load.
type Config struct {
	Path   string    `json:"path"`
	Files  []string  `json:"files"`
	Loaded time.Time `json:"loaded"`
	Hash   string    `json:"hash"`
	// Error is why the files on disk were rejected ("" when they load).
	Error     string    `json:"error,omitempty"`
	ErrorTime time.Time `json:"error_time,omitzero"`
}

// Sync is the latest sync of the kernel.
type Sync struct {
	Time     time.Time     `json:"time"`
	Reason   string        `json:"reason"`
	Duration time.Duration `json:"duration_ns"`
	Writes   int           `json:"writes"`
	Dumps    int           `json:"dumps"`
	Error    string        `json:"error,omitempty"`
	Held     string        `json:"held,omitempty"`
	Waiting  bool          `json:"waiting,omitempty"`
}

// Service is one IPVS virtual server.
type Service struct {
	Name          string `json:"name"`
	VirtualServer string `json:"virtual_server"` // 192.0.2.10:80/tcp
	// Forward is the service's forwarding method: nat, dr or tun (its
	// real servers may mix dr and tun).
	Forward     string       `json:"forward"`
	Scheduler   string       `json:"scheduler"`
	Persistence string       `json:"persistence,omitempty"`
	Source      string       `json:"source"`
	RealServers []RealServer `json:"real_servers"`
}

// RealServer is one destination of a virtual server.
type RealServer struct {
	Address string `json:"address"`
	Source  string `json:"source"`
	// Forward is the real server's forwarding method, when it is not NAT:
	// "dr", "tun ipip", "tun gue:6080 csum", "tun gre" (as ForwardText).
	Forward      string `json:"forward,omitempty"`
	ConfigWeight int    `json:"config_weight"`
	Weight       int    `json:"weight"` // desired, after health and quorum
	// KernelWeight is nil when the kernel does not hold the destination.
	KernelWeight *int `json:"kernel_weight"`
	// Health is nil for real servers that are not checked.
	Health *Health `json:"health,omitempty"`
	// ActiveConns and InactiveConns are the kernel's connection counts,
	// read when status was asked; nil when the kernel does not hold it.
	ActiveConns   *int `json:"active_conns,omitempty"`
	InactiveConns *int `json:"inactive_conns,omitempty"`
}

// Conns is a destination's connection counts in the kernel.
type Conns struct{ Active, Inactive int }

// AddConns fills the real servers' connection counts from a kernel read,
// by virtual server ("192.0.2.10:80/tcp") and real server address.
func (s *Snapshot) AddConns(conns map[string]map[string]Conns) {
	for i := range s.Services {
		svc := &s.Services[i]
		for j := range svc.RealServers {
			r := &svc.RealServers[j]
			if c, ok := conns[svc.VirtualServer][r.Address]; ok {
				r.ActiveConns, r.InactiveConns = &c.Active, &c.Inactive
			}
		}
	}
}

// Health is a real server's check state.
type Health struct {
	Check     string    `json:"check"`
	Target    string    `json:"target"`
	Healthy   bool      `json:"healthy"`
	Since     time.Time `json:"since"`
	LastCheck time.Time `json:"last_check,omitzero"`
	LastError string    `json:"last_error,omitempty"`
}

// Serve answers GET /status on a unix socket at path with snapshot() until
// ctx ends. The socket is created mode 0600 in a directory of mode 0700:
// status shows the whole configuration, so it is root's.
func Serve(ctx context.Context, path string, snapshot func() Snapshot) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("status socket directory: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing stale status socket: %w", err)
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("status socket: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(snapshot())
	})
	// Go's profiles, for whoever can open the root-only socket: e.g.
	// curl --unix-socket /run/lbd/lbd.sock http://lbd/debug/pprof/heap
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	// A CPU profile or trace takes as long as asked (?seconds=N): no write
	// deadline; reading the request stays bounded.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("status socket: %w", err)
	}
	_ = os.Remove(path)
	return nil
}

// ErrNotRunning says no daemon answers on the socket.
var ErrNotRunning = errors.New("lbd is not running")

// Fetch asks the daemon at the socket for its status.
func Fetch(ctx context.Context, path string) (Snapshot, error) {
	resp, err := get(ctx, path, "/status")
	if err != nil {
		return Snapshot{}, err
	}
	defer resp.Body.Close()
	var s Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return Snapshot{}, fmt.Errorf("reading status: %w", err)
	}
	return s, nil
}

// FetchProfile asks the daemon at the socket for one of Go's profiles by
// name ("heap", "allocs", "goroutine" ...), in pprof's format.
func FetchProfile(ctx context.Context, path, name string) ([]byte, error) {
	resp, err := get(ctx, path, "/debug/pprof/"+name)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// get makes one request to the daemon over its socket; a status other
// than 200 is an error.
func get(ctx context.Context, path, target string) (*http.Response, error) {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://lbd"+target, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w (nothing answers on %s)", ErrNotRunning, path)
		}
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("%s: %w (lbd status needs root)", path, err)
		}
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("%s: %s: %s", strings.TrimPrefix(target, "/"), resp.Status, b)
	}
	return resp, nil
}
