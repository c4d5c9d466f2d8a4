package realserver_test

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"syscall"

	"github.com/lbdproject/lbd/realserver"
)

// fakeKernel is a box in memory that refuses what the kernel refuses: an
// address or fou port that is already there (EEXIST), one that is not
// (EADDRNOTAVAIL, ENOENT), a link or sysctl that does not exist (ENODEV,
// ENOENT). Loading a module makes the links its entry in modules names.
type fakeKernel struct {
	st      realserver.State
	modules map[string][]realserver.Link
	applied []string
}

// newBox is a fresh box: lo and eth0 up, every knob at the kernel's
// default 0.
func newBox() *fakeKernel {
	f := &fakeKernel{
		st: realserver.State{
			Links:   []realserver.Link{{Name: "lo", Up: true, Loopback: true}, {Name: "eth0", Up: true}},
			Addrs:   nil,
			Sysctls: map[string]string{"net/core/fb_tunnels_only_for_init_net": "0"},
		},
		modules: map[string][]realserver.Link{
			"ipip":       {{Name: "tunl0", NoARP: true}},
			"ip6_tunnel": {{Name: "ip6tnl0", NoARP: true}},
			"ip_gre":     {{Name: "gre0", NoARP: true}, {Name: "gretap0"}},
			"ip6_gre":    {{Name: "ip6gre0", NoARP: true}},
		},
	}
	for _, l := range []string{"all", "lo", "eth0"} {
		f.setKnobs(l, "0")
	}
	return f
}

func (f *fakeKernel) setKnobs(link, v string) {
	for _, k := range realserver.Knobs() {
		f.st.Sysctls[path.Join("net/ipv4/conf", link, k)] = v
	}
}

func (f *fakeKernel) set(key, v string) *fakeKernel {
	f.st.Sysctls[key] = v
	return f
}

func (f *fakeKernel) Read() (realserver.State, error) {
	return realserver.State{
		Links:   slices.Clone(f.st.Links),
		Addrs:   slices.Clone(f.st.Addrs),
		Fou:     slices.Clone(f.st.Fou),
		Sysctls: maps.Clone(f.st.Sysctls),
	}, nil
}

func (f *fakeKernel) Apply(a realserver.Action) error {
	if err := f.apply(a); err != nil {
		return err
	}
	f.applied = append(f.applied, a.Command())
	return nil
}

func (f *fakeKernel) apply(a realserver.Action) error {
	switch a.Kind {
	case realserver.LoadModule:
		for _, l := range f.modules[a.Module] {
			if !slices.ContainsFunc(f.st.Links, func(x realserver.Link) bool { return x.Name == l.Name }) {
				f.st.Links = append(f.st.Links, l)
				f.setKnobs(l.Name, "0")
			}
		}
	case realserver.SetSysctl:
		if _, ok := f.st.Sysctls[a.Key]; !ok {
			return syscall.ENOENT
		}
		f.st.Sysctls[a.Key] = a.Value
	case realserver.LinkUp, realserver.LinkDown:
		i := slices.IndexFunc(f.st.Links, func(x realserver.Link) bool { return x.Name == a.Link })
		if i < 0 {
			return syscall.ENODEV
		}
		f.st.Links[i].Up = a.Kind == realserver.LinkUp
	case realserver.AddFou, realserver.DelFou:
		p := realserver.FouPort{Port: a.Port, V6: a.V6, GUE: true}
		i := slices.IndexFunc(f.st.Fou, func(x realserver.FouPort) bool { return x.Port == a.Port && x.V6 == a.V6 })
		switch {
		case a.Kind == realserver.AddFou && i >= 0:
			return syscall.EEXIST
		case a.Kind == realserver.AddFou:
			f.st.Fou = append(f.st.Fou, p)
		case i < 0:
			return syscall.ENOENT
		default:
			f.st.Fou = slices.Delete(f.st.Fou, i, i+1)
		}
	case realserver.AddAddr, realserver.DelAddr:
		return f.addr(a)
	default:
		return fmt.Errorf("fake: unknown action %s", a.Kind)
	}
	return nil
}

func (f *fakeKernel) addr(a realserver.Action) error {
	if !slices.ContainsFunc(f.st.Links, func(x realserver.Link) bool { return x.Name == a.Link }) {
		return syscall.ENODEV
	}
	want := realserver.Addr{Link: a.Link, Prefix: a.Prefix}
	i := slices.Index(f.st.Addrs, want)
	switch {
	case a.Kind == realserver.AddAddr && i >= 0:
		return syscall.EEXIST
	case a.Kind == realserver.AddAddr:
		f.st.Addrs = append(f.st.Addrs, want)
	case i < 0:
		return syscall.EADDRNOTAVAIL
	default:
		f.st.Addrs = slices.Delete(f.st.Addrs, i, i+1)
	}
	return nil
}
