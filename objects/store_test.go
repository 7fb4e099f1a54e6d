package objects

import (
	"bytes"
	"errors"
	"fmt"
	"log"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

func TestReopenKeepsDurableState(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	s := openTest(t, dir, clock)
	firstInstance := s.Instance()

	durable := create(t, s, CreateSpec{Namespace: "ns", Name: "durable", Kind: "k", Tier: TierDurable,
		Payload: []byte("durable-1"), Labels: map[string]string{"l": "v"}})
	local := create(t, s, CreateSpec{Namespace: "ns", Name: "local", Kind: "k", Payload: []byte("local-1")})
	empty := create(t, s, CreateSpec{Namespace: "ns", Name: "empty", Kind: "k"})
	mustUpdate(t, s, func(tx *Txn) error {
		if _, err := tx.Write(durable.OID, 1, WriteSpec{Payload: []byte("durable-2")}); err != nil {
			return err
		}
		if _, err := tx.Write(local.OID, 1, WriteSpec{Payload: []byte("local-2")}); err != nil {
			return err
		}
		for range 3 {
			if _, err := tx.NextSequence("ids"); err != nil {
				return err
			}
		}
		if _, err := tx.AppendEvent("custom", map[string]string{"hello": "world"}); err != nil {
			return err
		}
		return tx.Set([]byte("mailbox/1"), []byte("msg"))
	})
	var before []Meta
	mustView(t, s, func(tx *Txn) error {
		var err error
		before, err = tx.List("ns")
		return err
	})
	eventsBefore, err := s.Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	closeTest(t, s)

	s = openTest(t, dir, clock)
	defer closeTest(t, s)
	if s.Instance() == firstInstance || s.Instance() == "" {
		t.Fatalf("instance after reopen = %q (before %q)", s.Instance(), firstInstance)
	}
	mustView(t, s, func(tx *Txn) error {
		after, err := tx.List("ns")
		if err != nil {
			return err
		}
		if len(after) != len(before) {
			t.Fatalf("List after reopen = %+v", after)
		}
		for i := range after {
			want := before[i]
			want.PayloadLost = want.Tier == TierRuntimeLocal
			if !reflect.DeepEqual(after[i], want) {
				t.Fatalf("meta after reopen:\n got %+v\nwant %+v", after[i], want)
			}
		}

		m, data, err := tx.Read(durable.OID)
		if err != nil || m.Version != 2 || string(data) != "durable-2" || m.Labels["l"] != "v" || m.PayloadLost {
			t.Fatalf("durable after reopen = %+v %q %v", m, data, err)
		}
		for _, oid := range []string{local.OID, empty.OID} {
			m, data, err = tx.Read(oid)
			if !errors.Is(err, ErrPayloadLost) || data != nil {
				t.Fatalf("runtime-local Read after reopen = %q, %v; want ErrPayloadLost", data, err)
			}
			if m.OID != oid || !m.PayloadLost || m.Tier != TierRuntimeLocal {
				t.Fatalf("runtime-local meta after reopen = %+v", m)
			}
		}
		if m.Version != 1 || m.PayloadBytes != 0 {
			t.Fatalf("empty meta after reopen = %+v", m)
		}
		if v, err := tx.Get([]byte("mailbox/1")); err != nil || string(v) != "msg" {
			t.Fatalf("raw key after reopen = %q, %v", v, err)
		}
		return nil
	})
	eventsAfter, err := s.Events(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(eventsAfter, eventsBefore) {
		t.Fatalf("events after reopen differ:\n%+v\n%+v", eventsAfter, eventsBefore)
	}
	if last := eventsAfter[len(eventsAfter)-1]; last.Kind != "custom" || string(last.Data) != `{"hello":"world"}` ||
		!last.Time.Equal(clock.Now()) {
		t.Fatalf("custom event = %+v", last)
	}

	mustUpdate(t, s, func(tx *Txn) error {
		if id, err := tx.NextSequence("ids"); err != nil || id != 4 {
			t.Fatalf("NextSequence after reopen = %d, %v", id, err)
		}
		// Labels-only write keeps a lost payload lost.
		m, err := tx.Write(local.OID, 2, WriteSpec{KeepPayload: true, Labels: map[string]string{"x": "y"}})
		if err != nil || !m.PayloadLost || m.Version != 3 {
			t.Fatalf("keep-payload write of lost object = %+v, %v", m, err)
		}
		if _, _, err := tx.Read(local.OID); !errors.Is(err, ErrPayloadLost) {
			t.Fatalf("Read after keep-payload write = %v", err)
		}
		// A new payload makes it readable again.
		m, err = tx.Write(local.OID, 3, WriteSpec{Payload: []byte("local-4")})
		if err != nil || m.PayloadLost {
			t.Fatalf("write of lost object = %+v, %v", m, err)
		}
		return nil
	})
	if _, data, err := read(t, s, local.OID); err != nil || string(data) != "local-4" {
		t.Fatalf("Read after rewrite = %q, %v", data, err)
	}
}

func TestOpenInUse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "runtime")
	s := openTest(t, dir, nil)
	_, err := Open(dir, Options{})
	wantErr(t, err, ErrInUse)
	if !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("in-use error does not explain itself: %v", err)
	}
	// Other spellings of the same directory are the same directory.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{dir + "/", filepath.Join(dir, "..", "runtime"), link} {
		_, err := Open(other, Options{})
		wantErr(t, err, ErrInUse)
	}
	// The held store is unaffected.
	mustUpdate(t, s, func(tx *Txn) error { return tx.Set([]byte("k"), []byte("v")) })
	closeTest(t, s)
	s = openTest(t, dir, nil)
	if got := rawKeys(t, s); got["k"] != "v" {
		t.Fatalf("keys = %v", got)
	}
	closeTest(t, s)

	// A directory that cannot be created is not reported as in use.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Open(filepath.Join(file, "sub"), Options{})
	if err == nil || errors.Is(err, ErrInUse) {
		t.Fatalf("Open under a file = %v", err)
	}
	_, err = Open("", Options{})
	wantErr(t, err, ErrInvalid)
}

