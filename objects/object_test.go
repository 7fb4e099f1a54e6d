package objects

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestObjectLifecycle(t *testing.T) {
	for _, tier := range []Tier{TierRuntimeLocal, TierDurable} {
		t.Run(string(tier), func(t *testing.T) {
			clock := newFakeClock()
			s := openTest(t, t.TempDir(), clock)
			defer closeTest(t, s)

			payload := []byte("first payload")
			m := create(t, s, CreateSpec{
				Namespace: "ns", Name: "doc", Kind: "text", Owner: "proc-1",
				Labels: map[string]string{"a": "1"}, Tier: tier, Payload: payload,
			})
			sum := sha256.Sum256(payload)
			if m.OID == "" || m.Version != 1 || m.Tier != tier || m.PayloadBytes != len(payload) ||
				m.PayloadSHA256 != hex.EncodeToString(sum[:]) || m.PayloadLost ||
				!m.CreatedAt.Equal(clock.Now()) || !m.UpdatedAt.Equal(clock.Now()) ||
				m.Owner != "proc-1" || m.Labels["a"] != "1" {
				t.Fatalf("created meta = %+v", m)
			}

			got, data, err := read(t, s, m.OID)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if !reflect.DeepEqual(got, m) || !bytes.Equal(data, payload) {
				t.Fatalf("Read = %+v %q, want %+v %q", got, data, m, payload)
			}

			clock.Advance(time.Second)
			var w Meta
			mustUpdate(t, s, func(tx *Txn) error {
				var err error
				w, err = tx.Write(m.OID, 1, WriteSpec{Payload: []byte("second"), Labels: map[string]string{"b": "2"}})
				return err
			})
			if w.Version != 2 || w.Labels["b"] != "2" || len(w.Labels) != 1 || !w.CreatedAt.Equal(m.CreatedAt) ||
				!w.UpdatedAt.Equal(clock.Now()) || w.PayloadBytes != len("second") {
				t.Fatalf("written meta = %+v", w)
			}
			// Labels nil leaves them unchanged.
			mustUpdate(t, s, func(tx *Txn) error {
				var err error
				w, err = tx.Write(m.OID, 2, WriteSpec{Payload: []byte("third")})
				return err
			})
			if w.Version != 3 || w.Labels["b"] != "2" {
				t.Fatalf("meta after labels-unchanged write = %+v", w)
			}
			// KeepPayload changes labels only.
			mustUpdate(t, s, func(tx *Txn) error {
				var err error
				w, err = tx.Write(m.OID, 3, WriteSpec{KeepPayload: true, Labels: map[string]string{}})
				return err
			})
			if w.Version != 4 || len(w.Labels) != 0 {
				t.Fatalf("meta after keep-payload write = %+v", w)
			}
			if _, data, err := read(t, s, m.OID); err != nil || string(data) != "third" {
				t.Fatalf("Read after keep-payload write = %q, %v", data, err)
			}

			other := create(t, s, CreateSpec{Namespace: "ns", Name: "aaa", Kind: "text", Tier: tier})
			create(t, s, CreateSpec{Namespace: "ns2", Name: "zzz", Kind: "text", Tier: tier})
			mustView(t, s, func(tx *Txn) error {
				list, err := tx.List("ns")
				if err != nil {
					return err
				}
				if len(list) != 2 || list[0].Name != "aaa" || list[1].Name != "doc" || list[1].Version != 4 {
					t.Fatalf("List(ns) = %+v", list)
				}
				look, err := tx.Lookup("ns", "aaa")
				if err != nil || look.OID != other.OID {
					t.Fatalf("Lookup = %+v, %v", look, err)
				}
				if _, err := tx.Lookup("ns", "missing"); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Lookup(missing) = %v", err)
				}
				if list, err := tx.List("empty"); err != nil || len(list) != 0 {
					t.Fatalf("List(empty) = %+v, %v", list, err)
				}
				return nil
			})

			// Stale remove conflicts; the right version removes.
			err = s.Update(func(tx *Txn) error { return tx.Remove(m.OID, 3) })
			wantErr(t, err, ErrConflict)
			mustUpdate(t, s, func(tx *Txn) error { return tx.Remove(m.OID, 4) })
			if _, _, err := read(t, s, m.OID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Read after remove = %v", err)
			}
			mustView(t, s, func(tx *Txn) error {
				if _, err := tx.Lookup("ns", "doc"); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Lookup after remove = %v", err)
				}
				if _, err := tx.Stat(m.OID); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Stat after remove = %v", err)
				}
				return nil
			})
			if err := s.Update(func(tx *Txn) error {
				_, err := tx.Write(m.OID, 4, WriteSpec{})
				return err
			}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Write after remove = %v", err)
			}

			events, err := s.Events(0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, e := range events {
				var d ObjectEvent
				if err := json.Unmarshal(e.Data, &d); err != nil {
					t.Fatal(err)
				}
				if d.OID == m.OID {
					kinds = append(kinds, fmt.Sprintf("%s@%d", e.Kind, d.Version))
					if d.Namespace != "ns" || d.Name != "doc" {
						t.Fatalf("event data = %+v", d)
					}
				}
			}
			want := []string{"object.created@1", "object.written@2", "object.written@3", "object.written@4", "object.removed@4"}
			if !reflect.DeepEqual(kinds, want) {
				t.Fatalf("events = %v, want %v", kinds, want)
			}
		})
	}
}

