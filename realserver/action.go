package realserver

import (
	"fmt"
	"net/netip"
	"strings"
)

// Kind is what an Action does. The order is the order Setup applies them
// in: the ARP sysctls before any VIP goes on lo, so that the box never
// answers ARP for a VIP, not even for a moment.
type Kind uint8

const (
	LoadModule Kind = iota
	SetSysctl
	LinkUp
	LinkDown
	AddFou
	DelFou
	AddAddr
	DelAddr
)

func (k Kind) String() string {
	switch k {
	case LoadModule:
		return "load-module"
	case SetSysctl:
		return "set-sysctl"
	case LinkUp:
		return "link-up"
	case LinkDown:
		return "link-down"
	case AddFou:
		return "add-fou"
	case DelFou:
		return "del-fou"
	case AddAddr:
		return "add-addr"
	case DelAddr:
		return "del-addr"
	}
	return fmt.Sprintf("kind-%d", uint8(k))
}

// MarshalText writes k by name, for the record file.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a name MarshalText wrote.
func (k *Kind) UnmarshalText(b []byte) error {
	for c := LoadModule; c <= DelAddr; c++ {
		if c.String() == string(b) {
			*k = c
			return nil
		}
	}
	return fmt.Errorf("unknown action %q", b)
}

// Action is one change to the box. It is comparable, so a run can tell
// an action it already made from a new one.
type Action struct {
	Kind   Kind         `json:"kind"`
	Link   string       `json:"link,omitempty"`   // LinkUp, LinkDown, AddAddr, DelAddr
	Prefix netip.Prefix `json:"prefix,omitzero"`  // AddAddr, DelAddr
	Port   uint16       `json:"port,omitempty"`   // AddFou, DelFou
	V6     bool         `json:"v6,omitempty"`     // AddFou, DelFou: the outer family
	Key    string       `json:"key,omitempty"`    // SetSysctl: path under /proc/sys
	Value  string       `json:"value,omitempty"`  // SetSysctl: what it writes
	Was    string       `json:"was,omitempty"`    // SetSysctl: the value before
	Module string       `json:"module,omitempty"` // LoadModule
}

// Command is the shell command that does what a does, for the admin.
func (a Action) Command() string {
	fou := "ip fou"
	if a.V6 {
		fou = "ip -6 fou"
	}
	switch a.Kind {
	case LoadModule:
		return "modprobe " + a.Module
	case SetSysctl:
		return fmt.Sprintf("sysctl -w %s=%s", sysctlName(a.Key), a.Value)
	case LinkUp:
		return "ip link set " + a.Link + " up"
	case LinkDown:
		return "ip link set " + a.Link + " down"
	case AddFou:
		return fmt.Sprintf("%s add port %d gue", fou, a.Port)
	case DelFou:
		return fmt.Sprintf("%s del port %d", fou, a.Port)
	case AddAddr:
		if a.Prefix.Addr().Is6() {
			return fmt.Sprintf("ip addr add %s dev %s nodad", a.Prefix, a.Link)
		}
		return fmt.Sprintf("ip addr add %s dev %s", a.Prefix, a.Link)
	case DelAddr:
		return fmt.Sprintf("ip addr del %s dev %s", a.Prefix, a.Link)
	}
	return a.Kind.String()
}

// Inverse is the action that takes a back; false for what is not taken
// back (a loaded module stays, and lo stays up: bringing it down would
// break the box's own loopback traffic).
func (a Action) Inverse() (Action, bool) {
	switch a.Kind {
	case SetSysctl:
		return Action{Kind: SetSysctl, Key: a.Key, Value: a.Was, Was: a.Value}, true
	case LinkUp:
		return Action{Kind: LinkDown, Link: a.Link}, a.Link != loopback
	case AddFou:
		return Action{Kind: DelFou, Port: a.Port, V6: a.V6}, true
	case AddAddr:
		return Action{Kind: DelAddr, Link: a.Link, Prefix: a.Prefix}, true
	}
	return Action{}, false
}

// sysctlName is a /proc/sys path in sysctl(8)'s dotted form, where a dot
// inside a component (an interface such as eth0.100) becomes a slash.
func sysctlName(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(p, ".", "/")
	}
	return strings.Join(parts, ".")
}
