package objects

import (
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// MkdirDurable creates dir and any missing parents on fs, and syncs the
// parent of every directory it created, so the new entries survive a power
// loss: Pebble syncs the files it writes inside dir, but not the entries
// that lead to dir, and without them every commit in a brand-new runtime
// directory could vanish.
func MkdirDurable(fs vfs.FS, dir string, perm os.FileMode) error {
	var created []string
	for d := dir; ; d = fs.PathDir(d) {
		if _, err := fs.Stat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("stat %s: %w", d, err)
		}
		created = append(created, d)
		if fs.PathDir(d) == d {
			break
		}
	}
	if err := fs.MkdirAll(dir, perm); err != nil {
		return err
	}
	for _, d := range created {
		parent := fs.PathDir(d)
		if parent == d {
			continue
		}
		f, err := fs.OpenDir(parent)
		if err != nil {
			return fmt.Errorf("open directory %s to sync it: %w", parent, err)
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("sync directory %s: %w", parent, err)
		}
	}
	return nil
}

// ownerOnly takes group and other access away from dir, which holds what
// the store keeps (goals, contexts, results): one made before the store
// created its directories 0700, or by hand, may let every local user read
// it.
func ownerOnly(dir string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("stat store directory: %w", err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		if err := os.Chmod(dir, perm&^0o077); err != nil {
			return fmt.Errorf("make the store directory owner-only: %w", err)
		}
	}
	return nil
}