func TestCASConcurrentWriters(t *testing.T) {
	for _, tier := range []Tier{TierRuntimeLocal, TierDurable} {
		t.Run(string(tier), func(t *testing.T) {
			s := openTest(t, t.TempDir(), nil)
			defer closeTest(t, s)
			m := create(t, s, CreateSpec{Namespace: "ns", Name: "x", Kind: "k", Tier: tier, Payload: []byte("v1")})

			const writers = 16
			errs := make([]error, writers)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs[i] = s.Update(func(tx *Txn) error {
						_, err := tx.Write(m.OID, 1, WriteSpec{Payload: fmt.Appendf(nil, "writer-%d", i)})
						return err
					})
				}()
			}
			close(start)
			wg.Wait()

			winner := -1
			for i, err := range errs {
				switch {
				case err == nil:
					if winner >= 0 {
						t.Fatalf("writers %d and %d both won", winner, i)
					}
					winner = i
				case errors.Is(err, ErrConflict):
					if !strings.Contains(err.Error(), "expected version 1, current version 2") {
						t.Fatalf("conflict error does not name both versions: %v", err)
					}
				default:
					t.Fatalf("writer %d: unexpected error %v", i, err)
				}
			}
			if winner < 0 {
				t.Fatal("no writer won")
			}
			got, data, err := read(t, s, m.OID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Version != 2 || string(data) != fmt.Sprintf("writer-%d", winner) {
				t.Fatalf("after race: version %d payload %q, winner %d", got.Version, data, winner)
			}
			if c := s.Stats().Conflicts; c != writers-1 {
				t.Fatalf("Stats().Conflicts = %d, want %d", c, writers-1)
			}
		})
	}
}

func TestNameUniqueness(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	first := create(t, s, CreateSpec{Namespace: "ns", Name: "n", Kind: "k"})

	err := s.Update(func(tx *Txn) error {
		_, err := tx.Create(CreateSpec{Namespace: "ns", Name: "n", Kind: "k"})
		return err
	})
	wantErr(t, err, ErrNameTaken)

	// Same name within one transaction.
	err = s.Update(func(tx *Txn) error {
		if _, err := tx.Create(CreateSpec{Namespace: "ns2", Name: "n", Kind: "k"}); err != nil {
			return err
		}
		_, err := tx.Create(CreateSpec{Namespace: "ns2", Name: "n", Kind: "k"})
		return err
	})
	wantErr(t, err, ErrNameTaken)
	mustView(t, s, func(tx *Txn) error {
		if _, err := tx.Lookup("ns2", "n"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("failed transaction left ns2/n: %v", err)
		}
		return nil
	})

	// Other namespace is independent; a namespace that is a prefix of another
	// does not see its names.
	create(t, s, CreateSpec{Namespace: "ns2", Name: "n", Kind: "k"})
	create(t, s, CreateSpec{Namespace: "n", Name: "s\x01", Kind: "k"})
	mustView(t, s, func(tx *Txn) error {
		list, err := tx.List("n")
		if err != nil || len(list) != 1 {
			t.Fatalf("List(n) = %+v, %v", list, err)
		}
		return nil
	})

	// Explicit OID reuse is refused.
	err = s.Update(func(tx *Txn) error {
		_, err := tx.Create(CreateSpec{Namespace: "ns", Name: "other", Kind: "k", OID: first.OID})
		return err
	})
	wantErr(t, err, ErrExists)

	// After removal the name (and the OID) can be used again, also in the
	// same transaction.
	mustUpdate(t, s, func(tx *Txn) error {
		if err := tx.Remove(first.OID, 1); err != nil {
			return err
		}
		m, err := tx.Create(CreateSpec{Namespace: "ns", Name: "n", Kind: "k", OID: first.OID, Payload: []byte("again")})
		if err != nil {
			return err
		}
		if m.Version != 1 {
			t.Fatalf("recreated version = %d", m.Version)
		}
		return nil
	})
	if _, data, err := read(t, s, first.OID); err != nil || string(data) != "again" {
		t.Fatalf("Read recreated = %q, %v", data, err)
	}
}

