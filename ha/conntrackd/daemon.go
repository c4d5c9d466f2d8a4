package conntrackd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure a Daemon.
type Options struct {
	Program  string // conntrackd's path
	Settings Settings
	Logger   *slog.Logger
	// CommandTimeout bounds each command (10 s if 0): a commit of a large
	// external cache takes a while, a hung daemon must not hold a
	// failover forever.
	CommandTimeout time.Duration
	// MinRestart and MaxRestart bound the wait before restarting a
	// daemon that exited (1 s and 30 s if 0), doubling in between.
	MinRestart, MaxRestart time.Duration
	// OnStarted, when set, is called (from a goroutine of its own) once a
	// started conntrackd answers on its control socket: a new one knows
	// nothing of the peer's entries and may ask for them.
	OnStarted func()
}

// Status is what lbd status shows of conntrackd.
type Status struct {
	Running  bool
	PID      int
	Started  time.Time
	Restarts int
	LastExit string // why the daemon last exited ("" if never)
	// LastCommand is the latest transition's commands ("commit", "lead",
	// "follow"), when they ran and how they ended ("" if well).
	LastCommand      string
	LastCommandAt    time.Time
	LastCommandError string
}

// Daemon supervises one conntrackd.
type Daemon struct {
	opts Options
	conf string

	mu sync.Mutex
	st Status
}

// New returns a Daemon; Run starts it.
func New(opts Options) *Daemon {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.CommandTimeout <= 0 {
		opts.CommandTimeout = 10 * time.Second
	}
	if opts.MinRestart <= 0 {
		opts.MinRestart = time.Second
	}
	if opts.MaxRestart < opts.MinRestart {
		opts.MaxRestart = max(30*time.Second, opts.MinRestart)
	}
	return &Daemon{opts: opts, conf: filepath.Join(opts.Settings.Dir, "conntrackd.conf")}
}

// Status returns the daemon's state.
func (d *Daemon) Status() Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.st
}

// Run writes the configuration and runs conntrackd until ctx ends,
// restarting it when it exits; it returns when conntrackd has stopped.
func (d *Daemon) Run(ctx context.Context) error {
	if err := os.MkdirAll(d.opts.Settings.Dir, 0o700); err != nil {
		return fmt.Errorf("conntrackd: %w", err)
	}
	if err := writeFile(d.conf, Render(d.opts.Settings)); err != nil {
		return fmt.Errorf("conntrackd: writing its configuration: %w", err)
	}
	wait := d.opts.MinRestart
	for {
		// A lock left by a conntrackd that died with an lbd killed
		// outright (Pdeathsig ended it) would keep the new one from
		// starting.
		os.Remove(filepath.Join(d.opts.Settings.Dir, "lock"))
		os.Remove(filepath.Join(d.opts.Settings.Dir, "ctl")) // its socket: see whenAnswering
		began := time.Now()
		err := d.runOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(began) > 10*d.opts.MaxRestart {
			wait = d.opts.MinRestart // it ran well for a while
		}
		d.opts.Logger.Error("conntrackd exited; masqueraded connections are not replicated until it runs again", "error", err, "restart_in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, d.opts.MaxRestart)
	}
}

// runOnce runs conntrackd until it exits or ctx ends (then it is sent
// SIGTERM, and SIGKILL 5 s later).
func (d *Daemon) runOnce(ctx context.Context) error {
	cmd := exec.Command(d.opts.Program, "-C", d.conf)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	// It must not outlive lbd (its lock would keep the next one out).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return err
	}
	d.mu.Lock()
	if d.st.PID != 0 || d.st.LastExit != "" {
		d.st.Restarts++
	}
	d.st.Running, d.st.PID, d.st.Started = true, cmd.Process.Pid, time.Now()
	d.mu.Unlock()
	d.opts.Logger.Info("conntrackd started", "pid", cmd.Process.Pid, "config", d.conf)
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		d.logLines(out)
	}()
	if d.opts.OnStarted != nil {
		go d.whenAnswering(ctx, cmd.Process.Pid)
	}
	stop := context.AfterFunc(ctx, func() {
		cmd.Process.Signal(syscall.SIGTERM)
		time.AfterFunc(5*time.Second, func() { cmd.Process.Kill() })
	})
	defer stop()
	<-logged
	err = cmd.Wait()
	d.mu.Lock()
	d.st.Running = false
	d.st.LastExit = exitText(err)
	d.mu.Unlock()
	return err
}

func exitText(err error) string {
	if err == nil {
		return "exited"
	}
	return err.Error()
}

// whenAnswering calls OnStarted once conntrackd's control socket exists,
// unless that conntrackd (pid) stopped or 10 s passed.
func (d *Daemon) whenAnswering(ctx context.Context, pid int) {
	sock := filepath.Join(d.opts.Settings.Dir, "ctl")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if st := d.Status(); !st.Running || st.PID != pid || ctx.Err() != nil {
			return
		}
		if _, err := os.Stat(sock); err == nil {
			d.opts.OnStarted()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// maxLine bounds a logged line of conntrackd's output.
const maxLine = 300

// logLines logs conntrackd's output, a line at a time, at the level its
// own tag says.
func (d *Daemon) logLines(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64*1024)
	for sc.Scan() {
		line := sc.Text()
		if len(line) > maxLine {
			line = line[:maxLine] + "…"
		}
		level := slog.LevelInfo
		switch {
		case strings.Contains(line, "[ERROR]"):
			level = slog.LevelError
		case strings.Contains(line, "[warning]"):
			level = slog.LevelWarn
		}
		d.opts.Logger.Log(context.Background(), level, "conntrackd: "+line)
	}
	// A line too long for the buffer ends the scan: drain the rest, or
	// conntrackd would block on a full pipe.
	io.Copy(io.Discard, r)
}

// Commit puts the peer's replicated entries into the kernel's conntrack
// table (conntrackd -c). A new master does this before it binds the
// addresses: a reply that met no entry would be answered with a reset.
func (d *Daemon) Commit(ctx context.Context) error {
	return d.commands(ctx, "commit", "-c")
}

// Lead finishes becoming master: flush both caches, resync the internal
// one with the kernel's table, send it all to the peer (-f, -R, -B).
func (d *Daemon) Lead(ctx context.Context) error {
	return d.commands(ctx, "lead", "-f", "-R", "-B")
}

// Follow is becoming backup: ask the peer for its entries (-n).
func (d *Daemon) Follow(ctx context.Context) error {
	return d.commands(ctx, "follow", "-n")
}

func (d *Daemon) commands(ctx context.Context, what string, flags ...string) error {
	var errs []error
	for _, f := range flags {
		errs = append(errs, d.command(ctx, f))
	}
	err := errors.Join(errs...)
	d.mu.Lock()
	d.st.LastCommand, d.st.LastCommandAt, d.st.LastCommandError = what, time.Now(), ""
	if err != nil {
		d.st.LastCommandError = err.Error()
	}
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("conntrackd %s: %w", what, err)
	}
	return nil
}

func (d *Daemon) command(ctx context.Context, flag string) error {
	ctx, cancel := context.WithTimeout(ctx, d.opts.CommandTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, d.opts.Program, "-C", d.conf, flag)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if len(msg) > maxLine {
			msg = msg[:maxLine] + "…"
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w after %s", ctx.Err(), d.opts.CommandTimeout)
		}
		return fmt.Errorf("%s %s: %w: %s", d.opts.Program, flag, err, msg)
	}
	return nil
}

// writeFile replaces path's content atomically.
func writeFile(path, content string) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
