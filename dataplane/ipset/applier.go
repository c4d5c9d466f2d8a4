// Package ipset keeps lbd's fixed ipsets and their entries in step with the
// desired state: it creates missing sets (recreating one of the wrong
// type), and adds and deletes only the entries that differ — against a
// cache on requested syncs, against one dump of every set on full ones.
// Sets whose names are not lbd's are never touched.
package ipset

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/genl"
	"github.com/lbdproject/lbd/internal/errcap"
	"github.com/lbdproject/lbd/lvs"
)

// Kernel is the kernel's ipsets.
type Kernel interface {
	// Dump lists lbd's sets (at least those IsLBD names) without holding
	// the sets in memory: it calls set with each one's name, type (as
	// ListedType gives it) and family (4 or 6), then the function set
	// returned for it, unless nil,
	// with each of that set's entries. The callbacks must not call back
	// into the Kernel. A dump the kernel flags as interrupted by a
	// concurrent change returns an error that is genl.ErrDumpInterrupted,
	// after the callbacks may have seen part of the sets, or some entries
	// twice: the caller starts over.
	Dump(set func(name string, t desired.SetType, family int) (entry func(desired.SetEntry))) error
	Create(desired.SetSpec) error
	Destroy(name string) error
	Add(set string, e desired.SetEntry) error
	Del(set string, e desired.SetEntry) error
}

// Batcher is a Kernel that can write many entries at once, faster than one
// call per entry (a cold sync adds ~200,000).
type Batcher interface {
	// Write adds (or, with del, deletes) each entry to/from its set and
	// returns one error per op (nil: done).
	Write(ops []Op) []error
}

// Op is one entry to add to or delete from a set.
type Op struct {
	Set   string
	Entry desired.SetEntry
	Del   bool
}

// ListedType is how Kernel.Dump reports the type of a set of spec: its
// type, then " skbinfo" when the set has that extension (`ipset list`
// shows it in the set's header). A set of lbd's name that lacks the
// extension lbd needs, or has one it does not, is of the wrong type.
func ListedType(spec desired.SetSpec) desired.SetType {
	if spec.SkbInfo {
		return spec.Type + skbinfoSuffix
	}
	return spec.Type
}

const skbinfoSuffix = " skbinfo"

// IsLBD reports whether a set name is lbd's: one of the fixed names of
// desired.SetSpecs. Another set, even one named LBD-something (an admin's
// LBD-ALLOW), is not lbd's and is never touched.
func IsLBD(name string) bool {
	_, ok := setID(name)
	return ok
}

// setID returns the id of lbd's set called name.
func setID(name string) (desired.SetID, bool) {
	if !strings.HasPrefix(name, "LBD") {
		return 0, false
	}
	for id := range desired.NumSets {
		if id.Spec().Name == name {
			return id, true
		}
	}
	return 0, false
}

// Stats counts the kernel work of one Apply.
type Stats struct {
	Dumps   int
	Writes  int
	Entries int // entries in lbd's sets after the apply
}

// Applier applies lbd's sets. It keeps, for every entry the desired state
// needs, how many virtual servers need it: entries are shared (a real
// server's network by all its services, a VIP by all its ports), and the
// counts let a sync touch only the members of the virtual servers that
// changed.
type Applier struct {
	k     Kernel
	count map[key]int32
	// perSet counts count's keys by set.
	perSet [desired.NumSets]int
	// prev is the state last applied without error; nil until a full
	// apply succeeded and after any failed write.
	prev *desired.State
	buf  []desired.Member
}

// New returns an Applier over k.
func New(k Kernel) *Applier { return &Applier{k: k} }

// Apply makes every set lbd owns exist with exactly the members st needs.
// With full (or after a failure) it dumps every set and repairs them;
// otherwise it compares st with the state it last applied and writes the
// members of the virtual servers that differ.
func (a *Applier) Apply(st *desired.State, full bool) (Stats, error) {
	// Changed set inputs (the box's addresses, configured networks) may
	// change every virtual server's members: recount them all.
	if full || a.prev == nil || !st.SameSetInputs(a.prev) {
		return a.applyFull(st)
	}
	return a.applyChanges(st)
}