func TestOpenIsSilent(t *testing.T) {
	// Pebble's default logger writes through the standard log package; the
	// store's default must print nothing there, while an explicit logger
	// still receives Pebble's messages.
	var buf bytes.Buffer
	log.SetOutput(&buf)
	defer log.SetOutput(os.Stderr)
	dir := t.TempDir()
	for range 2 {
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		mustUpdate(t, s, func(tx *Txn) error { return tx.Set([]byte("k"), []byte("v")) })
		closeTest(t, s)
	}
	if buf.Len() != 0 {
		t.Fatalf("default Open printed:\n%s", buf.String())
	}
	s, err := Open(dir, Options{Logger: pebble.DefaultLogger})
	if err != nil {
		t.Fatal(err)
	}
	closeTest(t, s)
	if buf.Len() == 0 {
		t.Fatal("explicit logger received nothing from a reopen that replays the WAL")
	}
}

// walFault injects an error into write-ahead-log operations of one kind
// while on.
func walFault(kinds ...errorfs.OpKind) *errorfs.Toggle {
	return &errorfs.Toggle{Injector: errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, ".log") {
			return nil
		}
		for _, k := range kinds {
			if op.Kind == k {
				return errorfs.ErrInjected
			}
		}
		return nil
	})}
}

// openSyncFault opens a store in a new directory whose log syncs fail once
// the returned toggle is on; the store is closed when the test ends.
func openSyncFault(t *testing.T) (*Store, *errorfs.Toggle) {
	t.Helper()
	fault := walFault(errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo)
	s, err := Open(t.TempDir(), Options{FS: errorfs.Wrap(vfs.Default, fault)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, fault
}

func TestDiskFaultFailsStore(t *testing.T) {
	cases := map[string][]errorfs.OpKind{
		"write": {errorfs.OpFileWrite, errorfs.OpFileWriteAt},
		"sync":  {errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo},
	}
	for name, kinds := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			fault := walFault(kinds...)
			s, err := Open(dir, Options{FS: errorfs.Wrap(vfs.Default, fault)})
			if err != nil {
				t.Fatal(err)
			}
			// Acknowledged writes before the fault, from several goroutines.
			var acked []Meta
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var m Meta
					err := s.Update(func(tx *Txn) error {
						var err error
						m, err = tx.Create(CreateSpec{Namespace: "ns", Name: fmt.Sprintf("o%d", i), Kind: "k",
							Tier: TierDurable, Payload: fmt.Appendf(nil, "payload-%d", i)})
						if err != nil {
							return err
						}
						return tx.Set(fmt.Appendf(nil, "raw/%d", i), []byte("v"))
					})
					if err != nil {
						t.Errorf("Update before fault: %v", err)
						return
					}
					mu.Lock()
					acked = append(acked, m)
					mu.Unlock()
				}()
			}
			wg.Wait()
			lastSeq := s.LastEventSeq()

			fault.On()
			hookRan := false
			err = s.Update(func(tx *Txn) error {
				tx.AfterCommit(func() { hookRan = true })
				return tx.Set([]byte("raw/lost"), []byte("v"))
			})
			wantErr(t, err, ErrFailed)
			if !strings.Contains(err.Error(), "injected") {
				t.Fatalf("failure does not carry its cause: %v", err)
			}
			if hookRan {
				t.Fatal("AfterCommit ran for a commit that failed to sync")
			}
			fault.Off()
			// The store refuses writes even after the disk recovers.
			err = s.Update(func(tx *Txn) error { return tx.Set([]byte("raw/after"), []byte("v")) })
			wantErr(t, err, ErrFailed)
			err = s.Update(func(tx *Txn) error { return nil })
			wantErr(t, err, ErrFailed)
			_ = s.Close() // may report the WAL error; must release the directory

			s2 := openTest(t, dir, nil)
			defer closeTest(t, s2)
			if len(acked) != 8 {
				t.Fatalf("%d acknowledged writes", len(acked))
			}
			mustView(t, s2, func(tx *Txn) error {
				for _, m := range acked {
					got, data, err := tx.Read(m.OID)
					if err != nil || got.Version != 1 || !bytes.HasPrefix(data, []byte("payload-")) {
						t.Fatalf("acknowledged object %s after fault: %+v %q %v", m.Name, got, data, err)
					}
				}
				if _, err := tx.Get([]byte("raw/after")); !errors.Is(err, ErrNotFound) {
					t.Fatalf("write refused by the failed store exists: %v", err)
				}
				return nil
			})
			keys := rawKeys(t, s2)
			for i := range 8 {
				if keys[fmt.Sprintf("raw/%d", i)] != "v" {
					t.Fatalf("acknowledged raw key %d missing: %v", i, keys)
				}
			}
			if s2.LastEventSeq() < lastSeq {
				t.Fatalf("LastEventSeq after reopen = %d, acknowledged %d", s2.LastEventSeq(), lastSeq)
			}
			// The reopened store works normally.
			mustUpdate(t, s2, func(tx *Txn) error { return tx.Set([]byte("raw/next"), []byte("v")) })
		})
	}
}

