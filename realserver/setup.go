package realserver

import (
	"fmt"
	"net/netip"
	"slices"
)

// Kernel is what setup, check and undo need of the box.
type Kernel interface {
	// Read takes a snapshot: links, addresses, fou ports and the sysctls
	// StateKeys names. It changes nothing (it does not load modules).
	Read() (State, error)
	// Apply makes one change, failing as the kernel does (an address
	// already there, a port already bound).
	Apply(Action) error
}

// maxRounds bounds Setup's read-fix rounds: a loaded module makes a
// device that the next round brings up and sets rp_filter on.
const maxRounds = 4

// Result is what Setup did and the check after it.
type Result struct {
	Done   []Action
	Report Report
}

// Setup checks the box against s and applies the failing items' fixes,
// round after round until nothing is left to fix, recording each change in
// rec for Undo. Run twice, the second run changes nothing. An action that
// a round has applied and the next asks for again did not take: Setup
// stops there and the report says what still fails.
func Setup(k Kernel, s Spec, rec *Record) (Result, error) {
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	var res Result
	for range maxRounds {
		st, err := k.Read()
		if err != nil {
			return res, err
		}
		res.Report = Check(s, st)
		var todo []Action
		for _, a := range res.Report.Fixes() {
			if !slices.Contains(res.Done, a) {
				todo = append(todo, a)
			}
		}
		if len(todo) == 0 {
			return res, nil
		}
		for _, a := range todo {
			if err := k.Apply(a); err != nil {
				return res, fmt.Errorf("%s: %w", a.Command(), err)
			}
			res.Done = append(res.Done, a)
			rec.add(s.Method.String(), a)
		}
	}
	st, err := k.Read()
	if err != nil {
		return res, err
	}
	res.Report = Check(s, st)
	return res, nil
}

// Undone is what Undo did and what it left, with why.
type Undone struct {
	Done []Action
	Left []string
}

// Undo takes back what Setup recorded for s's VIPs: their addresses, and,
// once no VIP that Setup added is left on the box, the sysctls, devices
// and fou ports it changed. Each is taken back only while it is still as
// Setup left it; what someone changed since is left, and said so. The
// addresses go before the ARP sysctls, so the box never answers ARP for a
// VIP on the way out either.
func Undo(k Kernel, s Spec, rec *Record) (Undone, error) {
	if err := s.Validate(); err != nil {
		return Undone{}, err
	}
	st, err := k.Read()
	if err != nil {
		return Undone{}, err
	}
	var u Undone
	for _, v := range s.VIPs {
		i := rec.findAddr(hostPrefix(v))
		if i < 0 {
			u.Left = append(u.Left, fmt.Sprintf("VIP %s: setup did not add it (or its record is gone); left alone", v))
			continue
		}
		e := rec.Entries[i]
		if err := u.takeBack(k, st, e.Action); err != nil {
			return u, err
		}
		rec.remove(i)
	}
	if rec.findAddr(netip.Prefix{}) >= 0 {
		u.Left = append(u.Left, "sysctls, devices and fou ports: other VIPs that setup added still need them; left as they are")
		return u, nil
	}
	for i := len(rec.Entries) - 1; i >= 0; i-- {
		if err := u.takeBack(k, st, rec.Entries[i].Action); err != nil {
			return u, err
		}
		rec.remove(i)
	}
	return u, nil
}

// takeBack applies a's inverse if the box still shows a's effect.
func (u *Undone) takeBack(k Kernel, st State, a Action) error {
	inv, ok := a.Inverse()
	if !ok {
		if a.Kind == LoadModule {
			u.Left = append(u.Left, "module "+a.Module+": stays loaded")
		}
		return nil
	}
	if why := changedSince(st, a); why != "" {
		u.Left = append(u.Left, fmt.Sprintf("%s: %s; left alone", a.Command(), why))
		return nil
	}
	if err := k.Apply(inv); err != nil {
		return fmt.Errorf("%s: %w", inv.Command(), err)
	}
	u.Done = append(u.Done, inv)
	return nil
}

// changedSince says how the box no longer shows a's effect, or "".
func changedSince(st State, a Action) string {
	switch a.Kind {
	case SetSysctl:
		if v, ok := st.Sysctls[a.Key]; !ok || v != a.Value {
			return fmt.Sprintf("now %q, not the %s setup wrote", v, a.Value)
		}
	case LinkUp:
		if l, ok := st.link(a.Link); !ok || !l.Up {
			return "no longer up"
		}
	case AddFou:
		if _, ok := st.hasFou(a.Port, a.V6); !ok {
			return "already gone"
		}
	case AddAddr:
		if !slices.Contains(st.Addrs, Addr{Link: a.Link, Prefix: a.Prefix}) {
			return "already gone"
		}
	}
	return ""
}
