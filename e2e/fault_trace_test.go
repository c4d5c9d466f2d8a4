//go:build e2e

package e2e

// Killing lbd at a chosen point of a sync, with no hook in lbd: it runs
// under strace, which reports every kernel request it makes (netlink
// sends, the iptables-restore it starts, the ledger's rename) on a pipe,
// and the test sends SIGKILL when the count it waits for is reached.
//
// strace's own injection (-e inject=sendto:signal=KILL:when=N) is not
// used: it counts per thread ("per syscall and per tracee", strace(1)),
// and Go moves a goroutine's system calls between threads, so "the Nth
// send" would not be the Nth send of lbd. Counting here is global. A
// traced call stops lbd until strace has printed it, so the kill lands
// after the counted call and before, or at most a few calls after, the
// next one: the counts at lbd's death, which are reported, are exact.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// phase is the part of a sync a traced call belongs to.
type phase int

const (
	phaseAddrs  phase = iota // rtnetlink requests: lbd0, its VIPs, address lookups
	phaseSets                // nfnetlink requests of lbd itself: its ipsets
	phaseRules               // an ip(6)tables-restore started by lbd
	phaseLedger              // the IPVS ownership ledger renamed into place
	phaseIPVS                // generic netlink requests: IPVS
	numPhases
)

func (p phase) String() string {
	return [...]string{"addresses", "ipsets", "iptables", "ledger", "IPVS"}[p]
}

// traceCounts counts lbd's traced calls per phase.
type traceCounts [numPhases]int

func (c traceCounts) String() string {
	var parts []string
	for p := range numPhases {
		parts = append(parts, fmt.Sprintf("%s %d", p, c[p]))
	}
	return strings.Join(parts, ", ")
}

// straceArgs trace only what writes lbd's kernel state, decode each
// socket's protocol (-yy) and print no buffers (-s 0); seccomp-bpf keeps
// the other system calls at full speed.
var straceArgs = []string{"strace", "-f", "-qq", "-yy", "-s", "0", "--seccomp-bpf",
	"-e", "trace=sendto,sendmsg,execve,rename,renameat,renameat2", "-e", "signal=none", "-o", "/proc/self/fd/3"}

// tracer follows strace's output: which pid is lbd, which are its
// children (their own requests are not lbd's), and lbd's counts.
type tracer struct {
	lbd      int
	children map[int]bool
	counts   traceCounts
}

// line takes one line of strace -f -o output ("PID call(...) = ret") and
// reports the phase of the call it starts, if any.
func (tr *tracer) line(l string) (phase, bool) {
	pidText, call, ok := strings.Cut(strings.TrimSpace(l), " ")
	pid, err := strconv.Atoi(pidText)
	if !ok || err != nil {
		return 0, false
	}
	call = strings.TrimSpace(call)
	switch {
	case strings.HasPrefix(call, "execve("):
		if tr.lbd == 0 {
			tr.lbd = pid
			return 0, false
		}
		if pid == tr.lbd {
			return 0, false
		}
		tr.children[pid] = true
		if strings.Contains(call, "tables-restore") || strings.Contains(call, "tables-nft-restore") {
			return phaseRules, true
		}
		return 0, false
	case tr.children[pid]:
		return 0, false
	case strings.HasPrefix(call, "sendto(") || strings.HasPrefix(call, "sendmsg("):
		switch {
		case strings.Contains(call, "<NETLINK:[ROUTE"):
			return phaseAddrs, true
		case strings.Contains(call, "<NETLINK:[GENERIC"):
			return phaseIPVS, true
		case strings.Contains(call, "<NETLINK:[NETFILTER"):
			return phaseSets, true
		}
	case strings.HasPrefix(call, "rename"):
		if strings.Contains(call, ledgerName+".tmp") {
			return phaseLedger, true
		}
	}
	return 0, false
}

// ledgerName is the ownership ledger's file in the state directory.
const ledgerName = "ipvs-owned.json"

// tracedRun is lbd run under strace, as far as the test let it go.
type tracedRun struct {
	counts traceCounts // lbd's calls strace saw before lbd died
	// firsts holds the counts as they were at each phase's first call.
	firsts [numPhases]traceCounts
	log    string // lbd's own output
	pid    int
	killed bool // the kill point was reached
}

// killSpec says when runTraced kills lbd: as soon as the counts reach
// count[phase] (checked after every traced call), or, with afterSync,
// once lbd has logged its first sync.
type killSpec struct {
	phase     phase
	count     int
	afterSync bool
}

// syncApplied is what lbd logs after a sync that wrote something.
const syncApplied = `msg="sync applied"`

// runTraced runs lbd (its configuration and state directory as l has
// them) under strace on l's director and SIGKILLs it when k says. It
// fails the test if lbd's sync ends without reaching the kill point.
func runTraced(t *testing.T, l *lbd, k killSpec) tracedRun {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	args := append(append([]string{}, straceArgs...), l.bin, "run", "-c", l.cfgPath, "--state-dir", l.stateDir, "--log-level", "debug")
	cmd := l.dir.Command(context.Background(), args...)
	var log lockedBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.ExtraFiles = []*os.File{w}
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting lbd under strace: %v", err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	events := traceEvents(r)
	run := tracedRun{}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var synced time.Time // when lbd's log first said it synced
	for {
		kill := false
		select {
		case ev, open := <-events:
			if !open {
				err := <-exited
				run.log = log.String()
				if !run.killed {
					t.Fatalf("lbd under strace ended by itself (%v); counts %v; its output:\n%s", err, run.counts, run.log)
				}
				return run
			}
			run.pid = ev.pid
			if ev.ok {
				run.counts[ev.ph]++
				if run.counts[ev.ph] == 1 {
					run.firsts[ev.ph] = run.counts
				}
			}
			kill = !k.afterSync && run.counts[k.phase] >= k.count
		case <-tick.C:
			if synced.IsZero() && strings.Contains(log.String(), syncApplied) {
				synced = time.Now()
			}
			kill = k.afterSync && !synced.IsZero()
			// The last events may still be on their way: a grace period.
			if !run.killed && !k.afterSync && !synced.IsZero() && time.Since(synced) > 10*time.Second {
				t.Fatalf("lbd's sync ended before %s call %d: it made %v", k.phase, k.count, run.counts)
			}
		}
		if kill && !run.killed && run.pid != 0 {
			if err := syscall.Kill(run.pid, syscall.SIGKILL); err != nil {
				t.Fatalf("killing lbd (pid %d): %v", run.pid, err)
			}
			run.killed = true
		}
	}
}

// traceEvent is one line of strace's output, read: its phase if it is
// one of lbd's calls, and lbd's pid as known so far.
type traceEvent struct {
	ph  phase
	ok  bool
	pid int
}

// traceEvents reads strace's output from r until it ends.
func traceEvents(r *os.File) <-chan traceEvent {
	events := make(chan traceEvent, 1024)
	go func() {
		defer close(events)
		tr := &tracer{children: map[int]bool{}}
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			ph, ok := tr.line(sc.Text())
			events <- traceEvent{ph, ok, tr.lbd}
		}
	}()
	return events
}
