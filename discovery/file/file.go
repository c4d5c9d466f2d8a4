// Package file is lbd's configuration source: it watches lbd.toml and
// conf.d/*.toml with fsnotify and emits a complete, validated snapshot of the
// configuration after every change that loads cleanly.
//
// It watches the directories, not the files: editors and tools save by
// writing a temporary file and renaming it over the original (vim, sed -i,
// config-management tools), which silently ends a watch on the file itself.
// Events are filtered to the names that matter, debounced, and followed by a
// reload of the whole configuration. A configuration that fails to load is
// rejected as a whole: nothing is emitted, the last good snapshot stays in
// force, and the error is logged once and shown by [Source.Status].
package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/lbdproject/lbd/config"
)

// Defaults of Options and the loop's timings.
const (
	DefaultDebounce = 200 * time.Millisecond

	// defaultRecheck is the period of the safety re-check that catches
	// changes whose events were missed (overflowed queue, edits through a
	// symlink that points outside the watched directories).
	defaultRecheck = 30 * time.Second
	// maxWaitFactor bounds how long a steady stream of events can postpone
	// a reload: at most maxWaitFactor*Debounce after the first event.
	maxWaitFactor = 10
	// Bounds of the backoff while a watched directory cannot be watched
	// (e.g. /etc/lbd being replaced by a rename).
	minRetry = 100 * time.Millisecond
	maxRetry = 5 * time.Second
)

// Options configure a Source.
type Options struct {
	// Path is the main configuration file; empty means config.DefaultPath.
	// Its directory and the conf.d directory next to it are watched.
	Path string
	// Load reads and validates the configuration at a path; nil means
	// config.Load. It must depend only on the content of the files
	// config.Files names (the main file and conf.d/*.toml): a reload whose
	// files are byte-for-byte those of the snapshot in force emits nothing.
	Load func(path string) (*config.Config, error)
	// Debounce is how long the files must stay quiet after an event before
	// they are reloaded; 0 means DefaultDebounce.
	Debounce time.Duration
	// Logger receives one line per applied or rejected configuration; nil
	// means slog.Default().
	Logger *slog.Logger
}

// Status describes the configuration in force and the latest load attempt.
type Status struct {
	// Path is the main configuration file.
	Path string
	// Loaded is when the configuration in force was loaded; zero until a
	// configuration has loaded cleanly.
	Loaded time.Time
	// Files are the files the configuration in force was read from.
	Files []string
	// Hash is a short hash of the content of those files.
	Hash string
	// Err is why the files on disk were rejected, or nil when the latest
	// load succeeded. While it is set the configuration in force is older
	// than the files.
	Err error
	// ErrTime is when Err happened.
	ErrTime time.Time
	// WatchErr is why changes are not being watched right now (e.g. the
	// configuration directory is missing), or nil.
	WatchErr error
}

// Source watches the configuration files and emits snapshots. Create it with
// New, start it with Run, and read snapshots from Updates.
type Source struct {
	path     string // as given; passed to Load
	mainFile string // absolute, for matching events
	mainDir  string
	confDir  string
	load     func(string) (*config.Config, error)
	debounce time.Duration
	recheck  time.Duration
	log      *slog.Logger

	updates chan *config.Config
	reload  chan struct{}
	started atomic.Bool

	mu     sync.Mutex
	status Status
}

// New returns a Source for opts. It does not touch the file system: all the
// work, including the first load, happens in Run.
func New(opts Options) (*Source, error) {
	if opts.Path == "" {
		opts.Path = config.DefaultPath
	}
	if opts.Load == nil {
		opts.Load = config.Load
	}
	if opts.Debounce < 0 {
		return nil, fmt.Errorf("discovery/file: negative debounce %v", opts.Debounce)
	}
	if opts.Debounce == 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	// Events name files by the path that was watched; an absolute path
	// keeps matching them independent of how Path was spelled.
	abs, err := filepath.Abs(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("discovery/file: config path %q: %w", opts.Path, err)
	}
	return &Source{
		path:     opts.Path,
		mainFile: abs,
		mainDir:  filepath.Dir(abs),
		confDir:  config.ConfDirOf(abs),
		load:     opts.Load,
		debounce: opts.Debounce,
		recheck:  defaultRecheck,
		log:      opts.Logger,
		updates:  make(chan *config.Config, 1),
		reload:   make(chan struct{}, 1),
		status:   Status{Path: opts.Path},
	}, nil
}

