package consul

import (
	"cmp"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"
)

// Aggregated health states of an Instance, from best to worst.
const (
	Passing  = api.HealthPassing
	Warning  = api.HealthWarning
	Critical = api.HealthCritical
)

// Query names what one lbd service follows: the instances of a Consul
// service.
type Query struct {
	// Service is the Consul service's name.
	Service string
	// Tags, when set, keep only instances that carry all of them.
	Tags []string
	// Datacenter is where the service lives; "" means Options.Datacenter.
	Datacenter string
	// PassingOnly keeps only instances whose checks all pass (Status
	// "passing"); otherwise all instances come with their Status.
	PassingOnly bool
}

// Key names the query in Snapshot.Services. It is stable: the order and
// repetition of tags do not matter, and equal queries have equal keys.
// It reads like a URL: "web", "web?dc=dc2&passing=1&tag=a&tag=b".
func (q Query) Key() string {
	v := url.Values{}
	if q.Datacenter != "" {
		v.Set("dc", q.Datacenter)
	}
	if q.PassingOnly {
		v.Set("passing", "1")
	}
	for _, t := range normTags(q.Tags) {
		v.Add("tag", t)
	}
	k := url.PathEscape(q.Service)
	if len(v) > 0 {
		k += "?" + v.Encode()
	}
	return k
}

// normTags returns tags sorted and without repetitions, as a new slice.
func normTags(tags []string) []string {
	if len(tags) == 0 {
		return nil
	}
	t := slices.Clone(tags)
	slices.Sort(t)
	return slices.Compact(t)
}

// Instance is one registered instance of a Consul service.
type Instance struct {
	// ID is the instance's service ID, unique on its node.
	ID string
	// Node is the name of the node the instance is registered on.
	Node string
	// Address is the service's address, or else its node's.
	Address netip.Addr
	// Port is the registered port; 0 when the registration has none.
	Port uint16
	Tags []string
	Meta map[string]string
	// Status is the worst of the instance's service checks and its node's
	// checks: Passing, Warning or Critical. Maintenance
	// mode counts as critical; an instance without checks passes.
	Status string
	// CreateIndex is the Raft index of the registration: lower is older,
	// for callers that settle conflicts in favour of the oldest.
	CreateIndex uint64
}

// instanceOf converts one entry of /v1/health/service.
func instanceOf(e *api.ServiceEntry) (Instance, error) {
	if e == nil || e.Service == nil || e.Node == nil {
		return Instance{}, fmt.Errorf("incomplete entry in Consul's answer")
	}
	s := e.Service
	raw, from := s.Address, "service"
	if raw == "" {
		raw, from = e.Node.Address, "node"
	}
	addr, err := netip.ParseAddr(raw)
	if err != nil {
		return Instance{}, fmt.Errorf("instance %s on node %s: %s address %s is not an IP address", Quote(s.ID), Quote(e.Node.Node), from, Quote(raw))
	}
	if s.Port < 0 || s.Port > 65535 {
		return Instance{}, fmt.Errorf("instance %s on node %s: port %d out of range", Quote(s.ID), Quote(e.Node.Node), s.Port)
	}
	return Instance{
		ID:          s.ID,
		Node:        e.Node.Node,
		Address:     addr.Unmap(),
		Port:        uint16(s.Port),
		Tags:        s.Tags,
		Meta:        s.Meta,
		Status:      aggregate(e.Checks),
		CreateIndex: s.CreateIndex,
	}, nil
}

// aggregate returns the worst status of checks. Anything but passing and
// warning (critical, maintenance, a status this version does not know)
// counts as critical.
func aggregate(checks api.HealthChecks) string {
	worst := Passing
	for _, c := range checks {
		switch c.Status {
		case api.HealthPassing:
		case api.HealthWarning:
			worst = Warning
		default:
			return Critical
		}
	}
	return worst
}

// sortInstances orders instances oldest registration first, so that
// snapshots compare equal when nothing changed.
func sortInstances(is []Instance) {
	slices.SortFunc(is, func(a, b Instance) int {
		return cmp.Or(
			cmp.Compare(a.CreateIndex, b.CreateIndex),
			strings.Compare(a.Node, b.Node),
			strings.Compare(a.ID, b.ID),
		)
	})
}

// passing returns the instances whose Status is passing; is itself when
// they all pass.
func passing(is []Instance) []Instance {
	n := 0
	for _, in := range is {
		if in.Status == Passing {
			n++
		}
	}
	if n == len(is) {
		return is
	}
	out := make([]Instance, 0, n)
	for _, in := range is {
		if in.Status == Passing {
			out = append(out, in)
		}
	}
	return out
}

// fetchKey names one /v1/health/service request. Queries that differ only
// in PassingOnly share it: health is filtered here, not by Consul, so that
// the node of every instance is known (see loop.onChecks).
type fetchKey struct {
	dc      string
	service string
	tags    string // normTags joined by "\x00"
}

func (k fetchKey) tagList() []string {
	if k.tags == "" {
		return nil
	}
	return strings.Split(k.tags, "\x00")
}

// String names the fetch in errors and logs.
func (k fetchKey) String() string {
	s := Quote(k.service)
	if k.tags != "" {
		s += " with tags " + strings.Join(k.tagList(), ",")
	}
	if k.dc != "" {
		s += " in " + k.dc
	}
	return s
}
