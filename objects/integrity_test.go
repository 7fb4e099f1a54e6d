package objects

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// commitRecords acknowledges n commits, each one raw key with a payload big
// enough that the log spans several 32 KiB blocks.
func commitRecords(t *testing.T, s *Store, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		mustUpdate(t, s, func(tx *Txn) error {
			return tx.Set(recordKey(i), recordValue(i))
		})
	}
}

func recordKey(i int) []byte   { return fmt.Appendf(nil, "rec/%05d", i) }
func recordValue(i int) []byte { return bytes.Repeat(fmt.Appendf(nil, "value-%05d;", i), 40) }

// largestWAL returns the path of the biggest write-ahead log in dir.
func largestWAL(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	best, size := "", int64(-1)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() > size {
			best, size = filepath.Join(dir, e.Name()), info.Size()
		}
	}
	if best == "" {
		t.Fatalf("no write-ahead log in %s", dir)
	}
	return best
}

// copyDir copies the files of a store directory, as a crash would leave
// them when taken while the store is open.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.Create(filepath.Join(to, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		src.Close()
		if err := dst.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// flipBytes inverts n bytes of the file at off (negative: from the end).
func flipBytes(t *testing.T, path string, off int64, n int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += int64(len(data))
	}
	for i := off; i < off+int64(n); i++ {
		data[i] ^= 0xff
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// lastChunkOffset returns the offset of the last chunk of log num in the
// WAL at path that verifies.
func lastChunkOffset(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	num, _ := walLogNum(path)
	last, off := -1, 0
	for off < len(data) {
		blockEnd := min((off/walBlockSize+1)*walBlockSize, len(data))
		if blockEnd-off < walShortHeader {
			off = blockEnd
			continue
		}
		c, ok := parseWALChunk(data, off)
		if !ok || c.logNum != num {
			if blockEnd-off < walSyncHeader && allZero(data[off:blockEnd]) {
				off = blockEnd
				continue
			}
			break
		}
		last, off = off, c.end
	}
	if last < 0 {
		t.Fatalf("no chunk in %s", path)
	}
	return last
}

// wantCorrupt checks that err reports a corrupt store: ErrCorrupt, the
// file by name and how to proceed.
func wantCorrupt(t *testing.T, err error, file string) {
	t.Helper()
	wantErr(t, err, ErrCorrupt)
	msg := err.Error()
	if !strings.Contains(msg, filepath.Base(file)) {
		t.Fatalf("corruption error does not name %s: %v", filepath.Base(file), err)
	}
	if !strings.Contains(msg, "restore the runtime directory from a backup") || !strings.Contains(msg, "does not repair") {
		t.Fatalf("corruption error does not say how to proceed: %v", err)
	}
}

// TestWALDamageRefusesOpen damages the write-ahead log of a store in the
// middle and at its last record, in a log closed cleanly and in one left by
// a crash. Where acknowledged commits follow the damage, Open (and a
// read-only Open) must refuse with ErrCorrupt naming the log, not drop them
// as a torn tail.
func TestWALDamageRefusesOpen(t *testing.T) {
	const n = 300
	cases := []struct {
		name  string
		crash bool // copy the directory while the store is open
		at    func(t *testing.T, wal string) int64
	}{
		{"middle of a closed log", false, func(t *testing.T, wal string) int64 { return fileSize(t, wal) / 2 }},
		{"middle of a crashed log", true, func(t *testing.T, wal string) int64 { return fileSize(t, wal) / 2 }},
		{"first block of a crashed log", true, func(t *testing.T, wal string) int64 { return 1000 }},
		{"last record of a closed log", false, func(t *testing.T, wal string) int64 {
			return int64(lastChunkOffset(t, wal)) + walSyncHeader + 5
		}},
		{"a record near the end of a crashed log", true, func(t *testing.T, wal string) int64 {
			return recordOffset(t, wal, n-6)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, dir, nil)
			commitRecords(t, s, 0, n)
			if tc.crash {
				crashed := filepath.Join(t.TempDir(), "crashed")
				copyDir(t, dir, crashed)
				closeTest(t, s)
				dir = crashed
			} else {
				closeTest(t, s)
			}
			wal := largestWAL(t, dir)
			flipBytes(t, wal, tc.at(t, wal), 4)

			_, err := Open(dir, Options{ReadOnly: true})
			wantCorrupt(t, err, wal)
			t.Log(err)
			_, err = Open(dir, Options{})
			wantCorrupt(t, err, wal)
			// Refusing left the log as it was, and released the directory.
			_, err = Open(dir, Options{})
			wantCorrupt(t, err, wal)
		})
	}
}

// recordOffset returns the offset of record i's value in the log at path.
func recordOffset(t *testing.T, path string, i int) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.LastIndex(data, recordValue(i)[:20])
	if at < 0 {
		t.Fatalf("record %d is not in the log", i)
	}
	return int64(at)
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