// applyChanges updates the counts by the virtual servers that differ from
// the previous state (whose set inputs are st's) and writes the entries
// whose count left or reached 0.
func (a *Applier) applyChanges(st *desired.State) (Stats, error) {
	var stats Stats
	before := map[key]int32{} // touched keys, with their count before
	adjust := func(ms []desired.Member, d int32) {
		for _, m := range ms {
			k := toKey(m)
			n := a.count[k]
			if _, ok := before[k]; !ok {
				before[k] = n
			}
			a.count[k] = n + d
		}
	}
	prev := a.prev
	change := func(old, cur *desired.Service) {
		if old != nil {
			a.buf = prev.AppendMembers(a.buf[:0], old)
			adjust(a.buf, -1)
		}
		if cur != nil {
			a.buf = st.AppendMembers(a.buf[:0], cur)
			adjust(a.buf, +1)
		}
	}
	// Both lists are sorted by key: walk them side by side.
	desired.Pair(prev.Services, st.Services, func(p, s *desired.Service) {
		if p == nil || s == nil || !desired.SameMembers(p, s) {
			change(p, s)
		}
	})
	var adds, dels []key
	for k, was := range before {
		now := a.count[k]
		if now == 0 {
			delete(a.count, k)
		}
		switch {
		case was == 0 && now > 0:
			adds = append(adds, k)
		case was > 0 && now == 0:
			dels = append(dels, k)
		}
	}
	err := a.write(adds, dels, &stats)
	if err != nil {
		a.prev = nil // re-read before trusting the counts again
	} else {
		a.prev = st
	}
	stats.Entries = len(a.count)
	return stats, err
}

// write adds and deletes entries (sorted, so that errors and tests see a
// stable order), keeping perSet in step: through the kernel's Batcher in
// chunks if it has one, else one call per entry.
func (a *Applier) write(adds, dels []key, stats *Stats) error {
	slices.SortFunc(adds, key.compare)
	slices.SortFunc(dels, key.compare)
	errs := errcap.List{What: "entries"}
	done := func(k key, e desired.SetEntry, del bool, err error) {
		name := k.set.Spec().Name
		switch {
		case err != nil && del:
			errs.Add(fmt.Errorf("deleting %s from ipset %s: %w", e, name, err))
		case err != nil:
			errs.Add(fmt.Errorf("adding %s to ipset %s: %w", e, name, err))
		case del:
			a.perSet[k.set]--
		default:
			a.perSet[k.set]++
		}
	}
	// A Batcher gets at most writeChunk ops at once: a cold sync's 200,000
	// never exist together.
	const writeChunk = 1024
	b, batched := a.k.(Batcher)
	errNoResult := errors.New("no result from the kernel")
	var ops []Op
	if batched {
		ops = make([]Op, 0, min(writeChunk, len(adds)+len(dels)))
	}
	// A mark set holds an element once whatever its mark: an entry whose
	// mark changes is deleted before its new form is added.
	first, dels := splitMarked(dels)
	for _, w := range []struct {
		keys []key
		del  bool
	}{{first, true}, {adds, false}, {dels, true}} {
		if !batched {
			for _, k := range w.keys {
				name, e := k.set.Spec().Name, k.entry()
				stats.Writes++
				var err error
				if w.del {
					err = a.k.Del(name, e)
				} else {
					err = a.k.Add(name, e)
				}
				done(k, e, w.del, err)
			}
			continue
		}
		for keys := range slices.Chunk(w.keys, writeChunk) {
			ops = ops[:0]
			for _, k := range keys {
				ops = append(ops, Op{Set: k.set.Spec().Name, Entry: k.entry(), Del: w.del})
			}
			stats.Writes += len(ops)
			res := b.Write(ops)
			for i, k := range keys {
				err := errNoResult
				if i < len(res) {
					err = res[i]
				}
				done(k, ops[i].Entry, w.del, err)
			}
		}
	}
	return errs.Err()
}

// applyFull counts st's members from scratch and makes the kernel's sets
// hold exactly them.
func (a *Applier) applyFull(st *desired.State) (Stats, error) {
	var stats Stats
	a.prev = nil
	var count map[key]int32
	var d dumped
	// An interrupted dump has fed the counts and d halfway: both start over.
	err := genl.RetryDump(genl.ErrDumpInterrupted, func() error {
		count, d = a.recount(st), dumped{}
		a.count = count // its room is reused by the next recount
		stats.Dumps++
		return a.dump(count, &d)
	})
	if err != nil {
		return stats, fmt.Errorf("listing ipsets: %w", err)
	}
	usable, errs, err := a.ensureSets(&d, &stats)
	if err != nil {
		return stats, err
	}
	adds := unmark(count, usable)
	a.startPerSet(adds, d.dels)
	if err := a.write(adds, d.dels, &stats); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		a.prev = st
	}
	stats.Entries = len(a.count)
	return stats, errors.Join(errs...)
}

