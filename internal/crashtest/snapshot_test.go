package crashtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

// Raw key prefixes of the kernel, read by the snapshots. The snapshots read
// the store below the kernel on purpose: opening the directory with
// kernel.Open would run recovery, and recovery after a crash is what the
// next `libos resume` must do itself.
const (
	keyProcs       = "k/p/"
	keyRootMeta    = "k/host/cli.root"
	keyCheckpoints = "k/cp/"
)

// snapshot is what a runtime directory durably holds between invocations.
type snapshot struct {
	procs        map[int64]process.Record
	rootRecorded bool
	objects      map[string]objects.Meta // by OID, every process namespace
	mailboxes    map[int64][]mailbox.Message
	checkpoints  int
	lastEvent    uint64
}

func (s *snapshot) pids() []int64 {
	var out []int64
	for pid := range s.procs {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out
}

// humanMessages counts the Human messages in pid's mailbox.
func (s *snapshot) humanMessages(pid int64) int {
	n := 0
	for _, m := range s.mailboxes[pid] {
		if m.FromHuman() {
			n++
		}
	}
	return n
}

// readSnapshot reads dir's store without the kernel; nil when no store
// exists yet.
func readSnapshot(dir string) (*snapshot, error) {
	storeDir := filepath.Join(dir, "store")
	// Pebble's manifest marker appears once a database exists.
	if markers, err := filepath.Glob(filepath.Join(storeDir, "marker.manifest.*")); err != nil || len(markers) == 0 {
		return nil, err
	}
	st, err := objects.Open(storeDir, objects.Options{})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	s := &snapshot{procs: map[int64]process.Record{}, objects: map[string]objects.Meta{}, mailboxes: map[int64][]mailbox.Message{}}
	err = st.View(func(tx *objects.Txn) error {
		if err := tx.Scan([]byte(keyProcs), func(_, v []byte) error {
			var rec process.Record
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode process record: %w", err)
			}
			s.procs[rec.PID] = rec
			return nil
		}); err != nil {
			return err
		}
		if err := tx.Scan([]byte(keyCheckpoints), func(_, _ []byte) error {
			s.checkpoints++
			return nil
		}); err != nil {
			return err
		}
		if _, err := tx.Get([]byte(keyRootMeta)); err == nil {
			s.rootRecorded = true
		} else if !errors.Is(err, objects.ErrNotFound) {
			return err
		}
		for pid := range s.procs {
			metas, err := tx.List(kernel.Namespace(pid))
			if err != nil {
				return fmt.Errorf("list objects of pid %d: %w", pid, err)
			}
			for _, m := range metas {
				s.objects[m.OID] = m
			}
			var msgs []mailbox.Message
			if err := mailbox.List(tx, pid, func(m *mailbox.Message) error {
				msgs = append(msgs, *m)
				return nil
			}); err != nil {
				return err
			}
			s.mailboxes[pid] = msgs
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.lastEvent = st.LastEventSeq()
	return s, nil
}

func (r *runner) snapshot() *snapshot {
	r.t.Helper()
	s, err := readSnapshot(r.dir)
	if err != nil {
		r.t.Fatalf("snapshot: %v\n%s", err, r.transcript())
	}
	return s
}

// checkSnapshot compares s with every earlier snapshot of the run: what a
// directory durably held must still hold after any later crash and reopen.
//   - no process disappears, its state generation never goes back, and a
//     terminal process stays terminal with the same status, reason and
//     result;
//   - no Object disappears and no Object version goes back; a context's
//     generation never goes back;
//   - a one-shot grant's remaining uses never go up;
//   - no message disappears or changes, and an acked message stays acked;
//   - no checkpoint disappears, and the event log never shrinks.
func (r *runner) checkSnapshot(s *snapshot) {
	r.t.Helper()
	for _, old := range r.snaps {
		if problems := compareSnapshots(old, s); len(problems) > 0 {
			r.t.Fatalf("after %s:\n  %s\n%s", r.log[len(r.log)-1], strings.Join(problems, "\n  "), r.transcript())
		}
	}
	r.snaps = append(r.snaps, s)
}

func compareSnapshots(old, cur *snapshot) []string {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if cur.lastEvent < old.lastEvent {
		bad("the event log went back from seq %d to %d", old.lastEvent, cur.lastEvent)
	}
	if old.rootRecorded && !cur.rootRecorded {
		bad("the recorded root disappeared")
	}
	if cur.checkpoints < old.checkpoints {
		bad("checkpoints went from %d to %d", old.checkpoints, cur.checkpoints)
	}
	for pid, was := range old.procs {
		now, ok := cur.procs[pid]
		if !ok {
			bad("pid %d disappeared", pid)
			continue
		}
		if now.Gen < was.Gen {
			bad("pid %d: state generation went back from %d to %d", pid, was.Gen, now.Gen)
		}
		if was.State.Terminal() && (now.State != was.State || now.Reason != was.Reason || now.ResultOID != was.ResultOID) {
			bad("pid %d was %s (reason %q, result %q) and is now %s (reason %q, result %q)",
				pid, was.State, was.Reason, was.ResultOID, now.State, now.Reason, now.ResultOID)
		}
		for _, g := range was.Grants {
			if g.UsesRemaining == nil {
				continue
			}
			idx := slices.IndexFunc(now.Grants, func(n capabilities.Grant) bool { return n.ID == g.ID })
			if idx < 0 {
				continue // a used-up grant may be dropped; it cannot come back
			}
			if n := now.Grants[idx].UsesRemaining; n == nil || *n > *g.UsesRemaining {
				bad("pid %d: one-shot grant %s had %d uses left and now has %s", pid, g.ID, *g.UsesRemaining, usesString(n))
			}
		}
	}
	for oid, was := range old.objects {
		now, ok := cur.objects[oid]
		if !ok {
			bad("object %s (%s/%s) disappeared", oid, was.Namespace, was.Name)
			continue
		}
		if now.Version < was.Version {
			bad("object %s (%s/%s): version went back from %d to %d", oid, was.Namespace, was.Name, was.Version, now.Version)
		}
		if was.Version == now.Version && was.PayloadSHA256 != now.PayloadSHA256 {
			bad("object %s (%s/%s) version %d changed its payload", oid, was.Namespace, was.Name, now.Version)
		}
		if g0, g1 := generation(was), generation(now); g1 < g0 {
			bad("context %s: generation went back from %d to %d", oid, g0, g1)
		}
	}
	for pid, msgs := range old.mailboxes {
		now := map[string]mailbox.Message{}
		for _, m := range cur.mailboxes[pid] {
			now[m.ID] = m
		}
		for _, m := range msgs {
			n, ok := now[m.ID]
			switch {
			case !ok:
				bad("message %s to pid %d disappeared", m.ID, pid)
			case n.ContentSHA256() != m.ContentSHA256() || n.Sender != m.Sender:
				bad("message %s to pid %d changed", m.ID, pid)
			case m.Status == mailbox.StatusAcked && n.Status != mailbox.StatusAcked:
				bad("message %s to pid %d was acked and is now %s", m.ID, pid, n.Status)
			}
		}
	}
	return problems
}

func generation(m objects.Meta) uint64 {
	g, _ := strconv.ParseUint(m.Labels["generation"], 10, 64)
	return g
}

func usesString(n *int) string {
	if n == nil {
		return "no limit"
	}
	return strconv.Itoa(*n)
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