func TestFailedStoreWaitsForReaders(t *testing.T) {
	// A View that read state whose commit then failed to sync reports the
	// failure instead of returning data that is not durable.
	s, fault := openSyncFault(t)
	mustUpdate(t, s, func(tx *Txn) error { return tx.Set([]byte("k"), []byte("v1")) })
	fault.On()
	if err := s.Update(func(tx *Txn) error { return tx.Set([]byte("k"), []byte("v2")) }); !errors.Is(err, ErrFailed) {
		t.Fatalf("Update = %v", err)
	}
	err := s.View(func(tx *Txn) error { _, err := tx.Get([]byte("k")); return err })
	// The failed commit is the last one; its state is visible in memory but
	// was never made durable, so the View must not succeed silently.
	wantErr(t, err, ErrFailed)
	fault.Off()
}

func TestCloseWaitsForOperations(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	closed := make(chan error, 1)
	mustView(t, s, func(tx *Txn) error {
		go func() { closed <- s.Close() }()
		for {
			s.mu.Lock()
			c := s.closed
			s.mu.Unlock()
			if c {
				break
			}
			runtime.Gosched()
		}
		select {
		case err := <-closed:
			t.Fatalf("Close returned while a View was running: %v", err)
		default:
		}
		// The running View still reads; new operations are refused.
		if _, err := tx.Get([]byte("k")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get during Close = %v", err)
		}
		wantErr(t, s.Update(func(*Txn) error { return nil }), ErrClosed)
		return nil
	})
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}

	// A hook may close the store it was registered on.
	s = openTest(t, t.TempDir(), nil)
	var hookClose error
	mustUpdate(t, s, func(tx *Txn) error {
		tx.AfterCommit(func() { hookClose = s.Close() })
		return tx.Set([]byte("k"), []byte("v"))
	})
	if hookClose != nil {
		t.Fatalf("Close from hook: %v", hookClose)
	}
}

