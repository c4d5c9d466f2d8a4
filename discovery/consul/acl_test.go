package consul

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/lbdproject/lbd/discovery/consul/internal/consultest"
)

// aclFixture is an ACL-enabled agent (default policy deny) with web1
// registered and tokens of several powers.
type aclFixture struct {
	agent *consultest.Agent
	mgmt  *api.Client
	// reader may read every service and node; webReader only web (and
	// every node), until revoke; otherReader only the service "other".
	reader, webReader, otherReader string
	webPolicy                      *api.ACLPolicy
}

func newACLFixture(t *testing.T) *aclFixture {
	t.Helper()
	agent := consultest.Start(t, consultest.Options{ACL: true})
	f := &aclFixture{agent: agent, mgmt: agent.Client(agent.Token)}
	f.reader = f.token(t, "read-all", `service_prefix "" { policy = "read" }
node_prefix "" { policy = "read" }`)
	f.otherReader = f.token(t, "read-other", `service "other" { policy = "read" }
node_prefix "" { policy = "read" }`)
	f.webReader = f.token(t, "read-web", `service "web" { policy = "read" }
node_prefix "" { policy = "read" }`)
	for _, p := range f.policies(t) {
		if p.Name == "read-web" {
			f.webPolicy = p
		}
	}
	register(t, f.mgmt, reg{ID: "web1", Name: "web", Address: "10.0.0.1", Port: 80})
	return f
}

// token creates a policy with rules and returns the secret of a new token
// holding it.
func (f *aclFixture) token(t *testing.T, policy, rules string) string {
	t.Helper()
	if _, _, err := f.mgmt.ACL().PolicyCreate(&api.ACLPolicy{Name: policy, Rules: rules}, nil); err != nil {
		t.Fatalf("creating policy %s: %v", policy, err)
	}
	tok, _, err := f.mgmt.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{Name: policy}}}, nil)
	if err != nil {
		t.Fatalf("creating token with %s: %v", policy, err)
	}
	return tok.SecretID
}

func (f *aclFixture) policies(t *testing.T) []*api.ACLPolicy {
	t.Helper()
	list, _, err := f.mgmt.ACL().PolicyList(nil)
	if err != nil {
		t.Fatalf("listing policies: %v", err)
	}
	var out []*api.ACLPolicy
	for _, e := range list {
		p, _, err := f.mgmt.ACL().PolicyRead(e.ID, nil)
		if err != nil {
			t.Fatalf("reading policy %s: %v", e.Name, err)
		}
		out = append(out, p)
	}
	return out
}

// revokeWeb takes service:read on web away from webReader.
func (f *aclFixture) revokeWeb(t *testing.T) {
	t.Helper()
	p := *f.webPolicy
	p.Rules = `service "other" { policy = "read" }
node_prefix "" { policy = "read" }`
	if _, _, err := f.mgmt.ACL().PolicyUpdate(&p, nil); err != nil {
		t.Fatalf("revoking read on web: %v", err)
	}
}

func TestWatcherWithACLs(t *testing.T) {
	t.Parallel()
	f := newACLFixture(t)
	web := Query{Service: "web"}
	var logs logBuffer
	// secrets must never show in logs, snapshots or Status.
	const badToken = "00000000-1111-2222-3333-444444444444"
	secrets := []string{f.agent.Token, f.reader, f.webReader, f.otherReader, badToken}
	var errs []string
	follow := func(t *testing.T, token string) *Watcher {
		opts := testOptions(t, clientFor(t, f.agent, token), logs.logger())
		opts.RefreshInterval = 200 * time.Millisecond
		w := New(opts)
		w.SetQueries([]Query{web})
		run(t, w)
		t.Cleanup(func() {
			st := w.Status()
			errs = append(errs, st.Err, st.LastError)
		})
		return w
	}
	filtered := `results filtered by ACLs: the token lacks service:read on "web"`

	t.Run("a token that may read", func(t *testing.T) {
		w := follow(t, f.reader)
		s := waitFor(t, w, "web1", func(s Snapshot) bool { return has(s, web.Key(), "[web1@10.0.0.1:80(passing)]") })
		if !s.Connected || s.Err != "" {
			t.Errorf("connected=%v err=%q, want connected without error", s.Connected, s.Err)
		}
	})

	// Consul marks nothing as filtered for the anonymous token: its empty
	// answer must not pass for "no instances".
	t.Run("no token", func(t *testing.T) {
		w := follow(t, "")
		s := waitFor(t, w, "the ACL problem", func(s Snapshot) bool { return s.Synced && strings.Contains(s.Err, filtered) })
		if is, ok := s.Services[web.Key()]; ok {
			t.Errorf("services[web] = %s, want absent: ACLs hid it", instanceList(is))
		}
		errs = append(errs, s.Err)
	})

	// For a real token Consul flags the filtered answer.
	t.Run("a token that may read other services only", func(t *testing.T) {
		w := follow(t, f.otherReader)
		s := waitFor(t, w, "the ACL problem", func(s Snapshot) bool { return s.Synced && strings.Contains(s.Err, filtered) })
		if is, ok := s.Services[web.Key()]; ok {
			t.Errorf("services[web] = %s, want absent: ACLs hid it", instanceList(is))
		}
	})

	t.Run("a token that no longer may read keeps the last known", func(t *testing.T) {
		w := follow(t, f.webReader)
		waitFor(t, w, "web1", func(s Snapshot) bool { return has(s, web.Key(), "[web1@10.0.0.1:80(passing)]") })
		f.revokeWeb(t)
		s := waitFor(t, w, "the ACL problem", func(s Snapshot) bool { return strings.Contains(s.Err, filtered) })
		if !has(s, web.Key(), "[web1@10.0.0.1:80(passing)]") {
			t.Errorf("after read was revoked: %s want web1 kept", dump(s))
		}
		errs = append(errs, s.Err)
	})

	t.Run("a token Consul does not know", func(t *testing.T) {
		w := follow(t, badToken)
		s := waitFor(t, w, "the error", func(s Snapshot) bool { return !s.Connected && strings.Contains(s.Err, "ACL not found") })
		if _, ok := s.Services[web.Key()]; ok {
			t.Errorf("services[web] present with a token Consul refuses")
		}
		errs = append(errs, s.Err)
	})

	// The subtests and their cleanups are done: every watcher stopped.
	out := logs.String() + strings.Join(errs, "\n")
	if !strings.Contains(out, "ACL not found") || !strings.Contains(out, filtered) {
		t.Errorf("logs and errors lack the expected problems, so the check for secrets proves nothing:\n%s", out)
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("a token appears in logs or errors:\n%s", out)
		}
	}
}