func TestCreateValidation(t *testing.T) {
	long := strings.Repeat("x", MaxIdentLen+1)
	cases := []struct {
		name  string
		spec  CreateSpec
		field string
	}{
		{"empty namespace", CreateSpec{Name: "n", Kind: "k"}, "namespace: must not be empty"},
		{"empty name", CreateSpec{Namespace: "ns", Kind: "k"}, "name: must not be empty"},
		{"empty kind", CreateSpec{Namespace: "ns", Name: "n"}, "kind: must not be empty"},
		{"long namespace", CreateSpec{Namespace: long, Name: "n", Kind: "k"}, "namespace: must be at most 256 bytes"},
		{"long name", CreateSpec{Namespace: "ns", Name: long, Kind: "k"}, "name: must be at most 256 bytes"},
		{"NUL in namespace", CreateSpec{Namespace: "a\x00b", Name: "n", Kind: "k"}, "namespace: must not contain NUL"},
		{"NUL in name", CreateSpec{Namespace: "ns", Name: "a\x00", Kind: "k"}, "name: must not contain NUL"},
		{"bad tier", CreateSpec{Namespace: "ns", Name: "n", Kind: "k", Tier: "disk"}, "tier: must be"},
		{"empty label key", CreateSpec{Namespace: "ns", Name: "n", Kind: "k", Labels: map[string]string{"": "v"}}, "labels key: must not be empty"},
		{"NUL in oid", CreateSpec{Namespace: "ns", Name: "n", Kind: "k", OID: "a\x00"}, "oid: must not contain NUL"},
	}
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := s.Update(func(tx *Txn) error {
				_, err := tx.Create(c.spec)
				return err
			})
			wantErr(t, err, ErrInvalid)
			if !strings.Contains(err.Error(), c.field) {
				t.Fatalf("error %q does not contain %q", err, c.field)
			}
		})
	}
	// Exactly 256 bytes is allowed.
	create(t, s, CreateSpec{Namespace: strings.Repeat("n", MaxIdentLen), Name: strings.Repeat("m", MaxIdentLen), Kind: "k"})
	if events, _ := s.Events(0, 0); len(events) != 1 {
		t.Fatalf("invalid creates left events: %d", len(events))
	}
}

func TestView(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	local := create(t, s, CreateSpec{Namespace: "ns", Name: "local", Kind: "k", Payload: []byte("L1")})
	durable := create(t, s, CreateSpec{Namespace: "ns", Name: "durable", Kind: "k", Tier: TierDurable, Payload: []byte("D1")})

	err := s.View(func(tx *Txn) error { return tx.Set([]byte("k"), []byte("v")) })
	wantErr(t, err, ErrReadOnly)
	err = s.View(func(tx *Txn) error {
		_, err := tx.Create(CreateSpec{Namespace: "ns", Name: "x", Kind: "k"})
		return err
	})
	wantErr(t, err, ErrReadOnly)
	err = s.View(func(tx *Txn) error { _, err := tx.NextSequence("s"); return err })
	wantErr(t, err, ErrReadOnly)
	err = s.View(func(tx *Txn) error { _, err := tx.AppendEvent("e", nil); return err })
	wantErr(t, err, ErrReadOnly)

	// A View keeps its snapshot while Updates commit new versions and remove
	// the runtime-local object; its payloads stay those of its snapshot.
	mustView(t, s, func(tx *Txn) error {
		mustUpdate(t, s, func(u *Txn) error {
			if _, err := u.Write(local.OID, 1, WriteSpec{Payload: []byte("L2")}); err != nil {
				return err
			}
			_, err := u.Write(durable.OID, 1, WriteSpec{Payload: []byte("D2")})
			return err
		})
		mustUpdate(t, s, func(u *Txn) error { return u.Remove(local.OID, 2) })
		for oid, want := range map[string]string{local.OID: "L1", durable.OID: "D1"} {
			m, data, err := tx.Read(oid)
			if err != nil || m.Version != 1 || string(data) != want {
				t.Fatalf("View Read(%s) = v%d %q %v, want v1 %q", oid, m.Version, data, err, want)
			}
		}
		// A nested View sees the newer state.
		mustView(t, s, func(tx2 *Txn) error {
			if _, _, err := tx2.Read(local.OID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("new View Read(local) = %v", err)
			}
			if _, data, err := tx2.Read(durable.OID); err != nil || string(data) != "D2" {
				t.Fatalf("new View Read(durable) = %q %v", data, err)
			}
			return nil
		})
		return nil
	})
	// Chains are pruned once no View needs them.
	s.locals.mu.RLock()
	heads, chained := len(s.locals.head), len(s.locals.chained)
	s.locals.mu.RUnlock()
	if heads != 0 || chained != 0 {
		t.Fatalf("after views: %d runtime-local heads, %d chains; want 0, 0", heads, chained)
	}
}

