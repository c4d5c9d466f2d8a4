// Package registrar registers lbd's virtual services into the local Consul
// agent, so that clients find VIPs through Consul (DNS, health API) like any
// other service, with a health that follows lbd's real servers.
//
// Each Registration becomes an agent service with one TTL check. The check
// is passing or critical as Registration.Healthy says, with Notes as its
// output; lbd refreshes it every TTL/3, so the check turns critical on its
// own within TTL when lbd stops refreshing (crashed, hung, or stopped).
// Registrations are never removed at shutdown: lbd may restart and take its
// VIPs back, and a stopped lbd shows as critical. Every registration carries
// the meta lbd-managed=true: lbd owns every such registration on its agent,
// removes those it no longer wants (at start-up: the previous run's), and
// registers again what the agent forgot (an agent restarted without its
// data directory).
package registrar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"golang.org/x/time/rate"

	"github.com/lbdproject/lbd/discovery/consul"
	"github.com/lbdproject/lbd/discovery/consul/internal/backoff"
)

// ManagedMeta is the service meta key, set to "true", that marks lbd's
// registrations.
const ManagedMeta = "lbd-managed"

// Defaults of Options.
const (
	DefaultTTL            = 30 * time.Second
	DefaultRequestTimeout = 10 * time.Second
	DefaultMinRetry       = time.Second
	DefaultMaxRetry       = 30 * time.Second
	DefaultMinInterval    = 200 * time.Millisecond
)

// Registration is one service lbd wants registered.
type Registration struct {
	// ID is the agent service ID, unique on the agent; Name the Consul
	// service name. Several registrations may share a name.
	ID, Name string
	// Address and Port are where clients reach the service (a VIP). A zero
	// Address means the agent's node address.
	Address netip.Addr
	Port    uint16
	Tags    []string
	// Meta is the service meta; ManagedMeta is added.
	Meta map[string]string
	// Healthy makes the TTL check passing, else critical.
	Healthy bool
	// Notes is the check's output, such as "3 of 3 real servers healthy".
	Notes string
}

// Options configure a Registrar. Only Client is required.
type Options struct {
	Client *consul.Client
	// Logger receives one line per registration added, changed or removed
	// and per change of state (requests start or stop failing); nil means
	// slog.Default().
	Logger *slog.Logger
	// TTL is the check's time to live; 0 means DefaultTTL. It is
	// refreshed every TTL/3.
	TTL time.Duration
	// RequestTimeout bounds each request to the agent; 0 means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MinRetry and MaxRetry bound the jittered backoff after errors; 0
	// means DefaultMinRetry and DefaultMaxRetry.
	MinRetry, MaxRetry time.Duration
	// MinInterval rate-limits the syncs that Set asks for: after a burst of
	// three, at most one per MinInterval. 0 means DefaultMinInterval.
	MinInterval time.Duration
}

// Status is the Registrar's state for `lbd status` and metrics.
type Status struct {
	// Desired is the number of registrations Set asked for; Registered
	// the number the agent holds as asked.
	Desired, Registered int
	// Err describes the latest sync's failures, "" when it succeeded.
	Err string
	// LastSync is when a sync last succeeded.
	LastSync time.Time
	// LastError is the latest failure, kept after it was resolved, and
	// LastErrorTime when it happened.
	LastError     string
	LastErrorTime time.Time
}

// RegistrationStatus is one desired registration and how it stands.
type RegistrationStatus struct {
	Registration
	// Registered reports that the agent holds the registration as asked.
	Registered bool
	// Error is why the latest attempt to register it or refresh its
	// check failed, or "".
	Error string
}

// agentAPI is what the Registrar uses of the agent; *api.Agent has it.
type agentAPI interface {
	ServiceRegisterOpts(*api.AgentServiceRegistration, api.ServiceRegisterOpts) error
	ServiceDeregisterOpts(string, *api.QueryOptions) error
	ServicesWithFilterOpts(string, *api.QueryOptions) (map[string]*api.AgentService, error)
	UpdateTTLOpts(checkID, output, status string, q *api.QueryOptions) error
}

// Registrar keeps the agent's lbd-managed registrations as Set asks. Create
// it with New, give it registrations with Set and start it with Run.
type Registrar struct {
	opts    Options
	log     *slog.Logger
	kick    chan struct{} // 1-slot: Set changed the desired registrations
	started atomic.Bool

	mu      sync.Mutex
	desired map[string]Registration // nil until the first Set
	regs    map[string]RegistrationStatus
	status  Status
}