func TestDiskFaultUnderConcurrentCommits(t *testing.T) {
	for name, kinds := range map[string][]errorfs.OpKind{
		"write": {errorfs.OpFileWrite, errorfs.OpFileWriteAt},
		"sync":  {errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			fault := walFault(kinds...)
			s, err := Open(dir, Options{FS: errorfs.Wrap(vfs.Default, fault)})
			if err != nil {
				t.Fatal(err)
			}
			const workers = 16
			var (
				mu       sync.Mutex
				acked    []string
				ackCount atomic.Int64
				wg       sync.WaitGroup
			)
			value := bytes.Repeat([]byte("v"), 2000) // fills WAL blocks quickly
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						key := fmt.Sprintf("w%02d/%06d", w, i)
						err := s.Update(func(tx *Txn) error { return tx.Set([]byte(key), value) })
						if err != nil {
							if !errors.Is(err, ErrFailed) {
								t.Errorf("Update: %v", err)
							}
							return
						}
						mu.Lock()
						acked = append(acked, key)
						mu.Unlock()
						if ackCount.Add(1) == 200 {
							fault.On()
						}
					}
				}()
			}
			wg.Wait()
			fault.Off()
			_ = s.Close()

			s2 := openTest(t, dir, nil)
			defer closeTest(t, s2)
			keys := rawKeys(t, s2)
			for _, k := range acked {
				if keys[k] != string(value) {
					t.Fatalf("acknowledged key %s lost (%d acknowledged, %d present)", k, len(acked), len(keys))
				}
			}
		})
	}
}