// recount counts st's members from scratch. It recounts in the map of the
// last count: cleared, it keeps its room, and a second map of 200,000
// entries never exists next to it.
func (a *Applier) recount(st *desired.State) map[key]int32 {
	count := a.count
	if count == nil {
		count = map[key]int32{}
	}
	clear(count)
	add := func(ms []desired.Member) {
		for _, m := range ms {
			count[toKey(m)]++
		}
	}
	add(st.AppendGlobalMembers(a.buf[:0]))
	for i := range st.Services {
		a.buf = st.AppendMembers(a.buf[:0], &st.Services[i])
		add(a.buf)
	}
	return count
}

// dumped is what a full sync's dump found of lbd's sets.
type dumped struct {
	found, wrong [desired.NumSets]bool // wrong: of another type or family
	got          [desired.NumSets]desired.SetType
	dels         []key // entries the kernel has and nobody needs
}

// dump streams the kernel's sets into d and count: it records which of
// lbd's sets exist, and compares their entries with count as they come.
func (a *Applier) dump(count map[key]int32, d *dumped) error {
	return a.k.Dump(func(name string, t desired.SetType, family int) func(desired.SetEntry) {
		id, ok := setID(name)
		if !ok {
			return nil
		}
		d.found[id], d.got[id] = true, t
		if spec := id.Spec(); t != ListedType(spec) || family != spec.Family {
			d.wrong[id] = true
			return nil
		}
		// Mark what the kernel has by negating its count (no second map of
		// 200,000 entries); what it has and nobody needs goes.
		return func(e desired.SetEntry) {
			k := toKey(desired.Member{Set: id, Entry: e})
			switch n := count[k]; {
			case n > 0:
				count[k] = -n
			case n == 0:
				d.dels = append(d.dels, k)
			}
		}
	})
}

// ensureSets creates the sets d did not find and replaces those of the
// wrong type, and reports which sets can take entries. errs are the sets
// that could not be created; err, a set that could not be replaced, ends
// the sync.
func (a *Applier) ensureSets(d *dumped, stats *Stats) (usable [desired.NumSets]bool, errs []error, err error) {
	for id := range desired.NumSets {
		spec := id.Spec()
		ok := d.found[id]
		// A set of lbd's name but the wrong type (an older lbd, a hand
		// edit) is replaced; a set in use by a rule cannot be, and says so.
		if ok && d.wrong[id] {
			stats.Writes++
			if err := a.k.Destroy(spec.Name); err != nil {
				return usable, errs, fmt.Errorf("replacing ipset %s (%s, want %s): %w", spec.Name, d.got[id], ListedType(spec), err)
			}
			ok = false
		}
		if !ok {
			stats.Writes++
			if err := a.k.Create(spec); err != nil {
				errs = append(errs, fmt.Errorf("creating ipset %s: %w", spec.Name, err))
				continue
			}
		}
		usable[id] = true
	}
	return usable, errs, nil
}

// unmark restores the counts that dump negated, and returns the counted
// entries the kernel lacks, in the sets that can take them.
func unmark(count map[key]int32, usable [desired.NumSets]bool) []key {
	var adds []key
	for k, n := range count {
		switch {
		case n < 0:
			count[k] = -n
		case usable[k.set]:
			adds = append(adds, k)
		}
	}
	return adds
}

// startPerSet sets perSet to what the kernel holds before adds and dels
// are written: write counts what it adds and deletes.
func (a *Applier) startPerSet(adds, dels []key) {
	a.perSet = [desired.NumSets]int{}
	for k := range a.count {
		a.perSet[k.set]++
	}
	for _, k := range adds {
		a.perSet[k.set]--
	}
	for _, k := range dels {
		a.perSet[k.set]++
	}
}

// Counts returns the number of entries per set as last applied.
func (a *Applier) Counts() map[string]int {
	out := make(map[string]int, desired.NumSets)
	for id := range desired.NumSets {
		out[id.Spec().Name] = a.perSet[id]
	}
	return out
}

