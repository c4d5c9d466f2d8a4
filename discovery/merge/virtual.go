package merge

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/discovery/consul"
)

// definedService is a virtual service a Consul registration defines, and
// the instances that are to be its real servers.
type definedService struct {
	s     config.Service
	insts []consul.Instance
}

// claim is who holds a VIP:port/protocol.
type claim struct{ owner, where string }

// candidate is a tagged Consul service: its tagged instances, oldest
// first.
type candidate struct {
	name  string
	insts []consul.Instance
	first uint64
}

// virtualServices decides the services that tagged Consul services
// define, and adds their VIPs to g. The oldest registration wins a
// VIP:port claimed twice; files always win.
func (r *Result) virtualServices(cfg *config.Config, tagged map[string][]consul.Instance, g *guard) []definedService {
	claims := map[string]claim{}
	names := map[string]bool{}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		names[s.Name] = true
		for _, k := range claimKeys(s) {
			claims[k] = claim{fmt.Sprintf("service %q", s.Name), s.Pos.String()}
		}
	}
	var out []definedService
	for _, c := range candidates(tagged, cfg.Consul.VirtualServices.Tag) {
		if len(out) == maxServices {
			r.problem("consul virtual services", "more than %d Consul services carry tag %s; the %d oldest registrations define services, the newer ones (from %s on) are refused",
				maxServices, consul.Quote(cfg.Consul.VirtualServices.Tag), maxServices, consul.Quote(c.name))
			break
		}
		subject := serviceSubject(c.name)
		r.safely(subject, func() {
			if d, ok := r.define(cfg, c, subject, claims, names, g); ok {
				out = append(out, d)
			}
		})
	}
	return out
}

// candidates returns the tagged services with their instances that carry
// the tag (only those define and serve the service), oldest registration
// first.
func candidates(tagged map[string][]consul.Instance, tag string) []candidate {
	var cands []candidate
	for _, name := range slices.Sorted(maps.Keys(tagged)) {
		insts := slices.DeleteFunc(slices.Clone(tagged[name]), func(in consul.Instance) bool { return !slices.Contains(in.Tags, tag) })
		if len(insts) == 0 {
			continue
		}
		slices.SortFunc(insts, func(a, b consul.Instance) int {
			return cmp.Or(cmp.Compare(a.CreateIndex, b.CreateIndex), strings.Compare(a.ID, b.ID))
		})
		cands = append(cands, candidate{name, insts, insts[0].CreateIndex})
	}
	slices.SortStableFunc(cands, func(a, b candidate) int { return cmp.Compare(a.first, b.first) })
	return cands
}

// define decodes the service that c's oldest registration defines and
// claims its VIPs, or reports why it cannot.
func (r *Result) define(cfg *config.Config, c candidate, subject string, claims map[string]claim, names map[string]bool, g *guard) (definedService, bool) {
	def := c.insts[0]
	defMeta := definition(def.Meta)
	// Past maxInstances they are refused anyway (see reals).
	for _, in := range c.insts[1:min(len(c.insts), maxInstances)] {
		if !maps.Equal(defMeta, definition(in.Meta)) {
			r.problem(subject, "instance %s on node %s defines the virtual service differently from the oldest registration (%s on node %s), whose lbd-* meta is used",
				consul.Quote(in.ID), consul.Quote(in.Node), consul.Quote(def.ID), consul.Quote(def.Node))
		}
	}
	if names[c.name] {
		r.problem(subject, "a file service is already named %s; the file wins", consul.Quote(c.name))
		return definedService{}, false
	}
	if v, ok := def.Meta["lbd-vip"]; ok && strings.Count(v, ",") >= maxVIPs {
		r.problem(subject, "meta lbd-vip lists %d VIPs; one registration may claim at most %d", strings.Count(v, ",")+1, maxVIPs)
		return definedService{}, false
	}
	s, err := config.ServiceFromConsul(cfg, c.name, def.Meta)
	if err != nil {
		r.configProblems(subject, fmt.Sprintf("consul service %q: ", c.name), err)
		return definedService{}, false
	}
	refused := false
	for _, v := range s.VIPs {
		if g.host[canon(v)] {
			r.problem(subject, "meta lbd-vip: %s is this director's own address; a VIP from Consul may not take over the director's own ports", v)
			refused = true
		}
	}
	for _, k := range claimKeys(&s) {
		if cl, taken := claims[k]; taken {
			r.problem(subject, "%s is already claimed by %s (%s); it keeps it", k, cl.owner, cl.where)
			refused = true
		}
	}
	if refused {
		return definedService{}, false
	}
	for _, k := range claimKeys(&s) {
		claims[k] = claim{subject, fmt.Sprintf("registered by %s on node %s", consul.Quote(def.ID), consul.Quote(def.Node))}
	}
	names[c.name] = true
	g.addVIPs(&s)
	return definedService{s: s, insts: c.insts}, true
}

// configProblems reports the errors of config.ServiceFromConsul, whose
// locations repeat the subject.
func (r *Result) configProblems(subject, prefix string, err error) {
	var list config.ErrorList
	if !errors.As(err, &list) {
		r.problem(subject, "%s", shortenQuoted(strings.TrimPrefix(err.Error(), prefix)))
		return
	}
	for _, e := range list {
		r.problem(subject, "%s", shortenQuoted(strings.TrimPrefix(e.Error(), prefix)))
	}
}

// shortenQuoted truncates the quoted strings in msg, which the
// configuration's errors quote in full, as consul.Quote does.
func shortenQuoted(msg string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(msg, '"')
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		b.WriteString(msg[:i])
		msg = msg[i:]
		q, err := strconv.QuotedPrefix(msg)
		if err != nil {
			b.WriteByte('"')
			msg = msg[1:]
			continue
		}
		v, _ := strconv.Unquote(q)
		b.WriteString(consul.Quote(v))
		msg = msg[len(q):]
	}
}

func claimKeys(s *config.Service) []string {
	out := make([]string, 0, len(s.VIPs))
	for _, v := range s.VIPs {
		out = append(out, fmt.Sprintf("%s/%s", netip.AddrPortFrom(v, s.Port), s.Protocol))
	}
	return out
}

// definition is the lbd-* meta that defines a virtual service (the weight
// is per instance).
func definition(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if strings.HasPrefix(k, "lbd-") && k != config.ConsulWeightMeta {
			out[k] = v
		}
	}
	return out
}