func TestLocalChainsKeepOnlyWhatViewsNeed(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	m := create(t, s, CreateSpec{Namespace: "ns", Name: "x", Kind: "k", Payload: []byte("v1")})
	chainLen := func() int {
		s.locals.mu.RLock()
		defer s.locals.mu.RUnlock()
		n := 0
		for e := s.locals.head[m.OID]; e != nil; e = e.older {
			n++
		}
		return n
	}
	write := func(v uint64) {
		mustUpdate(t, s, func(tx *Txn) error {
			_, err := tx.Write(m.OID, v, WriteSpec{Payload: fmt.Appendf(nil, "v%d", v+1)})
			return err
		})
	}
	mustView(t, s, func(outer *Txn) error {
		write(1) // outer needs v1
		mustView(t, s, func(inner *Txn) error {
			write(2) // inner needs v2
			write(3)
			// v4 is current; v2 and v1 are what the views read. v3 was
			// published after the inner view took its snapshot, so no view
			// can read it.
			if n := chainLen(); n != 3 {
				t.Fatalf("chain with two open views = %d entries, want 3", n)
			}
			_, data, err := inner.Read(m.OID)
			if err != nil || string(data) != "v2" {
				t.Fatalf("inner Read = %q %v", data, err)
			}
			return nil
		})
		// v2 is dropped: the outer view's snapshot was taken before it was
		// published.
		if n := chainLen(); n != 2 {
			t.Fatalf("chain after inner view closed = %d entries, want 2", n)
		}
		_, data, err := outer.Read(m.OID)
		if err != nil || string(data) != "v1" {
			t.Fatalf("outer Read = %q %v", data, err)
		}
		return nil
	})
	if n := chainLen(); n != 1 {
		t.Fatalf("chain after all views closed = %d entries, want 1", n)
	}
}

func TestReadOnlyUpdateAndHooks(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	var order []string
	mustUpdate(t, s, func(tx *Txn) error {
		tx.AfterCommit(func() {
			order = append(order, "first")
			// Hooks run outside the write lock, so they may start Updates.
			mustUpdate(t, s, func(tx *Txn) error { return tx.Set([]byte("from-hook"), []byte("1")) })
		})
		tx.AfterCommit(func() { order = append(order, "second") })
		return tx.Set([]byte("k"), []byte("v"))
	})
	if !reflect.DeepEqual(order, []string{"first", "second"}) {
		t.Fatalf("hook order = %v", order)
	}
	if got := rawKeys(t, s); got["from-hook"] != "1" {
		t.Fatalf("keys = %v", got)
	}
	before := s.Stats()
	ran := false
	mustUpdate(t, s, func(tx *Txn) error {
		tx.AfterCommit(func() { ran = true })
		_, err := tx.Get([]byte("k"))
		return err
	})
	after := s.Stats()
	if !ran || after.SyncedCommits != before.SyncedCommits || after.ReadOnlyUpdates != before.ReadOnlyUpdates+1 {
		t.Fatalf("read-only update: ran=%v stats %+v -> %+v", ran, before, after)
	}
}

