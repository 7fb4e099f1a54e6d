//go:build unix

package skillpkg

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// mkfifo makes a FIFO at dir/rel.
func mkfifo(t *testing.T, dir, rel string) string {
	t.Helper()
	full := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(full, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	return full
}

// within runs f and fails the test if it has not returned in 10 s; fifo,
// when given, is then opened for writing so that a reader stuck on it
// returns.
func within(t *testing.T, fifo string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		t.Fatalf("still reading %s after 10 s: admission waits on a FIFO", fifo)
		return nil
	}
}

// TestLoadRefusesFIFOs refuses, without waiting for a writer, a FIFO where
// admission reads a package file: opening one for reading blocks until a
// writer appears, which hung skill check and run --skills for ever.
func TestLoadRefusesFIFOs(t *testing.T) {
	const skill = "---\nname: x\n---\nx"
	for _, rel := range []string{"SKILL.md", "X.yaml", "skill.yaml", "tools/ns/t/manifest.json"} {
		t.Run(rel, func(t *testing.T) {
			dir := t.TempDir()
			if rel != "SKILL.md" {
				writeTree(t, dir, map[string]string{"SKILL.md": skill})
			}
			fifo := mkfifo(t, dir, rel)
			err := within(t, fifo, func() error { _, err := Load(dir); return err })
			var ae *AdmissionError
			if !errors.As(err, &ae) || ae.File != rel || ae.Rule != "must be a regular file" {
				t.Fatalf("Load error = %v, want %s: must be a regular file", err, rel)
			}
		})
	}
}

// TestOpenRegularRefusesAFIFO is the check on the open file that catches a
// FIFO swapped in after an earlier Stat: it returns at once.
func TestOpenRegularRefusesAFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := mkfifo(t, dir, "f")
	err := within(t, fifo, func() error {
		f, err := OpenRegular(os.OpenFile, fifo)
		if err == nil {
			f.Close()
		}
		return err
	})
	if !errors.Is(err, ErrNotRegular) {
		t.Fatalf("OpenRegular(FIFO) = %v, want ErrNotRegular", err)
	}
}