// Updates returns the channel of snapshots. Each value is a complete
// configuration. It holds at most one unread snapshot, and a newer snapshot
// replaces an unread older one, so a slow reader never holds up the watcher
// and always gets the latest configuration. It is closed when Run returns.
func (s *Source) Updates() <-chan *config.Config { return s.updates }

// Reload asks Run to re-read the configuration now, skipping the debounce
// (for SIGHUP). It never blocks; requests made while one is pending merge.
func (s *Source) Reload() {
	select {
	case s.reload <- struct{}{}:
	default:
	}
}

// Status returns the configuration in force and the latest load result.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Files = slices.Clone(st.Files)
	return st
}

func (s *Source) setStatus(f func(*Status)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.status)
}

// Run loads the configuration, delivers it, and then watches for changes
// until ctx is done; it returns nil then. If the first load fails, Run keeps
// watching and delivers the first configuration that loads cleanly. Run may
// be called once; it closes Updates when it returns.
func (s *Source) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("discovery/file: Run called twice")
	}
	defer close(s.updates)

	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("discovery/file: creating watcher: %w", err)
	}
	// Close stops fsnotify's goroutine and waits for it.
	defer w.Close()

	l := &loop{Source: s, w: w, watched: map[string]os.FileInfo{}}
	return l.run(ctx)
}

// loop is the state of one Run; only Run's goroutine touches it.
type loop struct {
	*Source
	w *fsnotify.Watcher
	// watched holds the identity of each directory when its watch was
	// added, to notice that the path now names another directory.
	watched map[string]os.FileInfo

	watchErr error         // current watch problem, for logging once
	backoff  time.Duration // next retry delay while watchErr != nil

	attempted string // fingerprint of the files at the latest load
	delivered string // fingerprint of the snapshot in force; "" if unknown
	failed    bool   // the latest load failed

	debounceTimer *time.Timer // fires when a burst of events has settled
	retryTimer    *time.Timer // fires to retry watching while watchErr != nil
	pendingSince  time.Time   // first event of the current burst; zero if none
}

func (l *loop) run(ctx context.Context) error {
	l.debounceTimer = stoppedTimer()
	defer l.debounceTimer.Stop()
	l.retryTimer = stoppedTimer()
	defer l.retryTimer.Stop()
	recheck := time.NewTicker(l.recheck)
	defer recheck.Stop()

	l.settle()
	// Always load once at start, even if the directory is missing, so that
	// the failure is visible in Status.
	l.loadNow(false)

	for {
		select {
		case <-ctx.Done():
			return nil

		case ev, ok := <-l.w.Events:
			if !ok {
				return errors.New("discovery/file: watcher stopped unexpectedly")
			}
			if l.relevant(ev.Name) {
				l.arm()
			}

		case err, ok := <-l.w.Errors:
			if !ok {
				return errors.New("discovery/file: watcher stopped unexpectedly")
			}
			// Events may have been lost (e.g. fsnotify.ErrEventOverflow):
			// re-read everything rather than trust the last state.
			l.log.Debug("config watcher error; reloading", "error", err)
			l.arm()

		case <-l.debounceTimer.C:
			l.debounced()

		case <-l.reload:
			// An explicit request always reads and answers in the log,
			// even when the directory is missing.
			l.settle()
			l.loadNow(true)

		case <-l.retryTimer.C:
			if reload, present := l.settle(); reload && present {
				l.loadNow(false)
			}

		case <-recheck.C:
			l.recheckFiles()
		}
	}
}