func TestTxnAfterFinish(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	var kept *Txn
	mustUpdate(t, s, func(tx *Txn) error { kept = tx; return nil })
	wantErr(t, kept.Set([]byte("k"), nil), ErrTxnDone)
	_, err := kept.Get([]byte("k"))
	wantErr(t, err, ErrTxnDone)
	_, err = kept.Stat("x")
	wantErr(t, err, ErrTxnDone)

	closeTest(t, s)
	wantErr(t, s.Update(func(tx *Txn) error { return nil }), ErrClosed)
	wantErr(t, s.View(func(tx *Txn) error { return nil }), ErrClosed)
	_, err = s.Events(0, 0)
	wantErr(t, err, ErrClosed)
	wantErr(t, s.Close(), ErrClosed)
}

func TestMetaEncodingRoundTrip(t *testing.T) {
	in := storedMeta{Meta: Meta{
		OID: "o", Namespace: "ns", Name: "n\x01", Kind: "k", Version: 1 << 40,
		Labels: map[string]string{"b": "2", "a": ""}, Owner: "me", Tier: TierDurable,
		PayloadSHA256: payloadHash([]byte("x")), PayloadBytes: 123456,
		CreatedAt: time.Unix(0, -5).UTC(), UpdatedAt: time.Unix(1<<33, 7).UTC(),
	}, Instance: "inst"}
	enc := encodeMeta(&in)
	out, err := decodeMeta(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in %+v\nout %+v", in, out)
	}
	for i := range len(enc) {
		if _, err := decodeMeta(enc[:i]); err == nil {
			t.Fatalf("truncated record of %d bytes decoded without error", i)
		}
	}
	if _, err := decodeMeta(append(enc, 0)); err == nil {
		t.Fatal("record with trailing byte decoded without error")
	}
}

func TestMetaCacheStaysCoherent(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	s.metaCacheLimit = 2 // force evictions

	var oids []string
	for i := range 5 {
		oids = append(oids, create(t, s, CreateSpec{Namespace: "ns", Name: fmt.Sprintf("o%d", i), Kind: "k",
			Tier: TierDurable, Payload: []byte("v1")}).OID)
	}
	version := map[string]uint64{}
	for _, oid := range oids {
		version[oid] = 1
	}
	check := func() {
		t.Helper()
		// Update transactions read through the cache, Views never do.
		var fromUpdate []Meta
		mustUpdate(t, s, func(tx *Txn) error {
			for _, oid := range oids {
				m, err := tx.Stat(oid)
				if errors.Is(err, ErrNotFound) {
					m = Meta{OID: oid}
				} else if err != nil {
					return err
				}
				fromUpdate = append(fromUpdate, m)
			}
			return nil
		})
		mustView(t, s, func(tx *Txn) error {
			for i, oid := range oids {
				m, err := tx.Stat(oid)
				if errors.Is(err, ErrNotFound) {
					m = Meta{OID: oid}
				} else if err != nil {
					return err
				}
				if !reflect.DeepEqual(m, fromUpdate[i]) {
					t.Fatalf("Update sees %+v, View sees %+v", fromUpdate[i], m)
				}
				if m.Version != version[oid] {
					t.Fatalf("%s: version %d, want %d", oid, m.Version, version[oid])
				}
			}
			return nil
		})
		if n := len(s.metaCache); n > 2 {
			t.Fatalf("meta cache holds %d entries over its limit", n)
		}
	}
	for round := range 3 {
		for i, oid := range oids {
			mustUpdate(t, s, func(tx *Txn) error {
				_, err := tx.Write(oid, version[oid], WriteSpec{Payload: fmt.Appendf(nil, "r%d", round)})
				return err
			})
			version[oid]++
			if (round+i)%3 == 0 {
				// A failed transaction and a rolled-back write leave the
				// committed version in place.
				_ = s.Update(func(tx *Txn) error {
					if _, err := tx.Write(oid, version[oid], WriteSpec{}); err != nil {
						return err
					}
					return errors.New("abandon")
				})
				mustUpdate(t, s, func(tx *Txn) error {
					sp := tx.Savepoint()
					if _, err := tx.Write(oid, version[oid], WriteSpec{}); err != nil {
						return err
					}
					tx.RollbackTo(sp)
					return nil
				})
			}
			check()
		}
		// Remove and recreate one object under the same OID.
		oid := oids[round]
		mustUpdate(t, s, func(tx *Txn) error { return tx.Remove(oid, version[oid]) })
		version[oid] = 0
		check()
		mustUpdate(t, s, func(tx *Txn) error {
			_, err := tx.Create(CreateSpec{Namespace: "ns", Name: fmt.Sprintf("o%d", round), Kind: "k", OID: oid, Tier: TierDurable})
			return err
		})
		version[oid] = 1
		check()
	}
}