// New returns a Registrar for opts. It does nothing until Run.
func New(opts Options) *Registrar {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.MinRetry <= 0 {
		opts.MinRetry = DefaultMinRetry
	}
	if opts.MaxRetry <= 0 {
		opts.MaxRetry = DefaultMaxRetry
	}
	opts.MaxRetry = max(opts.MaxRetry, opts.MinRetry)
	if opts.MinInterval <= 0 {
		opts.MinInterval = DefaultMinInterval
	}
	return &Registrar{
		opts: opts,
		log:  opts.Logger,
		kick: make(chan struct{}, 1),
		regs: map[string]RegistrationStatus{},
	}
}

// Set replaces the desired registrations; call it with the whole set
// whenever it may have changed. It is cheap and never blocks: a set equal
// to the current one does nothing, another is applied at once by Run.
// Registrations without an ID or name are ignored; of several with one ID,
// the last wins.
func (r *Registrar) Set(regs []Registration) {
	m := make(map[string]Registration, len(regs))
	for _, reg := range regs {
		if reg.ID == "" || reg.Name == "" {
			continue
		}
		reg.Tags = slices.Clone(reg.Tags)
		reg.Meta = maps.Clone(reg.Meta)
		m[reg.ID] = reg
	}
	r.mu.Lock()
	same := r.desired != nil && reflect.DeepEqual(r.desired, m)
	if !same {
		r.desired = m
	}
	r.mu.Unlock()
	if same {
		return
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Status returns the Registrar's state.
func (r *Registrar) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// Registrations returns the desired registrations and how each stands,
// sorted by ID.
func (r *Registrar) Registrations() []RegistrationStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RegistrationStatus, 0, len(r.regs))
	for _, id := range slices.Sorted(maps.Keys(r.regs)) {
		out = append(out, r.regs[id])
	}
	return out
}

// Run keeps the agent's registrations as Set asks until ctx is done, then
// returns nil, leaving them in place. Nothing is registered or removed
// before the first Set, so that an lbd still computing its desired state
// does not remove the previous run's registrations. Run may be called
// once. Errors do not end it: they show in Status while it retries.
func (r *Registrar) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("registrar: Run called twice")
	}
	if r.opts.Client == nil {
		return errors.New("registrar: Options.Client is nil")
	}
	s := &syncer{Registrar: r, agent: r.opts.Client.Agent(), registered: map[string]Registration{}}
	lim := rate.NewLimiter(rate.Every(r.opts.MinInterval), 3)
	bo := backoff.New(r.opts.MinRetry, r.opts.MaxRetry)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	timer.Stop()

	for !r.hasDesired() {
		select {
		case <-ctx.Done():
			return nil
		case <-r.kick:
		}
	}
	for {
		err := s.sync(ctx)
		if ctx.Err() != nil {
			return nil
		}
		next := r.opts.TTL / 3
		if err != nil {
			next = min(bo.Next(), next)
		} else {
			bo.Reset()
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-r.kick:
			timer.Stop()
			if lim.Wait(ctx) != nil {
				return nil
			}
		}
	}
}

func (r *Registrar) hasDesired() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.desired != nil
}

// syncer is the state of one Run; only Run's goroutine touches it.
type syncer struct {
	*Registrar
	agent agentAPI
	// registered holds what this run registered, to log changes and to
	// notice registrations the agent forgot.
	registered map[string]Registration
	failing    bool
}

// sync makes one round: it reads the agent's lbd-managed registrations,
// registers what is missing or differs, refreshes every check, and then
// removes what is no longer desired (add before delete: a VIP moving
// between registrations is never absent).
func (s *syncer) sync(ctx context.Context) error {
	s.mu.Lock()
	desired := s.desired
	s.mu.Unlock()

	regs := make(map[string]RegistrationStatus, len(desired))
	var errs []error
	actual, err := s.managed(ctx)
	if err != nil {
		errs = append(errs, err)
		for id, d := range desired {
			regs[id] = RegistrationStatus{Registration: d, Error: err.Error()}
		}
		return s.finish(regs, errs)
	}

	for _, id := range slices.Sorted(maps.Keys(desired)) {
		d := desired[id]
		err := s.ensure(ctx, d, actual[id])
		st := RegistrationStatus{Registration: d, Registered: err == nil}
		if err != nil {
			st.Error = err.Error()
			errs = append(errs, err)
		}
		regs[id] = st
	}
	for _, id := range slices.Sorted(maps.Keys(actual)) {
		if _, ok := desired[id]; ok {
			continue
		}
		if err := s.deregister(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, ours := s.registered[id]; ours {
			s.log.Info("removed Consul registration", "id", id)
		} else {
			s.log.Info("removed stale Consul registration", "id", id, "name", actual[id].Service)
		}
		delete(s.registered, id)
	}
	for id := range s.registered {
		if _, ok := desired[id]; !ok {
			delete(s.registered, id) // the agent had lost it already
		}
	}
	return s.finish(regs, errs)
}

// finish records a round's outcome in Status and logs changes of state.
func (s *syncer) finish(regs map[string]RegistrationStatus, errs []error) error {
	err := errors.Join(errs...)
	now := time.Now()
	registered := 0
	for _, st := range regs {
		if st.Registered {
			registered++
		}
	}
	s.mu.Lock()
	s.regs = regs
	s.status.Desired, s.status.Registered = len(regs), registered
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), "\n", "; ")
		s.status.Err, s.status.LastError, s.status.LastErrorTime = msg, msg, now
	} else {
		s.status.Err, s.status.LastSync = "", now
	}
	s.mu.Unlock()

	switch {
	case err != nil && !s.failing:
		s.log.Warn("Consul registrations failing; retrying", "error", errs[0], "failing", len(errs))
	case err == nil && s.failing:
		s.log.Info("Consul registrations succeeding again", "registrations", len(regs))
	}
	s.failing = err != nil
	return err
}