// Concurrent transactions each see everything committed before them: raw
// keys and sequences in Pebble, metadata through the cache, and
// runtime-local payloads in memory; their events get gap-free seqs.
func TestConcurrentCommitsSeeEarlierOnes(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	const writers, perWriter = 8, 100
	oids := make([]string, writers)
	for w := range oids {
		oids[w] = create(t, s, CreateSpec{Namespace: "ns", Name: fmt.Sprintf("w%d", w), Kind: "k", Payload: []byte("0")}).OID
	}
	// Every commit replaces the shared object's payload with the number of
	// commits before it, so each reads what the last one wrote even while
	// that one is still being applied.
	shared := create(t, s, CreateSpec{Namespace: "ns", Name: "shared", Kind: "k", Payload: []byte("0")}).OID
	start := s.LastEventSeq()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			version, payload := uint64(1), "0"
			for i := range perWriter {
				err := s.Update(func(tx *Txn) error {
					n, err := tx.NextSequence("ctr")
					if err != nil {
						return err
					}
					if n > 1 {
						// The previous value's key was committed before.
						if _, err := tx.Get(fmt.Appendf(nil, "k/%d", n-1)); err != nil {
							return fmt.Errorf("key of %d: %w", n-1, err)
						}
					}
					keys := 0
					if err := tx.Scan([]byte("k/"), func(_, _ []byte) error { keys++; return nil }); err != nil {
						return err
					}
					if keys != int(n-1) {
						return fmt.Errorf("commit %d scanned %d keys of the commits before it", n, keys)
					}
					sm, data, err := tx.Read(shared)
					if err != nil {
						return err
					}
					if string(data) != fmt.Sprint(n-1) {
						return fmt.Errorf("commit %d read the shared payload %q", n, data)
					}
					if _, err := tx.Write(shared, sm.Version, WriteSpec{Payload: []byte(fmt.Sprint(n))}); err != nil {
						return err
					}
					if err := tx.Set(fmt.Appendf(nil, "k/%d", n), nil); err != nil {
						return err
					}
					// The runtime-local payload of this writer's last commit,
					// kept or replaced, is in memory.
					if _, data, err := tx.Read(oids[w]); err != nil {
						return err
					} else if string(data) != payload {
						return fmt.Errorf("payload %q, want %q", data, payload)
					}
					spec := WriteSpec{Payload: []byte(fmt.Sprint(i))}
					if i%3 == 2 {
						spec = WriteSpec{KeepPayload: true}
					}
					_, err = tx.Write(oids[w], version, spec)
					return err
				})
				if err != nil {
					errs <- err
					return
				}
				version++
				if i%3 != 2 {
					payload = fmt.Sprint(i)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	evs, err := s.Events(start, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Two object.written events a commit: the writer's and the shared one.
	if len(evs) != 2*writers*perWriter {
		t.Fatalf("%d events, want %d", len(evs), 2*writers*perWriter)
	}
	for i, e := range evs {
		if e.Seq != start+uint64(i)+1 {
			t.Fatalf("event %d has seq %d, want %d", i, e.Seq, start+uint64(i)+1)
		}
	}
	if got := s.LastEventSeq(); got != start+2*writers*perWriter {
		t.Fatalf("LastEventSeq = %d, want %d", got, start+2*writers*perWriter)
	}
}

// TestAppendPadded: the padded numbers of raw keys are fmt's "%0*d".
func TestAppendPadded(t *testing.T) {
	for _, n := range []int64{0, 1, 9, 10, 99, 12345, -1, -42, 1<<63 - 1, -1 << 63} {
		for _, width := range []int{0, 1, 10, 20, 22} {
			if got, want := string(AppendPadded([]byte("p/"), n, width)), fmt.Sprintf("p/%0*d", width, n); got != want {
				t.Errorf("AppendPadded(%d, %d) = %q, want %q", n, width, got, want)
			}
		}
	}
	for _, n := range []uint64{0, 7, 1<<64 - 1} {
		if got, want := string(AppendPaddedUnsigned(nil, n, 20)), fmt.Sprintf("%020d", n); got != want {
			t.Errorf("AppendPaddedUnsigned(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestViewAfterFailedCommitReadsLocalPayload: after a commit that replaced a
// runtime-local payload fails, a View still reads the payload of the version
// its snapshot holds, whichever that is.
func TestViewAfterFailedCommitReadsLocalPayload(t *testing.T) {
	for name, kinds := range map[string][]errorfs.OpKind{
		"write": {errorfs.OpFileWrite, errorfs.OpFileWriteAt},
		"sync":  {errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo},
	} {
		t.Run(name, func(t *testing.T) {
			fault := walFault(kinds...)
			s, err := Open(t.TempDir(), Options{FS: errorfs.Wrap(vfs.Default, fault)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			m := create(t, s, CreateSpec{Namespace: "ns", Name: "x", Kind: "k", Payload: []byte("v1")})
			fault.On()
			err = s.Update(func(tx *Txn) error {
				_, err := tx.Write(m.OID, 1, WriteSpec{Payload: []byte("v2")})
				return err
			})
			wantErr(t, err, ErrFailed)
			fault.Off()
			err = s.Peek(func(tx *Txn) error {
				meta, data, err := tx.Read(m.OID)
				if err != nil {
					return err
				}
				if want := fmt.Sprint("v", meta.Version); string(data) != want {
					return fmt.Errorf("version %d reads %q", meta.Version, data)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("a View after the failed commit: %v", err)
			}
		})
	}
	// The store fails while the commit's function runs (a WAL error the
	// filesystem watcher saw): its batch is never applied, and the payload
	// it replaced is still read.
	s := openTest(t, t.TempDir(), nil)
	defer s.Close()
	m := create(t, s, CreateSpec{Namespace: "ns", Name: "x", Kind: "k", Payload: []byte("v1")})
	err := s.Update(func(tx *Txn) error {
		if _, err := tx.Write(m.OID, 1, WriteSpec{Payload: []byte("v2")}); err != nil {
			return err
		}
		s.fail(errors.New("injected"))
		return nil
	})
	wantErr(t, err, ErrFailed)
	wantFirstVersion(t, s, m.OID, "a View after a commit the failed store never applied")
}

// wantFirstVersion checks that a View reads oid at version 1 with payload v1.
func wantFirstVersion(t *testing.T, s *Store, oid, what string) {
	t.Helper()
	err := s.Peek(func(tx *Txn) error {
		meta, data, err := tx.Read(oid)
		if err != nil {
			return err
		}
		if meta.Version != 1 || string(data) != "v1" {
			return fmt.Errorf("version %d reads %q, want version 1 and v1", meta.Version, data)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestCommitAfterFailedApplyPublishesNothing: a commit whose function ran
// while the commit before it was being applied publishes nothing once that
// apply failed, so the payloads Pebble still holds stay readable.
func TestCommitAfterFailedApplyPublishesNothing(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer s.Close()
	m := create(t, s, CreateSpec{Namespace: "ns", Name: "x", Kind: "k", Payload: []byte("v1")})
	locked, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	var errB error
	errA := s.Update(func(tx *Txn) error {
		if _, err := tx.Write(m.OID, 1, WriteSpec{Payload: []byte("v2")}); err != nil {
			return err
		}
		tx.OnApplied(func() {
			// Hold A in its publish until B's function has run.
			go func() {
				s.locals.mu.Lock()
				close(locked)
				<-release
				s.locals.mu.Unlock()
			}()
			<-locked
			wg.Go(func() {
				errB = s.Update(func(tx *Txn) error {
					s.fail(errors.New("injected")) // A's apply now fails
					close(release)
					return tx.Set([]byte("raw/b"), []byte("v"))
				})
			})
		})
		return nil
	})
	wg.Wait()
	wantErr(t, errA, ErrFailed)
	wantErr(t, errB, ErrFailed)
	for range 2 { // the first View's end prunes what no View needs
		wantFirstVersion(t, s, m.OID, "a View after a failed apply")
	}
}

// TestUpdatesRunWhileEarlierBatchesWait: an Update need not wait for the
// batch before it to be applied. While the first batch's apply is held,
// two more commit behind it; the last one's function reads, from the two
// batches still waiting, each key as the newest of them left it (a delete
// hides an older write, a scan merges them, a runtime-local payload is
// found), and all three reach Pebble in order. If the first apply fails,
// the batches behind it fail too and none reaches Pebble.
func TestUpdatesRunWhileEarlierBatchesWait(t *testing.T) {
	for _, failFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("first apply fails=%v", failFirst), func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, dir, nil)
			m := create(t, s, CreateSpec{Namespace: "ns", Name: "x", Kind: "k", Payload: []byte("v1")})
			mustUpdate(t, s, func(tx *Txn) error { return tx.Set([]byte("raw/gone"), []byte("0")) })

			// Holding the first batch in its turn holds every batch behind it.
			release := make(chan struct{})
			var turns atomic.Int32
			s.beforeApply = func() {
				if turns.Add(1) == 1 {
					<-release
				}
			}
			held := true
			defer func() {
				if held {
					close(release)
				}
			}()
			var wg sync.WaitGroup
			errs := make([]error, 3)
			commit := func(i int, fn func(tx *Txn) error) {
				handedOn := make(chan struct{})
				wg.Go(func() {
					errs[i] = s.Update(func(tx *Txn) error {
						tx.OnApplied(func() { close(handedOn) })
						return fn(tx)
					})
				})
				<-handedOn
			}
			commit(0, func(tx *Txn) error {
				if _, err := tx.Write(m.OID, 1, WriteSpec{Payload: []byte("v2")}); err != nil {
					return err
				}
				for _, k := range []string{"raw/a", "raw/c", "raw/d"} {
					if err := tx.Set([]byte(k), []byte("1")); err != nil {
						return err
					}
				}
				return nil
			})
			commit(1, func(tx *Txn) error {
				for _, k := range []string{"raw/gone", "raw/d"} {
					if err := tx.Delete([]byte(k)); err != nil {
						return err
					}
				}
				if err := tx.Set([]byte("raw/a"), []byte("2")); err != nil {
					return err
				}
				return tx.Set([]byte("raw/b"), []byte("1"))
			})
			var seen, reads []string
			var waiting int
			var payload []byte
			commit(2, func(tx *Txn) error {
				waiting = len(s.pending.Load().batches)
				for _, k := range []string{"raw/c", "raw/d"} {
					v, err := tx.Get([]byte(k))
					if errors.Is(err, ErrNotFound) {
						v = []byte("absent")
					} else if err != nil {
						return err
					}
					reads = append(reads, k+"="+string(v))
				}
				if err := tx.Scan([]byte("raw/"), func(k, v []byte) error {
					seen = append(seen, string(k)+"="+string(v))
					return nil
				}); err != nil {
					return err
				}
				// Metadata the cache let go is found in the batch that
				// waits, decoded.
				delete(s.metaCache, m.OID)
				if meta, err := tx.Stat(m.OID); err != nil || meta.Version != 2 {
					t.Errorf("Stat behind a waiting batch after the cache let it go: version %d, %v; want 2", meta.Version, err)
				}
				_, data, err := tx.Read(m.OID)
				if err != nil {
					return err
				}
				payload = data
				return tx.Set([]byte("raw/a"), []byte("3"))
			})
			if waiting != 2 {
				t.Fatalf("the third function ran with %d batches waiting, want 2", waiting)
			}
			if got, want := strings.Join(reads, " "), "raw/c=1 raw/d=absent"; got != want {
				t.Fatalf("reads behind two waiting batches = %q, want %q", got, want)
			}
			if got, want := strings.Join(seen, " "), "raw/a=2 raw/b=1 raw/c=1"; got != want {
				t.Fatalf("scan behind two waiting batches = %q, want %q", got, want)
			}
			if string(payload) != "v2" {
				t.Fatalf("payload behind two waiting batches = %q, want v2", payload)
			}
			if failFirst {
				s.fail(errors.New("injected"))
			}
			close(release)
			held = false
			wg.Wait()
			for i, err := range errs {
				if failFirst {
					wantErr(t, err, ErrFailed)
				} else if err != nil {
					t.Fatalf("commit %d: %v", i, err)
				}
			}
			if s.pending.Load() != nil {
				t.Fatal("batches still pending after every Update returned")
			}
			if failFirst {
				_ = s.Close()
				s = openTest(t, dir, nil)
			}
			defer closeTest(t, s)
			want := map[string]string{"raw/a": "3", "raw/b": "1", "raw/c": "1"}
			if failFirst {
				want = map[string]string{"raw/gone": "0"}
			}
			got := map[string]string{}
			if err := s.View(func(tx *Txn) error {
				return tx.Scan([]byte("raw/"), func(k, v []byte) error { got[string(k)] = string(v); return nil })
			}); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, want) {
				t.Fatalf("Pebble holds %v, want %v", got, want)
			}
		})
	}
}

// TestUpdateRunningWhileABatchFailsFails: a function that read a batch
// still waiting to be applied, which then fails and is dropped, may read a
// state torn between that batch and Pebble; whatever it returns, its
// Update fails with the store's failure.
func TestUpdateRunningWhileABatchFailsFails(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer func() { _ = s.Close() }()
	m := create(t, s, CreateSpec{Namespace: "ns", Name: "x", Kind: "k", Payload: []byte("v1")})
	release := make(chan struct{})
	var once sync.Once
	s.beforeApply = func() { once.Do(func() { <-release }) }
	var wg sync.WaitGroup
	handedOn := make(chan struct{})
	wg.Go(func() {
		_ = s.Update(func(tx *Txn) error {
			tx.OnApplied(func() { close(handedOn) })
			_, err := tx.Write(m.OID, 1, WriteSpec{Payload: []byte("v2")})
			return err
		})
	})
	<-handedOn
	read, dropped := make(chan struct{}), make(chan struct{})
	var uerr error
	wg.Go(func() {
		uerr = s.Update(func(tx *Txn) error {
			if _, _, err := tx.Read(m.OID); err != nil {
				return err
			}
			close(read)
			<-dropped
			// Version 2's payload was dropped with its batch.
			_, _, err := tx.Read(m.OID)
			return err
		})
	})
	<-read
	s.fail(errors.New("injected"))
	close(release)
	for s.pending.Load() != nil {
		runtime.Gosched()
	}
	close(dropped)
	wg.Wait()
	wantErr(t, uerr, ErrFailed)
}

// TestViewWaitsOnlyForWhatItCanSee: a View and an event read wait for the
// durability of the commits their snapshot may hold, not for a batch still
// waiting for its turn, which neither can see.
func TestViewWaitsOnlyForWhatItCanSee(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	mustUpdate(t, s, func(tx *Txn) error { return tx.Set([]byte("raw/a"), []byte("1")) })
	release := make(chan struct{})
	var once sync.Once
	s.beforeApply = func() { once.Do(func() { <-release }) }
	handedOn := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = s.Update(func(tx *Txn) error {
			tx.OnApplied(func() { close(handedOn) })
			if err := tx.Set([]byte("raw/a"), []byte("2")); err != nil {
				return err
			}
			_, err := tx.AppendEvent("held", nil)
			return err
		})
	})
	<-handedOn
	reads := make(chan string, 1)
	go func() {
		var got []byte
		err := s.View(func(tx *Txn) error {
			var err error
			got, err = tx.Get([]byte("raw/a"))
			return err
		})
		if err == nil {
			var evs []Event
			evs, err = s.Events(0, 0)
			got = fmt.Appendf(got, " %d events", len(evs))
		}
		if err != nil {
			got = []byte(err.Error())
		}
		reads <- string(got)
	}()
	select {
	case got := <-reads:
		if got != "1 0 events" {
			t.Errorf("reads behind a held batch = %q, want the value before it and no event", got)
		}
	case <-time.After(10 * time.Second):
		t.Error("a View or an event read waited for a batch it cannot see")
	}
	close(release)
	wg.Wait()
}

// TestEventsAfterFailedSyncFail: an event read that may see an event whose
// commit failed to sync reports the failure, as a View does.
func TestEventsAfterFailedSyncFail(t *testing.T) {
	s, fault := openSyncFault(t)
	fault.On()
	defer fault.Off()
	err := s.Update(func(tx *Txn) error { _, err := tx.AppendEvent("lost", nil); return err })
	wantErr(t, err, ErrFailed)
	_, err = s.Events(0, 0)
	wantErr(t, err, ErrFailed)
	_, err = s.EventsBefore(0, 0)
	wantErr(t, err, ErrFailed)
}

// TestUpdateReadingAValueThatFailedToEncodeFails: an Update that reads,
// from a batch waiting for its turn, a value whose late encoding failed
// (SetFunc) fails with the store that batch fails in its turn, not with the
// read's own error, whatever its function made of that error.
func TestUpdateReadingAValueThatFailedToEncodeFails(t *testing.T) {
	for _, swallow := range []bool{false, true} {
		s := openTest(t, t.TempDir(), nil)
		release := make(chan struct{})
		var once sync.Once
		s.beforeApply = func() { once.Do(func() { <-release }) }
		var wg sync.WaitGroup
		handedOn := make(chan struct{}, 2)
		var errs [3]error
		for i, key := range []string{"raw/held", "raw/bad"} {
			wg.Go(func() {
				errs[i] = s.Update(func(tx *Txn) error {
					tx.OnApplied(func() { handedOn <- struct{}{} })
					if key == "raw/bad" {
						return tx.SetFunc([]byte(key), ValueEncoderFunc(func([]byte) ([]byte, error) { return nil, errors.New("no encoding") }))
					}
					return tx.Set([]byte(key), []byte("v"))
				})
			})
			<-handedOn
		}
		read := make(chan struct{})
		wg.Go(func() {
			errs[2] = s.Update(func(tx *Txn) error {
				_, err := tx.Get([]byte("raw/bad"))
				close(read)
				if swallow {
					return nil
				}
				return err
			})
		})
		<-read
		close(release)
		wg.Wait()
		if errs[0] != nil {
			t.Errorf("the commit before the failing one: %v", errs[0])
		}
		if !errors.Is(errs[1], ErrFailed) || !strings.Contains(errs[1].Error(), "no encoding") {
			t.Errorf("the commit whose value failed to encode: %v, want the store failed by it", errs[1])
		}
		if !errors.Is(errs[2], ErrFailed) {
			t.Errorf("swallow %v: an Update that read the value: %v, want it failed with the store", swallow, errs[2])
		}
		_ = s.Close()
	}
}
