package kernel

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/libos/libos/objects"
)

// TestSnapshotIsDeep fills every field of a process record, through every
// pointer, slice and map, takes a snapshot, and checks that the two share no
// memory but the lists that are only ever replaced (the grant list, package
// capabilities, and the record's lists of names) and the goal's memo (never
// changed once built), and are equal: a field added later without a deep
// copy fails here.
func TestSnapshotIsDeep(t *testing.T) {
	var r procRecord
	fillValue(reflect.ValueOf(&r).Elem(), 1)
	s := r.snapshot()
	if !reflect.DeepEqual(&r, s) {
		t.Fatalf("snapshot differs from its record:\n%+v\n%+v", r, *s)
	}
	if path := sharedMemory(reflect.ValueOf(&r).Elem(), reflect.ValueOf(s).Elem(), "procRecord"); path != "" {
		t.Fatalf("snapshot shares %s with its record", path)
	}
	// nil and empty lists are kept apart (a tool table of [] is empty, nil is
	// the image's).
	r.ToolTable, r.Scopes = []string{}, nil
	s = r.snapshot()
	if s.ToolTable == nil || s.Scopes != nil {
		t.Fatalf("snapshot lost nil/empty: tool_table %#v scopes %#v", s.ToolTable, s.Scopes)
	}
	// A list with room to append into is shared cut to its length, so an
	// append to either record's leaves the other's as it was.
	var withRoom procRecord
	withRoom.ObservedTools = append(make([]string, 0, 4), "a")
	c := withRoom.snapshot()
	c.ObservedTools = append(c.ObservedTools, "b")
	withRoom.ObservedTools = append(withRoom.ObservedTools, "c")
	if c.ObservedTools[1] != "b" || withRoom.ObservedTools[1] != "c" {
		t.Fatalf("appends to a shared list reached the other record: %v and %v", c.ObservedTools, withRoom.ObservedTools)
	}
	a, _ := json.Marshal(&r)
	b, _ := json.Marshal(s)
	if string(a) != string(b) {
		t.Fatalf("snapshot encodes differently:\n%s\n%s", a, b)
	}
}

// fillValue sets every settable field of v to a non-zero value.
func fillValue(v reflect.Value, seed int) {
	if v.Type() == reflect.TypeOf(time.Time{}) {
		v.Set(reflect.ValueOf(time.Date(2026, 1, 1, 0, 0, seed, 0, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			if !f.CanSet() {
				f = reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem()
			}
			fillValue(f, seed+i)
		}
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fillValue(p.Elem(), seed)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := 0; i < 2; i++ {
			fillValue(s.Index(i), seed+i)
		}
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			s = reflect.ValueOf(json.RawMessage(`{"k":1}`))
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillValue(k, seed)
		fillValue(e, seed)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("s" + string(rune('a'+seed%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(seed + 1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(seed + 1))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(seed) + 0.5)
	case reflect.Interface:
		v.Set(reflect.ValueOf("payload"))
	}
}

// sharedMemory returns the path of the first pointer, slice or map that a
// and b share, or "".
func sharedMemory(a, b reflect.Value, path string) string {
	if a.Type() == reflect.TypeOf(time.Time{}) {
		return "" // a value; its location pointer is shared by design
	}
	if path == "procRecord.goal" {
		return "" // never changed once built
	}
	switch path {
	case "procRecord.Record.Grants", "procRecord.ObservedTools", "procRecord.ActiveSkills", "procRecord.ToolTable", "procRecord.Scopes":
		// Lists only ever replaced: shared, with no room to append into.
		if b.Len() > 0 && b.Cap() != b.Len() {
			return path + " (with room to append into)"
		}
		return ""
	}
	switch a.Kind() {
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			if p := sharedMemory(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); p != "" {
				return p
			}
		}
	case reflect.Pointer:
		if a.IsNil() {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		return sharedMemory(a.Elem(), b.Elem(), path)
	case reflect.Slice:
		if a.Len() == 0 {
			return ""
		}
		if a.Pointer() == b.Pointer() {
			return path
		}
		for i := 0; i < a.Len(); i++ {
			if p := sharedMemory(a.Index(i), b.Index(i), path+"[]"); p != "" {
				return p
			}
		}
	case reflect.Map:
		if !a.IsNil() && a.Pointer() == b.Pointer() {
			return path
		}
	}
	return ""
}

// TestSavedRecordsSurviveRollback saves a record, takes a savepoint, saves
// it again changed (twice: the second save reuses the first's copy) and
// rolls back, then saves and rolls back once more: the record saved before
// the savepoint is what the transaction holds again, and what it writes.
func TestSavedRecordsSurviveRollback(t *testing.T) {
	h := newHarness(t, "")
	pid := h.spawn(clockGrants())
	err := h.rt.store.Update(func(otx *objects.Txn) error {
		tx := &txn{Txn: otx, records: h.rt.records}
		r, err := loadProc(tx, pid)
		if err != nil {
			return err
		}
		r.Turn = 7
		if err := saveProc(tx, r); err != nil {
			return err
		}
		sp := tx.savepoint()
		for _, turn := range []int{8, 9} {
			r.Turn = turn
			if err := saveProc(tx, r); err != nil {
				return err
			}
		}
		if got := tx.procs[pid].copy.Turn; got != 9 {
			t.Errorf("saved after the savepoint: turn %d, want 9", got)
		}
		tx.rollbackTo(sp)
		if got := tx.procs[pid].copy.Turn; got != 7 {
			t.Errorf("saved after the rollback: turn %d, want 7, as saved before the savepoint", got)
		}
		// The savepoint holds what it held: a second rollback to it undoes
		// a save made after the first.
		r.Turn = 10
		if err := saveProc(tx, r); err != nil {
			return err
		}
		tx.rollbackTo(sp)
		if got := tx.procs[pid].copy.Turn; got != 7 {
			t.Errorf("saved after a second rollback: turn %d, want 7", got)
		}
		return writeProcs(tx)
	})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := h.rt.Process(pid); err != nil || info.Turn != 7 {
		t.Fatalf("written after the rollback: turn %d (%v), want 7", info.Turn, err)
	}
}
