package objects

import (
	"fmt"
	"io"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// minSpillBytes is the smallest payload worth moving out of memory: below
// it the bookkeeping that stays costs about as much as the payload.
const minSpillBytes = 64

// localSpill holds runtime-local payloads moved out of memory, in an
// append-only file beside the database. The store removes the file when it
// opens and when it closes, so a spilled payload is lost after a reopen
// exactly as one kept in memory. A payload that cannot be spilled (a full
// disk) simply stays in memory.
type localSpill struct {
	fs   vfs.FS
	path string

	mu     sync.Mutex
	f      vfs.File // nil until the first spill
	size   int64
	broken bool // a write failed: nothing more is spilled
}

// spillPath is the spill file of the store in dir.
func spillPath(dir string) string { return dir + ".local-spill" }

func newLocalSpill(fs vfs.FS, path string) *localSpill {
	_ = fs.Remove(path) // what an earlier run left is lost by definition
	return &localSpill{fs: fs, path: path}
}

// write appends data and returns its offset.
func (sp *localSpill) write(data payload) (int64, error) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.broken {
		return 0, fmt.Errorf("objects: spill %s: an earlier write failed", sp.path)
	}
	if sp.f == nil {
		f, err := sp.fs.Create(sp.path, vfs.WriteCategoryUnspecified)
		if err != nil {
			sp.broken = true
			return 0, fmt.Errorf("objects: spill: %w", err)
		}
		sp.f = f
	}
	// vfs.File.Write may modify what it is given; payloads are shared.
	if _, err := sp.f.Write(data.appendTo(nil)); err != nil {
		sp.broken = true
		return 0, fmt.Errorf("objects: spill: %w", err)
	}
	off := sp.size
	sp.size += int64(data.len())
	return off, nil
}

// read returns the n bytes spilled at off.
func (sp *localSpill) read(off int64, n int) ([]byte, error) {
	sp.mu.Lock()
	f := sp.f
	sp.mu.Unlock()
	if f == nil {
		return nil, fmt.Errorf("objects: spill %s: not open", sp.path)
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
		return nil, fmt.Errorf("objects: spill %s: read %d bytes at %d: %w", sp.path, n, off, err)
	}
	return buf, nil
}

// close closes and removes the spill file.
func (sp *localSpill) close() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.f != nil {
		_ = sp.f.Close()
		sp.f = nil
	}
	_ = sp.fs.Remove(sp.path)
	sp.broken = true
}

// SpillLocal moves the committed runtime-local payloads of oids out of
// memory into the store's spill file; they read as before until the store
// closes. Oids without a runtime-local payload and payloads too small to be
// worth it are left as they are; a payload whose older version an open View
// may still need is spilled once that View ends. It is for payloads that are
// rarely read again, such as those of a process that ended.
func (s *Store) SpillLocal(oids ...string) {
	if s.readOnly || s.locals.spill == nil {
		return
	}
	for _, oid := range oids {
		if oid != "" {
			s.locals.spillOut(oid)
		}
	}
	s.locals.spillPending()
}