// TestWALTornTailOpens cuts the log of a crashed store in the middle of its
// last record, as a crash during the last write would. That record was
// never acknowledged: the store opens with every earlier commit.
func TestWALTornTailOpens(t *testing.T) {
	const n = 200
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	commitRecords(t, s, 0, n)
	crashed := filepath.Join(t.TempDir(), "crashed")
	copyDir(t, dir, crashed)
	closeTest(t, s)

	wal := largestWAL(t, crashed)
	last := lastChunkOffset(t, wal)
	if err := os.Truncate(wal, int64(last)+walSyncHeader+10); err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{true, false} {
		s2, err := Open(crashed, Options{ReadOnly: ro})
		if err != nil {
			t.Fatalf("Open(ReadOnly: %v) of a log with a torn tail: %v", ro, err)
		}
		keys := rawKeys(t, s2)
		for i := range n - 1 {
			if keys[string(recordKey(i))] != string(recordValue(i)) {
				t.Fatalf("acknowledged record %d missing after a torn tail", i)
			}
		}
		closeTest(t, s2)
	}
}

// renumberWAL rewrites the log number (and checksum) of every chunk of the
// log in data, as if it had been written as log to.
func renumberWAL(t *testing.T, data []byte, from, to uint32) []byte {
	t.Helper()
	out := append([]byte(nil), data...)
	off, n := 0, 0
	for off < len(out) {
		blockEnd := min((off/walBlockSize+1)*walBlockSize, len(out))
		if blockEnd-off < walSyncHeader && allZero(out[off:blockEnd]) {
			off = blockEnd
			continue
		}
		c, ok := parseWALChunk(out, off)
		if !ok || c.logNum != from {
			break
		}
		binary.LittleEndian.PutUint32(out[off+7:], to)
		binary.LittleEndian.PutUint32(out[off:], walChecksum(out[off+6:c.end]))
		off, n = c.end, n+1
	}
	if n == 0 {
		t.Fatal("no chunk renumbered")
	}
	return out
}

// TestWALDamageNearCrashedEnd damages the second-to-last record of a log a
// crash left (no end-of-log trailer). Nothing after it proves it was
// synced: a crash that persisted unsynced writes out of order leaves the
// same bytes. The store opens without the records from the damage on,
// rather than refuse a directory a crash may legitimately leave.
func TestWALDamageNearCrashedEnd(t *testing.T) {
	const n = 200
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	commitRecords(t, s, 0, n)
	crashed := filepath.Join(t.TempDir(), "crashed")
	copyDir(t, dir, crashed)
	closeTest(t, s)

	wal := largestWAL(t, crashed)
	flipBytes(t, wal, recordOffset(t, wal, n-2), 4)
	s2, err := Open(crashed, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("damage a crash may leave: %v", err)
	}
	defer closeTest(t, s2)
	keys := rawKeys(t, s2)
	for i := range n - 2 {
		if keys[string(recordKey(i))] != string(recordValue(i)) {
			t.Fatalf("record %d before the damage is missing", i)
		}
	}
}

// TestScanWALRecycledLeftovers: a log written over a recycled file, and cut
// short by a crash, is followed by the previous log's chunks, which verify
// under another log number, and by its end-of-log trailer. That is the end
// of the log, not damage.
func TestScanWALRecycledLeftovers(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	commitRecords(t, s, 0, 150)
	closeTest(t, s)
	oldPath := largestWAL(t, dir)
	oldData, err := os.ReadFile(oldPath)
	if err != nil {
		t.Fatal(err)
	}
	oldNum, _ := walLogNum(oldPath)
	const newNum = 1000
	if oldNum+1 >= newNum {
		t.Fatalf("log number %d", oldNum)
	}
	// The new log: the first 20 records of the old one, renumbered, written
	// over the old file and cut in the middle of a chunk.
	newLog := renumberWAL(t, oldData, oldNum, newNum)
	cut := bytes.Index(oldData, recordValue(20)[:20])
	if cut < 0 {
		t.Fatal("record 20 is not in the log")
	}
	recycled := append(append([]byte(nil), newLog[:cut]...), oldData[cut:]...)
	if loss := scanWAL(recycled, newNum); loss != nil {
		t.Fatalf("leftovers of a recycled log reported as loss: damaged at %d: %s", loss.badOffset, loss.proof)
	}
	// The same bytes with the new log's later chunks intact after the cut:
	// that is damage in the middle.
	damaged := append([]byte(nil), newLog...)
	for i := cut; i < cut+4; i++ {
		damaged[i] ^= 0xff
	}
	if loss := scanWAL(damaged, newNum); loss == nil {
		t.Fatal("damage followed by records of the same log was not reported")
	}
}