// splitMarked returns the keys of skbinfo sets among dels, and the others.
func splitMarked(dels []key) (marked, rest []key) {
	for _, k := range dels {
		if k.set.Spec().SkbInfo {
			marked = append(marked, k)
		} else {
			rest = append(rest, k)
		}
	}
	return marked, rest
}

// key is a member in 40 bytes instead of 112: the applier keeps one per
// entry of lbd's sets (~200,000 at 10,000 services x 10 real servers).
// The set's type and family say how to read it back (entry).
type key struct {
	// ip2 holds IP2 or, with an IP, Net's address; in a skbinfo set
	// (hash:ip,port: no second address) the mark, in its first 4 bytes.
	ip, ip2 [16]byte
	port    uint16
	set     desired.SetID
	proto   uint8
	bits    uint8 // Net's prefix length
}

func toKey(m desired.Member) key {
	e := m.Entry
	k := key{set: m.Set, port: e.Port, proto: protoNum(e.Proto)}
	switch {
	case e.IP.IsValid():
		k.ip = e.IP.As16()
		if e.Mark != 0 {
			binary.BigEndian.PutUint32(k.ip2[:], e.Mark)
		} else if e.IP2.IsValid() {
			k.ip2 = e.IP2.As16()
		} else if e.Net.IsValid() {
			k.ip2, k.bits = e.Net.Addr().As16(), uint8(e.Net.Bits())
		}
	case e.Net.IsValid():
		k.ip, k.bits = e.Net.Addr().As16(), uint8(e.Net.Bits())
	}
	return k
}

// entry turns k back into the entry its set holds.
func (k key) entry() desired.SetEntry {
	spec := k.set.Spec()
	addr := func(b [16]byte) netip.Addr {
		a := netip.AddrFrom16(b)
		if spec.Family == 4 {
			a = a.Unmap()
		}
		return a
	}
	var e desired.SetEntry
	switch spec.Type {
	case desired.HashNet:
		e.Net = netip.PrefixFrom(addr(k.ip), int(k.bits))
		return e
	case desired.HashIP:
		e.IP = addr(k.ip)
		return e
	}
	e.IP, e.Port = addr(k.ip), k.port
	e.Proto = entryProto(k.proto)
	switch {
	case spec.SkbInfo:
		e.Mark = binary.BigEndian.Uint32(k.ip2[:])
	case spec.Type == desired.HashIPPortIP:
		e.IP2 = addr(k.ip2)
	case spec.Type == desired.HashIPPortNT:
		e.Net = netip.PrefixFrom(addr(k.ip2), int(k.bits))
	}
	return e
}

// protoNum is the IP protocol number of p: one lbd serves, one
// entryProto read as its number, else TCP.
func protoNum(p lvs.Protocol) uint8 {
	if n := p.Number(); n != 0 {
		return n
	}
	if n, err := strconv.ParseUint(string(p), 10, 8); err == nil {
		return uint8(n)
	}
	return syscall.IPPROTO_TCP
}

// entryProto is the protocol of an entry's protocol number n. One lbd
// does not serve (a foreign entry in lbd's set) reads as its number,
// which no wanted entry has: the entry differs, and is replaced.
func entryProto(n uint8) lvs.Protocol {
	if p, ok := lvs.ProtocolOf(n); ok {
		return p
	}
	return lvs.Protocol(strconv.Itoa(int(n)))
}

func (k key) compare(o key) int {
	return cmp.Or(cmp.Compare(k.set, o.set), bytes.Compare(k.ip[:], o.ip[:]), cmp.Compare(k.proto, o.proto),
		cmp.Compare(k.port, o.port), bytes.Compare(k.ip2[:], o.ip2[:]), cmp.Compare(k.bits, o.bits))
}

// Cleanup destroys lbd's sets (after the rules that use them are gone),
// and no other set, whatever its name.
func Cleanup(k Kernel) ([]string, error) {
	var names []string
	err := genl.RetryDump(genl.ErrDumpInterrupted, func() error {
		names = names[:0]
		return k.Dump(func(name string, _ desired.SetType, _ int) func(desired.SetEntry) {
			if IsLBD(name) {
				names = append(names, name)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("listing ipsets: %w", err)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var done []string
	var errs []error
	for _, name := range names {
		if err := k.Destroy(name); err != nil {
			errs = append(errs, fmt.Errorf("destroying ipset %s: %w", name, err))
			continue
		}
		done = append(done, "ipset "+name)
	}
	return done, errors.Join(errs...)
}