// TestWriteWithKnownDigest: a digest the caller hands over is kept as the
// payload's, a wrong one is refused when digests are checked and stages
// nothing, and a payload handed off reads back as written.
func TestWriteWithKnownDigest(t *testing.T) {
	t.Setenv("LIBOS_CHECK_CACHES", "1")
	for _, tier := range []Tier{TierRuntimeLocal, TierDurable} {
		t.Run(string(tier), func(t *testing.T) {
			s := openTest(t, t.TempDir(), newFakeClock())
			defer closeTest(t, s)
			m := create(t, s, CreateSpec{Namespace: "ns", Name: "doc", Kind: "text", Tier: tier, Payload: []byte("one")})

			payload := []byte("two, extended")
			sum := sha256.Sum256(payload)
			err := s.Update(func(tx *Txn) error {
				_, err := tx.Write(m.OID, m.Version, WriteSpec{Payload: payload, PayloadSHA256: strings.Repeat("0", 64), Handoff: true})
				return err
			})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "payload_sha256") {
				t.Fatalf("write with a wrong digest: %v, want ErrInvalid naming payload_sha256", err)
			}
			if got, data, err := read(t, s, m.OID); err != nil || got.Version != m.Version || string(data) != "one" {
				t.Fatalf("after a refused write: version %d, payload %q, %v", got.Version, data, err)
			}

			var written Meta
			mustUpdate(t, s, func(tx *Txn) error {
				var err error
				written, err = tx.Write(m.OID, m.Version, WriteSpec{Payload: payload, PayloadSHA256: hex.EncodeToString(sum[:]), Handoff: true})
				return err
			})
			got, data, err := read(t, s, m.OID)
			if err != nil || got.PayloadSHA256 != hex.EncodeToString(sum[:]) || written.PayloadSHA256 != got.PayloadSHA256 || !bytes.Equal(data, payload) {
				t.Fatalf("after a write with its digest: %+v, payload %q, %v", got, data, err)
			}
		})
	}
}