// settle re-establishes watches and reports whether a reload is due
// because a directory came back or appeared.
func (l *loop) settle() (reload, mainPresent bool) {
	changed, err := l.reconcile()
	l.setWatchErr(err)
	if err != nil {
		l.retryTimer.Reset(l.backoff)
		l.backoff = min(2*l.backoff, maxRetry)
	} else {
		l.retryTimer.Stop()
		l.backoff = minRetry
	}
	return changed, !errors.Is(err, errMainDirMissing)
}

// arm schedules a reload once events stop for Debounce, but no later
// than maxWaitFactor*Debounce after the first one, so that constant
// writes still lead to a reload.
func (l *loop) arm() {
	now := time.Now()
	if l.pendingSince.IsZero() {
		l.pendingSince = now
	}
	wait := min(l.debounce, l.pendingSince.Add(maxWaitFactor*l.debounce).Sub(now))
	l.debounceTimer.Reset(max(wait, 0))
}

// loadNow reads the files now. Events received so far are covered by it,
// so a pending debounce is dropped.
func (l *loop) loadNow(explicit bool) {
	l.debounceTimer.Stop()
	l.pendingSince = time.Time{}
	l.loadAndDeliver(explicit)
}

// debounced reloads after a burst of events has settled.
func (l *loop) debounced() {
	l.pendingSince = time.Time{}
	// While the directory is missing there is nothing to read;
	// the retry reloads when it is back.
	if _, present := l.settle(); present {
		l.loadNow(false)
	}
}

// recheckFiles is the periodic safety re-check: it reloads when a watch
// had to be re-established or the files differ from the latest load.
func (l *loop) recheckFiles() {
	reload, present := l.settle()
	if !present {
		return
	}
	if fp, _ := l.fingerprint(); reload || fp != l.attempted {
		l.loadNow(false)
	}
}

// stoppedTimer returns a timer that fires only after Reset.
func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// relevant reports whether an event on name may change the configuration.
// Per-event work stays this cheap: everything else waits for the debounce.
func (l *loop) relevant(name string) bool {
	name = filepath.Clean(name)
	switch name {
	case l.mainFile, l.mainDir, l.confDir:
		return true
	}
	dir, base := filepath.Dir(name), filepath.Base(name)
	if dir != l.mainDir && dir != l.confDir {
		return false
	}
	// Kubernetes' atomic writer swaps a "..data" symlink; the visible
	// files are symlinks through it and get no events of their own.
	if strings.HasPrefix(base, "..") {
		return true
	}
	// Anything else in the main directory, and editors' temporary, swap
	// and lock files (.x.toml.swp, 4913, x.toml~, sedXXXXXX, .#x.toml) in
	// conf.d, is not read: config.Files skips hidden files.
	return dir == l.confDir && filepath.Ext(base) == ".toml" && !strings.HasPrefix(base, ".")
}

var errMainDirMissing = errors.New("configuration directory is missing")

// reconcile makes the watcher follow the main directory and conf.d as they
// are now: it adds watches for directories that appeared, and replaces
// watches that still follow a directory that was removed or renamed away.
// changed reports that a watch was added or replaced, i.e. there may be
// changes no event told about.
func (l *loop) reconcile() (changed bool, err error) {
	present, changed, err := l.ensure(l.mainDir)
	if err != nil {
		return changed, err
	}
	if !present {
		// conf.d is inside: drop a watch that may follow its old inode.
		_, c, _ := l.ensure(l.confDir)
		return changed || c, fmt.Errorf("%s: %w", l.mainDir, errMainDirMissing)
	}
	_, c, err := l.ensure(l.confDir)
	return changed || c, err
}

