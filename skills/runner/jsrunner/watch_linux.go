package jsrunner

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// graphWatch lets the bundle cache skip re-stat'ing a graph's files on every
// call. It holds one inotify instance; a bundle is trusted without a stat
// only while no event has arrived for anything its files' paths resolve
// through: each file itself (whichever path wrote it), its directory, and
// every directory on the way to it (events for the next path component
// only). The kernel queues an event before the change's system call
// returns, and every lookup drains the queue first, so a change that
// finished before a call started is always seen by it. Trust is armed
// before the full check (graphUnchanged) that grants it, so nothing can
// slip between the two. Writes through a shared memory mapping raise no
// event; so do changes a network file system makes on another host, which
// is why only local file systems are trusted at all.
type graphWatch struct {
	mu       sync.Mutex
	fd       int // -1 once closed or when inotify is unavailable
	watches  map[int32]*dirWatch
	overflow uint64 // bumped when the kernel dropped events
	// serial numbers every generation, so a watch descriptor the kernel
	// hands out again never repeats a generation a bundle depends on.
	serial uint64
	buf    []byte
}

// dirWatch is one watched inode. gen counts the events that matter to it.
type dirWatch struct {
	path  string
	all   bool                // any event counts
	names map[string]struct{} // else only events for these entries
	gen   uint64
}

// watchDeps is what a trusted bundle depends on: the generations of its
// watches when the full check that trusted it ran.
type watchDeps struct {
	overflow uint64
	wds      []int32
	gens     []uint64
}

const (
	watchMask = syscall.IN_MODIFY | syscall.IN_ATTRIB | syscall.IN_CLOSE_WRITE | syscall.IN_CREATE |
		syscall.IN_DELETE | syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF | syscall.IN_MOVED_FROM |
		syscall.IN_MOVED_TO
	selfEvents = syscall.IN_DELETE_SELF | syscall.IN_MOVE_SELF | syscall.IN_IGNORED | syscall.IN_UNMOUNT
)

func newGraphWatch() *graphWatch {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		fd = -1 // e.g. the per-user instance limit: every lookup stats instead
	}
	return &graphWatch{fd: fd, watches: make(map[int32]*dirWatch), buf: make([]byte, 64<<10)}
}

func (w *graphWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd >= 0 {
		syscall.Close(w.fd)
		w.fd = -1
	}
}

// localFS lists the file systems whose changes all come through this
// kernel, so inotify sees them (by statfs magic number).
var localFS = map[int64]bool{
	0xEF53:     true, // ext2/3/4
	0x58465342: true, // xfs
	0x9123683E: true, // btrfs
	0x01021994: true, // tmpfs
	0x794c7630: true, // overlayfs
	0xF2F52010: true, // f2fs
	0x2FC12FC1: true, // zfs
}

// arm watches everything the files of a graph in absDir resolve through and
// returns the dependencies to trust once a full check has passed, or nil
// when this graph cannot be watched (then every lookup checks it fully).
func (w *graphWatch) arm(absDir string, files []graphFile) *watchDeps {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil
	}
	w.drain()
	deps := &watchDeps{overflow: w.overflow}
	seen := make(map[int32]bool)
	add := func(path string, all bool, name string) bool {
		var st syscall.Statfs_t
		if err := syscall.Statfs(path, &st); err != nil || !localFS[int64(st.Type)] {
			return false
		}
		wd, err := syscall.InotifyAddWatch(w.fd, path, watchMask)
		if err != nil {
			return false
		}
		dw := w.watches[int32(wd)]
		if dw == nil {
			w.serial++
			dw = &dirWatch{path: path, names: make(map[string]struct{}), gen: w.serial}
			w.watches[int32(wd)] = dw
		}
		if all {
			dw.all = true
		} else {
			dw.names[name] = struct{}{}
		}
		if !seen[int32(wd)] {
			seen[int32(wd)] = true
			deps.wds = append(deps.wds, int32(wd))
			deps.gens = append(deps.gens, dw.gen)
		}
		return true
	}
	// chain watches every directory from the root to path's parent for the
	// next component of path; path itself is watched whole.
	chain := func(path string) bool {
		if !add(path, true, "") {
			return false
		}
		for dir := path; ; {
			parent := filepath.Dir(dir)
			if parent == dir {
				return true
			}
			if !add(parent, false, filepath.Base(dir)) {
				return false
			}
			dir = parent
		}
	}
	for _, f := range files {
		literal := filepath.Join(absDir, filepath.FromSlash(f.rel))
		real, err := filepath.EvalSymlinks(literal)
		if err != nil || !chain(literal) || (real != literal && !chain(real)) {
			return nil
		}
	}
	return deps
}

// trusted reports whether no event that matters to deps has arrived since
// they were taken.
func (w *graphWatch) trusted(deps *watchDeps) bool {
	if deps == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return false
	}
	w.drain()
	if w.overflow != deps.overflow {
		return false
	}
	for i, wd := range deps.wds {
		dw := w.watches[wd]
		if dw == nil || dw.gen != deps.gens[i] {
			return false
		}
	}
	return true
}

// drain reads every queued event without blocking. w.mu is held.
func (w *graphWatch) drain() {
	for {
		n, err := syscall.Read(w.fd, w.buf)
		if err != nil || n <= 0 {
			if err != nil && !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EINTR) {
				// An unreadable queue can no longer vouch for anything.
				syscall.Close(w.fd)
				w.fd = -1
			}
			return
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			nameBytes := w.buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
			off += syscall.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&syscall.IN_Q_OVERFLOW != 0 {
				w.overflow++
				continue
			}
			dw := w.watches[ev.Wd]
			if dw == nil {
				continue
			}
			name := strings.TrimRight(string(nameBytes), "\x00")
			if _, named := dw.names[name]; dw.all || ev.Mask&selfEvents != 0 || named {
				w.serial++
				dw.gen = w.serial
			}
			if ev.Mask&syscall.IN_IGNORED != 0 {
				// The kernel removed the watch; a later arm adds a new one.
				delete(w.watches, ev.Wd)
			}
		}
	}
}
