package kernel

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/libos/libos/llm"
)

// TestContextEncodeMatchesWholeEncoding drives a context through random
// appends, shared copies (as the cache and a later transaction hold them),
// stale copies that extend too (a transaction that does not commit),
// in-place changes of an entry, replacements and reloads from a payload, and
// checks each payload against the encoding of the whole document, and each
// fresh entry encoding against the entry's own. The digest a call's request
// is named by must equal the SHA-256 of the payload, and extending it must
// leave the copy a cache shares as it was, and every earlier payload's bytes
// (which the store's versions keep) unchanged.
func TestContextEncodeMatchesWholeEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	entry := func(i int) Entry {
		e := Entry{Role: llm.RoleUser, Content: fmt.Sprintf("<msg %d & %s>", i, strings.Repeat("é", rng.IntN(5))), Tokens: i}
		if rng.IntN(3) == 0 {
			e.Role = llm.RoleAssistant
			e.ToolCalls = []llm.ToolCall{{ID: fmt.Sprint("c", i), Name: "t", Arguments: json.RawMessage(`{"a":1}`)}}
		}
		return e
	}
	c := &llmContext{}
	n := 0
	type keptPayload struct {
		body []byte
		was  string
	}
	var kept []keptPayload
	for step := range 3000 {
		switch rng.IntN(8) {
		case 0: // a later transaction starts from the cached copy
			c = &llmContext{entries: c.entries, encoded: c.encoded, encodedN: c.encodedN, digest: c.digest, grown: c.grown}
		case 1: // an entry changes in place, as a refused call's arguments do
			if len(c.entries) > 0 {
				i := rng.IntN(len(c.entries))
				c.entries = append([]Entry(nil), c.entries...)
				if i < c.encodedN {
					c.dropEncoding()
				}
				c.entries[i].Content = "changed"
			}
		case 2: // a compaction replaces the entries
			if rng.IntN(10) == 0 {
				c.entries = []Entry{entry(n)}
				n++
				c.dropEncoding()
			}
		case 3: // read back from its payload
			body, _, err := c.encode(0, nil)
			if err != nil {
				t.Fatal(err)
			}
			payload := append(slices.Clone(body), contextPayloadEnd...)
			var doc contextDoc
			if err := json.Unmarshal(payload, &doc); err != nil {
				t.Fatal(err)
			}
			c = &llmContext{entries: doc.Entries}
			c.encoded, c.encodedN = encodedPrefix(payload, len(doc.Entries))
		default:
			for range 1 + rng.IntN(3) {
				c.entries = append(c.entries, entry(n))
				n++
			}
			if rng.IntN(2) == 0 { // a reply's entry encoded before its commit
				last := c.entries[len(c.entries)-1]
				resp := llm.Response{Text: last.Content, ToolCalls: last.ToolCalls}
				if rng.IntN(3) == 0 {
					resp.Text += " (another reply)" // made for another entry: unused
				}
				c.ahead = &entryAhead{index: len(c.entries) - 1, reply: newReplyAhead(1, resp)}
				c.entries[len(c.entries)-1].Role = llm.RoleAssistant
			}
		}
		want, _ := json.Marshal(contextDoc{Entries: c.entries})
		if len(c.entries) == 0 {
			want = []byte(`{"entries":[]}`)
		}
		if rng.IntN(2) == 0 {
			sum, err := c.payloadDigest()
			if err != nil {
				t.Fatal(err)
			}
			if sum != sha256.Sum256(want) {
				t.Fatalf("step %d: the request's context digest is not the SHA-256 of its payload", step)
			}
		}
		shared := *c
		from := rng.IntN(len(c.entries) + 1)
		before := c.encodedN
		var room *contextRoom
		switch rng.IntN(3) {
		case 0: // made outside the lock for this encoding (prepareReply)
			room = c.roomFor(1 + rng.IntN(4<<10))
		case 1: // made for another encoding (garbage, if it were used)
			if stale := c.roomFor(1 << 10); stale != nil {
				for i := range stale.buf {
					stale.buf[i] = 'x'
				}
				stale.n--
				room = stale
			}
		}
		body, fresh, err := c.encode(from, room)
		if err != nil {
			t.Fatal(err)
		}
		if payload := append(slices.Clone(body), contextPayloadEnd...); !bytes.Equal(payload, want) {
			t.Fatalf("step %d: payload\n%s\nwant\n%s", step, payload, want)
		}
		kept = append(kept, keptPayload{body, string(body)})
		if len(kept) > 64 {
			kept = kept[1:]
		}
		if rng.IntN(4) == 0 { // the shared copy extends otherwise, and does not commit
			stale := shared
			stale.entries = append(slices.Clip(stale.entries[:min(stale.encodedN, len(stale.entries))]), entry(n+1e6))
			if _, _, err := stale.encode(0, nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range kept {
			if string(k.body) != k.was {
				t.Fatalf("step %d: an earlier payload changed:\n%s\nwas\n%s", step, k.body, k.was)
			}
		}
		for _, k := range []*llmContext{c, &shared} {
			if k.digest == nil {
				continue
			}
			if got, want := k.prefixDigest().Sum(nil), sha256.Sum256(k.encoded); !bytes.Equal(got, want[:]) {
				t.Fatalf("step %d: the digest kept is not the SHA-256 of the encoding kept", step)
			}
		}
		if from >= before {
			if len(fresh) != len(c.entries)-from {
				t.Fatalf("step %d: %d fresh encodings from %d of %d entries", step, len(fresh), from, len(c.entries))
			}
			for j, b := range fresh {
				e, _ := json.Marshal(&c.entries[from+j])
				if !bytes.Equal(b, e) {
					t.Fatalf("step %d: fresh encoding %s, want %s", step, b, e)
				}
			}
		}
	}
}

// TestRetainedEntryEncoding checks that the evidence of an entry written
// from its context encoding is the encoding of its retained record.
func TestRetainedEntryEncoding(t *testing.T) {
	h := newHarness(t, clockScript) // full-I/O retention is the default
	pid := h.spawn(clockGrants())
	h.run()
	seen := 0
	err := h.rt.view(func(tx *txn) error {
		return tx.Scan(retainPrefix(pid), func(_, v []byte) error {
			var item retained
			if err := json.Unmarshal(v, &item); err != nil {
				return err
			}
			if item.Kind != evidenceKindEntry {
				return nil
			}
			seen++
			want, _ := json.Marshal(item)
			if !bytes.Equal(v, want) {
				return fmt.Errorf("evidence %s, want %s", v, want)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen == 0 {
		t.Fatal("no entry was retained")
	}
}

// TestAppendEntriesLeavesSharedVersionsAlone drives contexts as the cache and
// transactions share them: each transaction starts from the newest committed
// version, appends (into spare capacity when there is room), and commits or
// is abandoned, and now and then one changes an entry as a refused call's
// arguments are shortened. Every version ever committed, as a reader may
// still hold it, must keep the entries it was committed with.
func TestAppendEntriesLeavesSharedVersionsAlone(t *testing.T) {
	k := &Runtime{tokens: byteEstimator{}}
	rng := rand.New(rand.NewPCG(7, 11))
	type version struct {
		entries []Entry // as the cache and readers share it
		want    []Entry // a private copy made at commit
	}
	versions := []version{{}}
	n := 0
	for step := range 3000 {
		latest := versions[len(versions)-1]
		c := &llmContext{entries: latest.entries}
		tx := &txn{}
		r := &procRecord{}
		if rng.IntN(60) == 0 {
			// A compaction writes back a new list.
			c.entries, c.owned = []Entry{{Role: llm.RoleUser, Kind: "summary", Content: fmt.Sprint("summary ", step)}}, true
		}
		for range 1 + rng.IntN(3) {
			add := make([]Entry, 1+rng.IntN(3))
			for i := range add {
				add[i] = Entry{Role: llm.RoleUser, Content: fmt.Sprint("entry ", n)}
				n++
			}
			if err := k.appendEntries(tx, r, c, add...); err != nil {
				t.Fatal(err)
			}
		}
		if len(c.entries) > 0 && rng.IntN(10) == 0 {
			// An entry changes: an unowned context copies first.
			if !c.owned {
				c.entries, c.owned = slices.Clone(c.entries), true
			}
			c.entries[rng.IntN(len(c.entries))].Content = fmt.Sprint("changed at step ", step)
		}
		if rng.IntN(4) == 0 {
			continue // abandoned: a later transaction appends over its entries
		}
		versions = append(versions, version{entries: c.entries, want: slices.Clone(c.entries)})
		// The versions a later append could reach share the newest arrays.
		for i := max(0, len(versions)-40); i < len(versions); i++ {
			v := versions[i]
			if !slices.EqualFunc(v.entries, v.want, func(a, b Entry) bool { return a.Content == b.Content && a.Role == b.Role }) {
				t.Fatalf("step %d: committed version %d changed under its readers", step, i)
			}
		}
	}
}

// TestAppendEntriesLeavesSharedPrefixes drives appendEntries, and the
// in-place change of a refused call's arguments, from contexts that share
// an entries array (the cache's copy, a later transaction's, a stale one
// that does not commit) and checks that no holder ever sees its entries
// change: an append writes past every holder's length, in place only when it
// is the first there.
func TestAppendEntriesLeavesSharedPrefixes(t *testing.T) {
	k := &Runtime{tokens: byteEstimator{}}
	rng := rand.New(rand.NewPCG(7, 11))
	r := &procRecord{}
	type holder struct {
		c    *llmContext
		seen []Entry // deep enough: entries are compared by value
	}
	var holders []holder
	keep := func(c *llmContext) {
		holders = append(holders, holder{c, slices.Clone(c.entries)})
		if len(holders) > 32 {
			holders = holders[1:]
		}
	}
	n := 0
	next := func() Entry {
		n++
		e := Entry{Role: llm.RoleTool, ToolCallID: fmt.Sprint("c", n), Content: fmt.Sprint("result ", n)}
		if rng.IntN(3) == 0 {
			e = Entry{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: fmt.Sprint("c", n), Name: "t", Arguments: json.RawMessage(`{"x":"` + strings.Repeat("a", 5000) + `"}`)}}}
		}
		return e
	}
	c := &llmContext{}
	for step := range 1500 {
		tx := &txn{}
		switch rng.IntN(6) {
		case 0: // a commit: the cache shares what was written
			c.owned = false
			keep(c.share())
			c = c.share() // the next transaction loads it from the cache
		case 1: // a stale copy appends and does not commit
			if len(holders) > 0 {
				stale := holders[rng.IntN(len(holders))].c.share()
				if err := k.appendEntries(tx, r, stale, next()); err != nil {
					t.Fatal(err)
				}
			}
		case 2: // a refused call's arguments shrink
			if len(c.entries) > 0 {
				if last := c.entries[len(c.entries)-1]; last.Role == llm.RoleAssistant {
					k.shrinkRefusedCall(tx, r, c, last.ToolCalls[0].ID)
				}
			}
		default:
			add := []Entry{next()}
			if rng.IntN(2) == 0 {
				add = append(add, next())
			}
			if err := k.appendEntries(tx, r, c, add...); err != nil {
				t.Fatal(err)
			}
		}
		for _, h := range holders {
			if len(h.c.entries) != len(h.seen) {
				t.Fatalf("step %d: a holder's entries changed length", step)
			}
			for i := range h.seen {
				a, b := h.c.entries[i], h.seen[i]
				if a.Content != b.Content || a.ToolCallID != b.ToolCallID || len(a.ToolCalls) != len(b.ToolCalls) ||
					(len(a.ToolCalls) > 0 && !bytes.Equal(a.ToolCalls[0].Arguments, b.ToolCalls[0].Arguments)) {
					t.Fatalf("step %d: entry %d of a holder changed", step, i)
				}
			}
		}
	}
}

// TestContextRoomMadeOutsideTheLock checks that an encoding that outgrows its
// array moves into the room made for it ahead (prepareReply), copying
// nothing more, and that room made for another encoding is left unused.
func TestContextRoomMadeOutsideTheLock(t *testing.T) {
	c := &llmContext{}
	for i := range 3 {
		c.entries = append(c.entries, Entry{Role: llm.RoleUser, Content: fmt.Sprint("message ", i)})
	}
	if _, _, err := c.encode(0, nil); err != nil {
		t.Fatal(err)
	}
	c.encoded = slices.Clip(c.encoded) // no spare capacity: the reply cannot fit in place
	big := Entry{Role: llm.RoleAssistant, Content: strings.Repeat("lorem ipsum ", 1000)}
	cached := *c // what the cache holds and prepareReply reads
	room := cached.roomFor(len(big.Content) + 256)
	if room == nil {
		t.Fatal("no room made for a reply larger than the encoding's spare capacity")
	}

	elsewhere := slices.Clone(room.buf)
	copyRoom := func() []byte { return append(make([]byte, 0, cap(room.buf)), room.buf...) }
	for _, other := range []*contextRoom{
		{from: room.from, n: room.n - 1, buf: copyRoom()}, // of another length
		{from: &elsewhere[0], n: room.n, buf: copyRoom()}, // of another array
	} {
		stale := *c
		stale.entries = append(slices.Clip(stale.entries), big)
		body, _, err := stale.encode(0, other)
		if err != nil {
			t.Fatal(err)
		}
		if &body[0] == &other.buf[:1][0] {
			t.Fatalf("room made for another encoding (%d bytes) was used", other.n)
		}
	}

	c.entries = append(slices.Clip(c.entries), big)
	body, _, err := c.encode(0, room)
	if err != nil {
		t.Fatal(err)
	}
	if &body[0] != &room.buf[:1][0] {
		t.Fatal("the encoding moved to a new array, not into the room made for it")
	}
	want, _ := json.Marshal(contextDoc{Entries: c.entries})
	if got := append(slices.Clone(body), contextPayloadEnd...); !bytes.Equal(got, want) {
		t.Fatalf("payload\n%s\nwant\n%s", got, want)
	}
	if string(cached.encoded) != string(room.buf[:room.n]) {
		t.Fatal("the cached encoding changed")
	}
}

// TestReplyEncodedAhead checks the encoding of a reply's entry made before
// its commit (prepareReply): completed with the token count the commit
// estimates, it is the entry's encoding, in the context's payload and in
// its evidence, which is the one evidence encoding made ahead; made for
// another entry, or for another place, it is not used.
func TestReplyEncodedAhead(t *testing.T) {
	// A response of its own for each case: one changes it in place.
	response := func() llm.Response {
		return llm.Response{Text: "a reply \"quoted\" <b>\n" + strings.Repeat("é", 100),
			ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "t", Arguments: json.RawMessage(`{"a":1}`)}}}
	}
	for _, tc := range []struct {
		name  string
		index func(n int) int
		// entry is the entry the commit appends, made from resp after the
		// encoding ahead was.
		entry func(resp llm.Response) Entry
		used  bool
	}{
		{"made for it", func(n int) int { return n - 1 }, replyEntry, true},
		{"another entry", func(n int) int { return n - 1 }, func(resp llm.Response) Entry {
			e := replyEntry(resp)
			e.Content += "!"
			return e
		}, false},
		{"another place", func(n int) int { return n - 2 }, replyEntry, false},
		{"its arguments changed in place", func(n int) int { return n - 1 }, func(resp llm.Response) Entry {
			e := replyEntry(resp)
			e.ToolCalls[0].Arguments[2] = 'b'
			return e
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &llmContext{entries: []Entry{{Role: llm.RoleUser, Content: "goal", Tokens: 3}}}
			if _, _, err := c.encode(0, nil); err != nil {
				t.Fatal(err)
			}
			resp := response()
			ahead := newReplyAhead(1, resp)
			e := tc.entry(resp)
			e.Tokens = 12345
			c.entries = append(c.entries, e)
			c.ahead = &entryAhead{index: tc.index(len(c.entries)), reply: ahead}
			body, fresh, err := c.encode(1, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := json.Marshal(contextDoc{Entries: c.entries})
			if got := append(slices.Clone(body), contextPayloadEnd...); !bytes.Equal(got, want) {
				t.Fatalf("payload\n%s\nwant\n%s", got, want)
			}
			last, _ := json.Marshal(&c.entries[1])
			if len(fresh) != 1 || !bytes.Equal(fresh[0], last) {
				t.Fatalf("fresh encodings %q, want the reply's\n%s", fresh, last)
			}
			evidence := c.ahead.evidenceOf(fresh[0])
			if (evidence != nil) != tc.used {
				t.Fatalf("encoding made ahead used: %v, want %v", evidence != nil, tc.used)
			}
			if evidence != nil {
				if want := slices.Concat([]byte(evidenceEntryStart), last, []byte("}")); !bytes.Equal(evidence, want) {
					t.Fatalf("evidence\n%s\nwant\n%s", evidence, want)
				}
				var r retained
				if err := json.Unmarshal(evidence, &r); err != nil || r.Kind != evidenceKindEntry || r.Entry == nil || !reflect.DeepEqual(*r.Entry, c.entries[1]) {
					t.Fatalf("evidence %s reads as %+v (%v)", evidence, r, err)
				}
			}
			if c.ahead.evidenceOf(slices.Clone(fresh[0])) != nil {
				t.Fatal("a copy of the entry's encoding matched the evidence made ahead")
			}
		})
	}
}

// TestSameEntryComparesEveryField: a reply's entry encoded ahead is used only
// for an entry that encodes alike, so a change to any field but the token
// count, or to any field of a tool call, makes it another entry. The test
// walks Entry's and ToolCall's fields, so a field added later is covered.
func TestSameEntryComparesEveryField(t *testing.T) {
	base := func() Entry {
		return Entry{Role: llm.RoleAssistant, Kind: "k", Content: "c", ToolCallID: "i", Name: "n", Tokens: 3,
			ToolCalls: []llm.ToolCall{{ID: "a", Name: "b", Arguments: json.RawMessage(`{}`)}}}
	}
	a := base()
	if b := base(); !sameEntry(&a, &b) {
		t.Fatal("equal entries differ")
	}
	b := base()
	b.Tokens = 9
	if !sameEntry(&a, &b) {
		t.Error("entries that differ only in tokens differ")
	}
	change := func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Slice:
			if v.Type().Elem().Kind() == reflect.Uint8 {
				v.SetBytes(append(bytes.Clone(v.Bytes()), ' '))
				return
			}
			v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
		default:
			t.Fatalf("no change for a %s", v.Kind())
		}
	}
	for i := range reflect.TypeFor[Entry]().NumField() {
		if reflect.TypeFor[Entry]().Field(i).Name == "Tokens" {
			continue
		}
		b := base()
		change(reflect.ValueOf(&b).Elem().Field(i))
		if sameEntry(&a, &b) {
			t.Errorf("a change to %s is not seen", reflect.TypeFor[Entry]().Field(i).Name)
		}
	}
	for i := range reflect.TypeFor[llm.ToolCall]().NumField() {
		b := base()
		b.ToolCalls = slices.Clone(b.ToolCalls)
		change(reflect.ValueOf(&b.ToolCalls[0]).Elem().Field(i))
		if sameEntry(&a, &b) {
			t.Errorf("a change to a tool call's %s is not seen", reflect.TypeFor[llm.ToolCall]().Field(i).Name)
		}
	}
	b = base()
	b.ToolCalls = []llm.ToolCall{{ID: "a", Name: "b", Arguments: nil}}
	a.ToolCalls = []llm.ToolCall{{ID: "a", Name: "b", Arguments: json.RawMessage{}}}
	if sameEntry(&a, &b) {
		t.Error("a nil argument (null) and an empty one are the same")
	}
}
