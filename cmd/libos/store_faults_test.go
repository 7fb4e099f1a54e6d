package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libos/libos/internal/testfs"
)

// storeFile returns the largest file of the runtime's store with the suffix.
func storeFile(t *testing.T, dir, suffix string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	best, size := "", int64(-1)
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), suffix) && info.Size() > size {
			best, size = filepath.Join(dir, "store", e.Name()), info.Size()
		}
	}
	if best == "" {
		t.Fatalf("no %s file in the store", suffix)
	}
	return best
}

// flipAt inverts 16 bytes of the file at frac of its length.
func flipAt(t *testing.T, path string, frac float64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := int(float64(len(data)) * frac)
	for i := off; i < off+16; i++ {
		data[i] ^= 0xff
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadCommandsWriteNothing: ps, checkpoint list and checkpoint inspect
// on an idle directory leave every file as it was, although the directory
// holds a log an ordinary open would replay and flush.
func TestReadCommandsWriteNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, stderr, code := runBin(t, "demo", "--dir", dir); code != 0 {
		t.Fatalf("demo exit %d:\n%s", code, stderr)
	}
	if out, stderr, code := runBin(t, "checkpoint", "create", "1", "--dir", dir); code != 0 {
		t.Fatalf("checkpoint create: exit %d %q %s", code, out, stderr)
	}
	before := testfs.Listing(t, dir)
	for _, args := range [][]string{
		{"ps", "--dir", dir}, {"ps", "--json", "--dir", dir},
		{"checkpoint", "list", "--dir", dir}, {"checkpoint", "inspect", "cp-1", "--dir", dir},
	} {
		if out, stderr, code := runBin(t, args...); code != 0 || out == "" {
			t.Fatalf("%v: exit %d %q %s", args, code, out, stderr)
		}
	}
	if after := testfs.Listing(t, dir); after != before {
		t.Fatalf("read commands changed the directory:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestCorruptStoreIsReported damages the store's write-ahead log in the
// middle, and a table. ps and resume must fail with an error that says the
// store is corrupt, names the file and says how to proceed; resume must
// not run anything again, and nothing panics.
func TestCorruptStoreIsReported(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, dir, file string) {
		t.Helper()
		for _, args := range [][]string{{"ps", "--dir", dir}, {"resume", "--dir", dir}, {"ps", "--dir", dir}} {
			out, stderr, code := runBin(t, args...)
			if code != 1 || out != "" || strings.Contains(stderr, "panic") {
				t.Fatalf("%v on a corrupt store: exit %d\nstdout: %s\nstderr: %s", args, code, out, stderr)
			}
			for _, want := range []string{"store is corrupt", filepath.Base(file), "restore the runtime directory from a backup"} {
				if !strings.Contains(stderr, want) {
					t.Fatalf("%v: the error lacks %q: %s", args, want, stderr)
				}
			}
			if strings.Contains(stderr, "call ") || strings.Contains(stderr, "running") {
				t.Fatalf("%v ran work on a corrupt store: %s", args, stderr)
			}
		}
	}

	t.Run("log", func(t *testing.T) {
		dir := t.TempDir()
		if _, stderr, code := runBin(t, "demo", "--dir", dir); code != 0 {
			t.Fatalf("demo exit %d:\n%s", code, stderr)
		}
		wal := storeFile(t, dir, ".log")
		flipAt(t, wal, 0.5)
		check(t, dir, wal)
	})

	t.Run("table", func(t *testing.T) {
		dir := t.TempDir()
		if _, stderr, code := runBin(t, "demo", "--dir", dir); code != 0 {
			t.Fatalf("demo exit %d:\n%s", code, stderr)
		}
		// An ordinary open flushes the demo's log into a table.
		if _, stderr, code := runBin(t, "resume", "--dir", dir); code != 0 {
			t.Fatalf("resume exit %d:\n%s", code, stderr)
		}
		table := storeFile(t, dir, ".sst")
		flipAt(t, table, 0.5)
		check(t, dir, table)
	})
}