// TestPeek: a Peek reads the committed state as a View does, and refuses
// writes and a missing function.
func TestPeek(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	m := create(t, s, CreateSpec{Namespace: "ns", Name: "local", Kind: "k", Payload: []byte("L1")})
	mustUpdate(t, s, func(tx *Txn) error {
		_, err := tx.Write(m.OID, 1, WriteSpec{Payload: []byte("L2")})
		return err
	})
	err := s.Peek(func(tx *Txn) error {
		got, data, err := tx.Read(m.OID)
		if err != nil || got.Version != 2 || string(data) != "L2" {
			t.Fatalf("Peek Read = v%d %q %v, want v2 L2", got.Version, data, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.Peek(func(tx *Txn) error { return tx.Set([]byte("k"), []byte("v")) }), ErrReadOnly)
	wantErr(t, s.Peek(nil), ErrInvalid)
}

// TestPayloadTailLetsTheNextVersionGrowInPlace checks WriteSpec.PayloadTail:
// the payload is Payload then PayloadTail (its bytes, size and hash), and a
// later version that appends to the first version's array in place, over
// where that version's tail would have been, leaves what a View of the first
// version reads unchanged, in both tiers.
func TestPayloadTailLetsTheNextVersionGrowInPlace(t *testing.T) {
	for _, tier := range []Tier{TierRuntimeLocal, TierDurable} {
		t.Run(string(tier), func(t *testing.T) {
			t.Setenv("LIBOS_CHECK_CACHES", "1") // handed-over digests are checked
			s := openTest(t, t.TempDir(), nil)
			defer closeTest(t, s)
			m := create(t, s, CreateSpec{Namespace: "ns", Name: "x", Kind: "k", Tier: tier})
			tail := []byte("]}")
			buf := make([]byte, 0, 64)
			buf = append(buf, `{"a":[1`...)
			write := func(version uint64, body []byte) Meta {
				var got Meta
				mustUpdate(t, s, func(tx *Txn) error {
					var err error
					sum := sha256.Sum256(append(slices.Clone(body), tail...))
					got, err = tx.Write(m.OID, version, WriteSpec{Payload: body, PayloadTail: tail, Handoff: true, PayloadSHA256: hex.EncodeToString(sum[:])})
					return err
				})
				return got
			}
			v2 := write(1, buf)
			if v2.PayloadBytes != len(`{"a":[1]}`) {
				t.Fatalf("payload_bytes %d, want %d", v2.PayloadBytes, len(`{"a":[1]}`))
			}
			mustView(t, s, func(old *Txn) error {
				write(2, append(buf, `,2`...)) // in place: cap(buf) allows it
				_, data, err := old.Read(m.OID)
				if err != nil || string(data) != `{"a":[1]}` {
					t.Fatalf("a View of version 2 reads %q, %v; want {\"a\":[1]}", data, err)
				}
				return nil
			})
			mustView(t, s, func(tx *Txn) error {
				meta, data, err := tx.Read(m.OID)
				if err != nil || string(data) != `{"a":[1,2]}` || meta.PayloadSHA256 != payloadHash(data) {
					t.Fatalf("version 3 reads %q (sha %s), %v", data, meta.PayloadSHA256, err)
				}
				return nil
			})
			// A handed-over digest that is not the payload's, tail included, is refused.
			err := s.Update(func(tx *Txn) error {
				sum := sha256.Sum256(buf[:len(`{"a":[1,2`)])
				_, err := tx.Write(m.OID, 3, WriteSpec{Payload: buf[:len(`{"a":[1,2`)], PayloadTail: tail, Handoff: true, PayloadSHA256: hex.EncodeToString(sum[:])})
				return err
			})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "payload_sha256") {
				t.Fatalf("write with the body's digest alone = %v, want ErrInvalid naming payload_sha256", err)
			}
		})
	}
}

// TestViewsReadPayloadsWhileWritersCommit: Views running beside commits that
// replace runtime-local payloads always find the payload of the version
// their snapshot holds, however many commits are applied while a View takes
// its snapshot or reads.
func TestViewsReadPayloadsWhileWritersCommit(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	const objs = 4
	var oids [objs]string
	for i := range objs {
		oids[i] = create(t, s, CreateSpec{Namespace: "ns", Name: fmt.Sprint("x", i), Kind: "k", Payload: []byte("v1")}).OID
	}
	stop := make(chan struct{})
	var writers, readers sync.WaitGroup
	for i := range objs {
		writers.Go(func() {
			for v := uint64(1); v <= 150; v++ {
				mustUpdate(t, s, func(tx *Txn) error {
					_, err := tx.Write(oids[i], v, WriteSpec{Payload: fmt.Appendf(nil, "v%d", v+1)})
					return err
				})
			}
		})
	}
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := s.Peek(func(tx *Txn) error {
					for _, oid := range oids {
						meta, data, err := tx.Read(oid)
						if err != nil {
							return err
						}
						if want := fmt.Sprint("v", meta.Version); string(data) != want {
							return fmt.Errorf("%s at version %d reads %q", oid, meta.Version, data)
						}
					}
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
}

// TestStatSharedLabels: StatShared reads what Stat reads, its labels are
// the store's own map, which a later write replaces and never changes, and
// Stat's labels remain the caller's to change.
func TestStatSharedLabels(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	m := create(t, s, CreateSpec{Namespace: "ns", Name: "x", Kind: "k", Payload: []byte("v1"), Labels: map[string]string{"gen": "1"}})
	var before Meta
	mustUpdate(t, s, func(tx *Txn) error {
		shared, err := tx.StatShared(m.OID)
		if err != nil {
			return err
		}
		copied, err := tx.Stat(m.OID)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(shared, copied) {
			t.Errorf("StatShared %+v, Stat %+v", shared, copied)
		}
		copied.Labels["gen"] = "changed by the caller"
		if again, _ := tx.StatShared(m.OID); again.Labels["gen"] != "1" {
			t.Errorf("a change to Stat's labels reached the store: %v", again.Labels)
		}
		before = shared
		_, err = tx.Write(m.OID, m.Version, WriteSpec{Payload: []byte("v2"), Labels: map[string]string{"gen": "2"}})
		return err
	})
	mustUpdate(t, s, func(tx *Txn) error {
		after, err := tx.StatShared(m.OID)
		if err != nil {
			return err
		}
		if after.Labels["gen"] != "2" || after.Version != m.Version+1 {
			t.Errorf("after the write: %+v", after)
		}
		if before.Labels["gen"] != "1" {
			t.Errorf("the write changed the labels map it replaced: %v", before.Labels)
		}
		if _, err := tx.StatShared("5d2c1b0a-9e8f-4a7b-8c6d-5e4f3a2b1c0d"); !errors.Is(err, ErrNotFound) {
			t.Errorf("StatShared of a missing Object: %v", err)
		}
		return nil
	})
}

// DropPayload leaves a runtime-local Object's new version with a lost
// payload, as a reopen does; it refuses a payload beside it and a durable
// Object, changing nothing.
func TestWriteDropPayload(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	local := create(t, s, CreateSpec{Namespace: "n", Name: "local", Kind: "k", Payload: []byte("held")})
	durable := create(t, s, CreateSpec{Namespace: "n", Name: "durable", Kind: "k", Tier: TierDurable, Payload: []byte("kept")})
	mustUpdate(t, s, func(tx *Txn) error {
		m, err := tx.Write(local.OID, local.Version, WriteSpec{DropPayload: true})
		if err != nil || !m.PayloadLost || m.PayloadSHA256 != "" || m.PayloadBytes != 0 {
			t.Fatalf("drop: %+v %v", m, err)
		}
		for _, c := range []struct {
			oid  string
			spec WriteSpec
			want string
		}{
			{durable.OID, WriteSpec{DropPayload: true}, "only a runtime-local payload"},
			{local.OID, WriteSpec{DropPayload: true, Payload: []byte("x")}, "takes no payload"},
			{local.OID, WriteSpec{DropPayload: true, KeepPayload: true}, "takes no payload"},
		} {
			cur, _ := tx.Stat(c.oid)
			if _, err := tx.Write(c.oid, cur.Version, c.spec); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%+v: %v, want ErrInvalid naming %q", c.spec, err, c.want)
			}
		}
		return nil
	})
	mustView(t, s, func(tx *Txn) error {
		if m, p, err := tx.Read(local.OID); !errors.Is(err, ErrPayloadLost) || p != nil || m.Version != local.Version+1 {
			t.Fatalf("read after the drop: %+v %q %v", m, p, err)
		}
		if _, p, err := tx.Read(durable.OID); err != nil || string(p) != "kept" {
			t.Fatalf("durable: %q %v", p, err)
		}
		return nil
	})
}

// ListAfter visits a namespace by name from after, across more Objects than
// one chunk of the index holds, including those the same transaction
// created and not those another namespace holds, and stops when told.
func TestListAfter(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	create := func(tx *Txn, ns string, i int) error {
		_, err := tx.Create(CreateSpec{Namespace: ns, Name: fmt.Sprintf("n%03d", i), Kind: "k", Tier: TierDurable, Payload: []byte("1")})
		return err
	}
	err := s.Update(func(tx *Txn) error {
		for i := 0; i < 150; i += 2 {
			if err := create(tx, "ns", i); err != nil {
				return err
			}
			if err := create(tx, "ns2", i); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(func(tx *Txn) error {
		for i := 1; i < 150; i += 2 {
			if err := create(tx, "ns", i); err != nil {
				return err
			}
		}
		var names []string
		if err := tx.ListAfter("ns", "n009", func(m Meta) (bool, error) {
			names = append(names, m.Name)
			return true, nil
		}); err != nil {
			return err
		}
		if len(names) != 140 || names[0] != "n010" || names[139] != "n149" {
			return fmt.Errorf("listed %d from %v to %v, want n010..n149", len(names), names[0], names[len(names)-1])
		}
		for i := 1; i < len(names); i++ {
			if names[i] <= names[i-1] {
				return fmt.Errorf("out of order: %s after %s", names[i], names[i-1])
			}
		}
		visited := 0
		if err := tx.ListAfter("ns", "", func(Meta) (bool, error) {
			visited++
			return visited < 70, nil
		}); err != nil || visited != 70 {
			return fmt.Errorf("stopped after %d visits (%v), want 70", visited, err)
		}
		all, err := tx.List("ns2")
		if err != nil || len(all) != 75 {
			return fmt.Errorf("List ns2: %d, %v", len(all), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