// ensure makes the watcher follow dir if it exists and drops its watch if
// it does not.
func (l *loop) ensure(dir string) (present, changed bool, err error) {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		if _, ok := l.watched[dir]; ok {
			_ = l.w.Remove(dir) // fsnotify may have dropped it already
			delete(l.watched, dir)
			changed = true
		}
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return false, changed, nil // absent (a non-directory can't be read as conf.d either)
		}
		return false, changed, fmt.Errorf("watching %s: %w", dir, err)
	}
	if old, ok := l.watched[dir]; ok && os.SameFile(old, fi) && slices.Contains(l.w.WatchList(), dir) {
		return true, false, nil
	}
	// A watch on the path may still follow the old directory's inode.
	_ = l.w.Remove(dir)
	delete(l.watched, dir)
	if err := l.w.Add(dir); err != nil {
		return false, true, fmt.Errorf("watching %s: %w", dir, err)
	}
	// If dir was replaced between Stat and Add, the watch follows the new
	// directory while fi describes the old one; the next reconcile notices
	// the mismatch and adds the watch again, which is harmless.
	l.watched[dir] = fi
	return true, true, nil
}

// setWatchErr records the watch state, logging only its transitions.
func (l *loop) setWatchErr(err error) {
	switch {
	case err != nil && l.watchErr == nil:
		l.log.Warn("cannot watch configuration; keeping the configuration in force and retrying", "error", err)
	case err == nil && l.watchErr != nil:
		l.log.Info("watching configuration again", "path", l.path)
	}
	l.watchErr = err
	l.setStatus(func(st *Status) { st.WatchErr = err })
}

// fingerprint hashes the files config.Load reads (see fingerprint).
func (l *loop) fingerprint() (string, []string) { return fingerprint(l.mainFile) }

// loadAndDeliver loads the configuration and, if it is good and differs
// from the one in force, delivers it. explicit marks a Reload request,
// which is always answered with a log line.
func (l *loop) loadAndDeliver(explicit bool) {
	before, read := l.fingerprint()
	cfg, err := l.load(l.path)
	if err == nil && cfg == nil {
		err = errors.New("loader returned no configuration")
	}
	now := time.Now()
	l.attempted = before
	if err != nil {
		l.failed = true
		l.logRejected(before, err)
		l.setStatus(func(st *Status) { st.Err, st.ErrTime = err, now })
		return
	}
	wasFailed := l.failed
	l.failed = false
	l.setStatus(func(st *Status) { st.Err, st.ErrTime = nil, time.Time{} })

	// The fingerprint identifies cfg only if the files did not change while
	// Load read them and Load read no file the fingerprint did not.
	after, _ := l.fingerprint()
	exact := before == after && covers(read, cfg.Files)
	if exact && before == l.delivered {
		lvl := slog.LevelDebug
		if explicit || wasFailed {
			lvl = slog.LevelInfo
		}
		l.log.Log(context.Background(), lvl, "configuration unchanged", "hash", short(before))
		return
	}

	l.delivered = ""
	if exact {
		l.delivered = before
	}
	// Status and log first: whoever receives the snapshot sees them.
	l.log.Info("configuration applied", "files", cfg.Files, "hash", short(before))
	files := slices.Clone(cfg.Files)
	l.setStatus(func(st *Status) { st.Loaded, st.Files, st.Hash = now, files, short(before) })

	// One sender (this goroutine): after dropping an unread snapshot the
	// send cannot block.
	select {
	case <-l.updates:
	default:
	}
	l.updates <- cfg
}

// logRejected logs a rejected load: one line per problem, so that each
// file:line stays readable in the journal.
func (l *loop) logRejected(fp string, err error) {
	var list config.ErrorList
	if !errors.As(err, &list) {
		l.log.Error("configuration rejected; keeping the configuration in force", "hash", short(fp), "error", err)
		return
	}
	l.log.Error("configuration rejected; keeping the configuration in force", "hash", short(fp), "problems", len(list))
	for i, e := range list {
		if i == maxLoggedProblems {
			l.log.Error("more configuration problems not logged; lbd check-config lists them", "count", len(list)-i)
			return
		}
		l.log.Error("configuration problem", "at", e.Pos.String(), "key", e.Key, "problem", e.Msg)
	}
}

// maxLoggedProblems bounds the journal lines of one rejection.
const maxLoggedProblems = 100

// covers reports whether every file in loaded is one of read.
func covers(read, loaded []string) bool {
	for _, f := range loaded {
		abs, err := filepath.Abs(f)
		if err != nil || !slices.Contains(read, abs) {
			return false
		}
	}
	return true
}