// TestTableCorruptionIsReported damages a table file. In a small store
// Open reads every table and refuses with ErrCorrupt naming the file. In a
// larger one, reading the damaged block returns ErrCorrupt naming the file,
// with no panic; the store then refuses writes, and Close releases the
// directory. A damaged footer is found when any store opens.
func TestTableCorruptionIsReported(t *testing.T) {
	build := func(t *testing.T, large bool) (string, string) {
		t.Helper()
		dir := t.TempDir()
		s := openTest(t, dir, nil)
		commitRecords(t, s, 0, 400)
		if large {
			// Incompressible values, so that the tables outgrow what Open
			// reads in full.
			const chunk, perCommit = 64 << 10, 16
			for i := range verifyAllBytes/(chunk*perCommit) + 1 {
				mustUpdate(t, s, func(tx *Txn) error {
					for j := range perCommit {
						v := make([]byte, chunk)
						if _, err := rand.Read(v); err != nil {
							return err
						}
						if err := tx.Set(fmt.Appendf(nil, "big/%04d/%02d", i, j), v); err != nil {
							return err
						}
					}
					return nil
				})
			}
		}
		if err := s.db.Flush(); err != nil {
			t.Fatal(err)
		}
		if size := s.db.Metrics().Total().TablesSize; large != (size > verifyAllBytes) {
			t.Fatalf("tables hold %d bytes", size)
		}
		closeTest(t, s)
		var tables []string
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".sst") {
				tables = append(tables, filepath.Join(dir, e.Name()))
			}
		}
		sort.Strings(tables)
		if len(tables) == 0 {
			t.Fatal("no table after a flush")
		}
		return dir, tables[len(tables)-1]
	}

	t.Run("data block at open", func(t *testing.T) {
		dir, table := build(t, false)
		flipBytes(t, table, fileSize(t, table)/3, 16)
		for _, ro := range []bool{true, false} {
			_, err := Open(dir, Options{ReadOnly: ro})
			wantCorrupt(t, err, table)
		}
	})

	t.Run("data block on a read", func(t *testing.T) {
		dir, table := build(t, true)
		// Data blocks fill all but the end of the table.
		flipBytes(t, table, fileSize(t, table)/3, 16)
		for _, ro := range []bool{true, false} {
			s, err := Open(dir, Options{ReadOnly: ro})
			if err != nil {
				t.Fatalf("Open(ReadOnly: %v): %v (the damage is in a data block, read later)", ro, err)
			}
			var scanErr error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("reading a damaged table panicked: %v", r)
					}
				}()
				scanErr = s.View(func(tx *Txn) error {
					return tx.Scan(nil, func(k, v []byte) error { return nil })
				})
			}()
			wantCorrupt(t, scanErr, table)
			if !ro {
				err = s.Update(func(tx *Txn) error { return tx.Set([]byte("after"), []byte("v")) })
				wantErr(t, err, ErrCorrupt)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close after corruption: %v", err)
			}
		}
	})

	// The magic number at the very end, and the block handles before the
	// footer's padding.
	for _, off := range []int64{-8, -60} {
		t.Run(fmt.Sprintf("footer%d", off), func(t *testing.T) {
			dir, table := build(t, false)
			flipBytes(t, table, off, 4)
			for _, ro := range []bool{true, false} {
				_, err := Open(dir, Options{ReadOnly: ro})
				wantCorrupt(t, err, table)
				if strings.Contains(err.Error(), "carrier") {
					t.Fatalf("the error shows Pebble's placeholder: %v", err)
				}
			}
		})
	}
}

// chunkOffsets returns the offsets of the chunks of the log at path that
// verify, up to the first that does not.
func chunkOffsets(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	num, _ := walLogNum(path)
	var offs []int
	for off := 0; off < len(data); {
		blockEnd := min((off/walBlockSize+1)*walBlockSize, len(data))
		if blockEnd-off < walSyncHeader && allZero(data[off:blockEnd]) {
			off = blockEnd
			continue
		}
		c, ok := parseWALChunk(data, off)
		if !ok || c.logNum != num {
			break
		}
		offs = append(offs, off)
		off = c.end
	}
	return offs
}

// TestWALZeroedChunk zeroes a chunk's header in a log left by a crash, as a
// lost write would. Zeros look like the end of a log, so only the syncs
// later chunks record prove the loss: in the middle of the log they do,
// and the store refuses to open; at the last chunk nothing does, and the
// store opens without it.
func TestWALZeroedChunk(t *testing.T) {
	for _, middle := range []bool{true, false} {
		t.Run(fmt.Sprintf("middle=%v", middle), func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, dir, nil)
			commitRecords(t, s, 0, 300)
			crashed := filepath.Join(t.TempDir(), "crashed")
			copyDir(t, dir, crashed)
			closeTest(t, s)

			wal := largestWAL(t, crashed)
			offs := chunkOffsets(t, wal)
			at := offs[len(offs)-1]
			if middle {
				at = offs[len(offs)/3]
			}
			data, err := os.ReadFile(wal)
			if err != nil {
				t.Fatal(err)
			}
			clear(data[at : at+walSyncHeader])
			if err := os.WriteFile(wal, data, 0o644); err != nil {
				t.Fatal(err)
			}
			s2, err := Open(crashed, Options{ReadOnly: true})
			if !middle {
				if err != nil {
					t.Fatalf("a zeroed last chunk: %v", err)
				}
				closeTest(t, s2)
				return
			}
			wantCorrupt(t, err, wal)
			if !strings.Contains(err.Error(), "synced up to offset") && !strings.Contains(err.Error(), "two later syncs") {
				t.Fatalf("the loss is not proven by syncs: %v", err)
			}
		})
	}
}