// managed returns the agent's lbd-managed registrations by ID.
func (s *syncer) managed(ctx context.Context) (map[string]*api.AgentService, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	filter := fmt.Sprintf("Meta[%q] == %q", ManagedMeta, "true")
	svcs, err := s.agent.ServicesWithFilterOpts(filter, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("listing the agent's lbd-managed services: %w", err)
	}
	return svcs, nil
}

// ensure registers d if the agent lacks it or holds it differently, and
// sets its check.
func (s *syncer) ensure(ctx context.Context, d Registration, actual *api.AgentService) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	prev, known := s.registered[d.ID]
	if actual == nil || !matches(actual, d) {
		reg := &api.AgentServiceRegistration{
			ID:      d.ID,
			Name:    d.Name,
			Port:    int(d.Port),
			Tags:    d.Tags,
			Meta:    metaOf(d),
			Address: addressOf(d),
			Check: &api.AgentServiceCheck{
				CheckID: checkID(d.ID),
				Name:    "lbd virtual service health",
				Notes:   "passing while lbd serves this VIP with enough healthy real servers; refreshed by lbd every TTL/3",
				TTL:     s.opts.TTL.String(),
				Status:  checkStatus(d.Healthy),
			},
		}
		opts := api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx)
		if err := s.agent.ServiceRegisterOpts(reg, opts); err != nil {
			return fmt.Errorf("registering %s (%s): %w", d.ID, d.Name, err)
		}
		switch {
		case actual == nil && known:
			s.log.Info("registered again in Consul: the agent had forgotten it", "id", d.ID, "name", d.Name)
		case actual == nil:
			s.log.Info("registered in Consul", "id", d.ID, "name", d.Name, "address", addressOf(d), "port", d.Port, "healthy", d.Healthy)
		default:
			s.log.Info("updated Consul registration", "id", d.ID, "name", d.Name, "address", addressOf(d), "port", d.Port)
		}
	}
	// Also on every round: this is what keeps the TTL from expiring.
	if err := s.agent.UpdateTTLOpts(checkID(d.ID), d.Notes, checkStatus(d.Healthy), (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("setting the check of %s: %w", d.ID, err)
	}
	if known && prev.Healthy != d.Healthy {
		s.log.Info("Consul registration health changed", "id", d.ID, "healthy", d.Healthy, "notes", d.Notes)
	}
	s.registered[d.ID] = d
	return nil
}

func (s *syncer) deregister(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer cancel()
	if err := s.agent.ServiceDeregisterOpts(id, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("deregistering %s: %w", id, err)
	}
	return nil
}

// matches reports whether the agent holds d as asked.
func matches(a *api.AgentService, d Registration) bool {
	return a.Service == d.Name &&
		a.Address == addressOf(d) &&
		a.Port == int(d.Port) &&
		slices.Equal(a.Tags, d.Tags) &&
		maps.Equal(a.Meta, metaOf(d))
}

func metaOf(d Registration) map[string]string {
	m := maps.Clone(d.Meta)
	if m == nil {
		m = map[string]string{}
	}
	m[ManagedMeta] = "true"
	return m
}

func addressOf(d Registration) string {
	if !d.Address.IsValid() {
		return ""
	}
	return d.Address.String()
}

func checkID(id string) string { return "lbd:" + id }

func checkStatus(healthy bool) string {
	if healthy {
		return api.HealthPassing
	}
	return api.HealthCritical
}
