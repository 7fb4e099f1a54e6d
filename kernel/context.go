package kernel

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

// Entry is one item of a process's LLM context.
type Entry struct {
	Role       llm.Role       `json:"role"`
	Kind       string         `json:"kind,omitempty"` // "" (a message), "notice", "summary"
	Content    string         `json:"content,omitempty"`
	ToolCalls  []llm.ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	Name       string         `json:"name,omitempty"`
	Tokens     int            `json:"tokens"`
}

// TokenEstimator estimates the tokens of a text. The default counts one token
// per four bytes, rounded up: close enough for pressure decisions on English
// and JSON, and deterministic.
type TokenEstimator interface {
	Estimate(text string) int
}

type byteEstimator struct{}

func (byteEstimator) Estimate(text string) int { return (len(text) + 3) / 4 }

func (k *Runtime) entryTokens(e *Entry) int {
	n := k.tokens.Estimate(e.Content)
	for _, c := range e.ToolCalls {
		n += k.tokens.Estimate(c.Name) + k.tokens.Estimate(string(c.Arguments))
	}
	return n + 4
}

const (
	contextKind          = "llm_context"
	labelGeneration      = "generation"
	contextNamePrefix    = "llm_context:"
	transcriptKind       = "transcript"
	transcriptNamePrefix = "transcript:"
	goalName             = "goal"
	resultName           = "result"
	contextHeading       = "LLM context object:"
	evidenceKindEntry    = "entry"
	// evidenceKindReset marks a compaction or restore: the entries retained
	// after it replace everything before it.
	evidenceKindReset = "reset"
	// evidenceKindGoal holds a restated goal's text and version.
	evidenceKindGoal   = "goal"
	evidenceKindHeader = "header"
)

// llmContext is a decoded context Object.
type llmContext struct {
	meta    objects.Meta
	entries []Entry
	tokens  int
	// owned says entries' array is private to this transaction (not shared
	// with the cache), so its entries may change in place.
	owned bool
	// entriesGrown is how far any append has written into entries' array,
	// shared by every context holding a prefix of it (nil: unknown), so a
	// commit copies none of the entries it extends (roomPast).
	entriesGrown *int
	// newGeneration, when non-zero, is written with the next flush.
	newGeneration uint64
	// encoded is the start of the context's payload up to entries[:encodedN]
	// (see encode), so a commit encodes only the entries it added. Its bytes
	// never change once written, so contexts, the cache and the store's
	// versions share it; an extension may append past its length (grown).
	encoded  []byte
	encodedN int
	// grown is how far any extension has written into encoded's array,
	// shared by every context holding a prefix of it (nil: unknown), so a
	// commit copies none of the payload it extends (roomPast).
	grown *int
	// digest is the SHA-256 state after writing encoded (nil: not computed
	// yet, as after a load); like encoded it is shared with the cache and
	// never written once set: an extension clones it.
	digest hash.Hash
	// ahead is the encoding of the entry at ahead.index made before the
	// transaction (replyAhead), which encodeNew uses if that entry is still
	// the one encoded; nil when none. Only the transaction that staged it
	// sees it (share drops it).
	ahead *entryAhead
}

// contextPayloadStart is how a context payload begins: the encoding of a
// contextDoc whose entries follow.
const contextPayloadStart = `{"entries":[`

// encode returns c's payload, the encoding of contextDoc{Entries: c.entries}
// (an empty list for none), as its body, which contextPayloadEnd follows,
// encoding only the entries past encodedN; and the encodings of
// entries[from:] for their evidence. The body grows encoded's array in
// place when no other extension has written past it and it has room, so a
// commit costs what the context grew by; no earlier payload's bytes change.
// Otherwise it moves to room's array when room was made for this encoding
// (Runtime.prepareReply), else to a new one.
func (c *llmContext) encode(from int, room *contextRoom) (body []byte, fresh [][]byte, err error) {
	c.keepValidEncoding()
	added, err := c.encodeNew()
	if err != nil {
		return nil, nil, err
	}
	size := len(c.encoded)
	for _, b := range added {
		size += len(b) + 1
	}
	buf, _ := roomPast(c.encoded, &c.grown, size-len(c.encoded), contextCapacity, room.spareFor(c.encoded))
	digest := c.prefixDigest()
	for j, b := range added {
		start := len(buf)
		if c.encodedN+j > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, b...)
		digest.Write(buf[start:])
	}
	*c.grown = len(buf)
	if from >= c.encodedN {
		fresh = added[min(from-c.encodedN, len(added)):]
	}
	c.encoded, c.encodedN, c.digest = buf, len(c.entries), digest
	return buf, fresh, nil
}

// contextPayloadEnd closes a context payload after its body (encode). The
// store keeps it apart from the body (objects.WriteSpec.PayloadTail); it is
// never modified.
var contextPayloadEnd = []byte("]}")

// dropEncoding forgets the kept encoding: the entries it covers changed.
func (c *llmContext) dropEncoding() {
	c.encoded, c.encodedN, c.digest, c.grown = nil, 0, nil, nil
}

// keepValidEncoding starts the kept encoding over when there is none or it
// covers more entries than c has (they were replaced).
func (c *llmContext) keepValidEncoding() {
	if c.encoded == nil || c.encodedN > len(c.entries) {
		c.dropEncoding()
		c.encoded = []byte(contextPayloadStart)
	}
}

// encodeNew returns the encodings of the entries past encodedN.
func (c *llmContext) encodeNew() ([][]byte, error) {
	added := make([][]byte, 0, len(c.entries)-c.encodedN)
	for i := c.encodedN; i < len(c.entries); i++ {
		if b := c.ahead.encodingOf(i, &c.entries[i]); b != nil {
			added = append(added, b)
			continue
		}
		b, err := json.Marshal(&c.entries[i])
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		added = append(added, b)
	}
	return added, nil
}

// payloadDigest returns the SHA-256 of the payload encode would return now.
// It hashes only what the last digest did not cover: the entries past
// encodedN, and the whole kept encoding the first time after a load.
func (c *llmContext) payloadDigest() ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	c.keepValidEncoding()
	added, err := c.encodeNew()
	if err != nil {
		return sum, err
	}
	d := c.prefixDigest()
	for j, b := range added {
		if c.encodedN+j > 0 {
			d.Write([]byte{','})
		}
		d.Write(b)
	}
	d.Write(contextPayloadEnd)
	d.Sum(sum[:0])
	return sum, nil
}

// prefixDigest returns a SHA-256 state after encoded that the caller may
// extend: a clone of digest, or a new one over encoded (once after a load).
func (c *llmContext) prefixDigest() hash.Hash {
	if c.digest == nil {
		d := sha256.New()
		d.Write(c.encoded)
		return d
	}
	// Every hash of the standard library can be cloned (hash.Cloner).
	d, err := c.digest.(hash.Cloner).Clone()
	if err != nil {
		panic(fmt.Sprintf("kernel: clone a SHA-256 state: %v", err))
	}
	return d
}

// encodedPrefix returns what encode keeps of a payload read from the
// store, if it is a contextDoc encoding of n entries as encode builds it.
func encodedPrefix(payload []byte, n int) ([]byte, int) {
	if !bytes.HasPrefix(payload, []byte(contextPayloadStart)) || !bytes.HasSuffix(payload, contextPayloadEnd) {
		return nil, 0
	}
	return payload[: len(payload)-2 : len(payload)-2], n
}

func (c *llmContext) generation() uint64 {
	g, _ := strconv.ParseUint(c.meta.Labels[labelGeneration], 10, 64)
	return g
}

type contextDoc struct {
	Entries []Entry `json:"entries"`
}

// loadContext reads a process's context Object: the one this transaction
// changed already, else the cache's when the version matches. A payload lost
// to a reopen reads as empty here; recovery rebuilds it from retained
// evidence before any quantum runs.
func (k *Runtime) loadContext(tx *txn, r *procRecord) (*llmContext, error) {
	if c := tx.stagedContext(r); c != nil {
		return c, nil
	}
	// The context keeps meta's labels and only reads them.
	meta, err := tx.StatShared(r.ContextOID)
	if err != nil {
		return nil, fmt.Errorf("context of pid %d: %w", r.PID, err)
	}
	cached := k.cachedContext(r.PID)
	if cached != nil && cached.meta.Version == meta.Version && cached.meta.OID == meta.OID {
		c := cached.share()
		c.meta = meta
		if k.records.check {
			if err := verifyCachedContext(tx, c); err != nil {
				return nil, fmt.Errorf("context of pid %d: %w", r.PID, err)
			}
		}
		return c, nil
	}
	_, payload, err := tx.Read(r.ContextOID)
	c := &llmContext{meta: meta}
	switch {
	case errors.Is(err, objects.ErrPayloadLost):
		entries, err := k.rebuildContext(tx, r)
		if err != nil {
			return nil, err
		}
		c.entries = entries
		for _, e := range entries {
			c.tokens += e.Tokens
		}
		if !k.retain {
			// The notice is new: it must be written back, not counted as retained.
			r.RetainedEntries = 0
		}
		return c, nil
	case err != nil:
		return nil, fmt.Errorf("context of pid %d: %w", r.PID, err)
	}
	c, err = decodeContext(meta, payload)
	if err != nil {
		return nil, fmt.Errorf("context of pid %d: %w", r.PID, err)
	}
	return c, nil
}

// maxContextDecodedInCommit bounds the payload of a context that a commit
// of another process's quantum may decode under the store's write lock, to
// start the quantum of the process it woke (contextAtHand): a new child's,
// a short conversation's. Decoding runs at about 70 MB/s, so 16 KiB would
// hold every other commit for about a quarter of a millisecond.
const maxContextDecodedInCommit = 4 << 10

// contextAtHand reports whether r's context can be loaded in a commit of
// another process's quantum without stalling every other commit: it is
// cached at its committed version, or its payload is small (a new child's).
// A larger one is left to r's own start, which decodes it outside the lock
// first (prewarmContext); one a reopen lost is rebuilt in r's own start
// commit, not in another process's.
func (k *Runtime) contextAtHand(tx *txn, r *procRecord) (bool, error) {
	if r.ContextOID == "" || tx.stagedContext(r) != nil {
		return true, nil
	}
	meta, err := tx.StatShared(r.ContextOID)
	if err != nil {
		return false, fmt.Errorf("context of pid %d: %w", r.PID, err)
	}
	if c := k.cachedContext(r.PID); c != nil && c.meta.Version == meta.Version && c.meta.OID == meta.OID {
		return true, nil
	}
	return !meta.PayloadLost && meta.PayloadBytes <= maxContextDecodedInCommit, nil
}

// verifyCachedContext compares a cached context, its kept encoding and
// digest with the stored payload (LIBOS_CHECK_CACHES=1): both encoded as a
// commit would write them must be the same bytes, and the digest theirs. A
// payload written otherwise (a checkpoint's) may differ in its bytes only.
func verifyCachedContext(tx *txn, cached *llmContext) error {
	_, stored, err := tx.Read(cached.meta.OID)
	if errors.Is(err, objects.ErrPayloadLost) {
		return nil
	}
	if err != nil {
		return err
	}
	fromStore, err := decodeContext(cached.meta, stored)
	if err != nil {
		return err
	}
	fromStore.dropEncoding()
	want, _, err := fromStore.encode(0, nil)
	if err != nil {
		return err
	}
	want = append(want, contextPayloadEnd...)
	// A copy that takes a new array: checking writes nothing others share.
	c := *cached
	c.grown = nil
	got, _, err := c.encode(len(c.entries), nil)
	if err != nil {
		return err
	}
	got = append(got, contextPayloadEnd...)
	sum, err := c.payloadDigest()
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) || sum != sha256.Sum256(want) {
		return fmt.Errorf("the cached context at version %d is not the stored one", cached.meta.Version)
	}
	return nil
}

// decodeContext decodes the payload of a context Object at meta.
func decodeContext(meta objects.Meta, payload []byte) (*llmContext, error) {
	entries, ok := decodeEntries(payload)
	if !ok {
		var doc contextDoc
		if err := json.Unmarshal(payload, &doc); err != nil {
			return nil, fmt.Errorf("decode: %w", err)
		}
		entries = doc.Entries
	}
	c := &llmContext{meta: meta, entries: entries}
	for _, e := range c.entries {
		c.tokens += e.Tokens
	}
	c.encoded, c.encodedN = encodedPrefix(payload, len(c.entries))
	return c, nil
}

// prewarmContext decodes pid's context into the cache, from a peek, when
// the cache does not hold it: the first quantum after a long wait or a reopen
// then finds it there, at the version it reads, instead of decoding it (in
// time that grows with the context) under the store's write lock. A process
// with nothing to run, or a context it cannot read here, is left to the
// quantum.
func (k *Runtime) prewarmContext(pid int64) {
	if k.cachedContext(pid) != nil {
		return
	}
	var c *llmContext
	err := k.peek(func(tx *txn) error {
		r, err := loadProc(tx, pid)
		if err != nil || r.State != process.Runnable || r.ContextOID == "" {
			return err
		}
		meta, payload, err := tx.Read(r.ContextOID)
		if err != nil {
			return err
		}
		if c, err = decodeContext(meta, payload); err != nil {
			return err
		}
		if c.encoded != nil {
			c.digest = c.prefixDigest()
		}
		return nil
	})
	if err != nil || c == nil {
		return
	}
	k.cacheContext(pid, c)
}

// appendEntries stages new entries on the context, retains them as evidence
// when full-I/O retention is on, and refreshes the cache after commit.
func (k *Runtime) appendEntries(tx *txn, r *procRecord, c *llmContext, add ...Entry) error {
	if len(add) == 0 {
		return nil
	}
	for i := range add {
		add[i].Tokens = k.entryTokens(&add[i])
		c.tokens += add[i].Tokens
	}
	// The cache and a call in flight may hold a prefix of the array; a
	// doubled capacity keeps appends amortized across commits.
	entries, fresh := roomPast(c.entries, &c.entriesGrown, len(add), func(n int) int { return 2 * n }, nil)
	c.entries = append(entries, add...)
	*c.entriesGrown = len(c.entries)
	c.owned = c.owned || fresh
	tx.stageContext(r, c)
	return nil
}

// roomPast returns s with room for need more elements appended past its
// length, such that no other holder of a prefix of s's array sees its
// elements change: s itself when no append has written past len(s) (*mark
// says how far appends wrote into the array) and the array has room; else
// spare, a copy of s already made in an array with room (nil: none), or a
// copy in a new array of capacity capacity(len(s)+need); either with a new
// mark (fresh). The caller appends, then sets the mark to its new length.
// Marks are read and written only in Update transactions, under the store's
// write lock.
func roomPast[T any](s []T, mark **int, need int, capacity func(int) int, spare []T) (out []T, fresh bool) {
	if *mark != nil && **mark == len(s) && cap(s)-len(s) >= need {
		return s, false
	}
	if spare != nil && len(spare) == len(s) && cap(spare)-len(spare) >= need {
		out = spare
	} else {
		out = make([]T, len(s), capacity(len(s)+need))
		copy(out, s)
	}
	*mark = new(int)
	return out, true
}

// contextCapacity is the capacity a context's encoding moves to when it
// needs n bytes: room to spare, so most commits extend it in place.
func contextCapacity(n int) int { return n + n/2 + 256 }

// contextRoom is a copy of a cached context's kept encoding in a larger
// array, made outside the store's write lock for the commit that extends it
// next (Runtime.prepareReply): that commit then moves the encoding into it instead
// of copying the whole context, and touching new memory, under the lock.
// from and n say which encoding was copied: the first byte of its array and
// its length.
type contextRoom struct {
	from *byte
	n    int
	buf  []byte
}

// spareFor returns r's copy when r was made from encoded, else nil.
func (r *contextRoom) spareFor(encoded []byte) []byte {
	if r == nil || len(encoded) == 0 || r.n != len(encoded) || r.from != &encoded[0] {
		return nil
	}
	return r.buf
}

// replyAhead is what the result phase prepares for its commit outside the
// store's write lock (Runtime.prepareReply): room for the context to grow
// into, and the encoding of the reply's entry.
type replyAhead struct {
	pid  int64
	room *contextRoom
	// entry is the reply's entry (replyEntry) with no token count, and
	// start the encoding of its evidence up to that count: the count is
	// estimated in the commit (entryTokens), which completes the encoding
	// in start's spare capacity (entryAhead.encodingOf).
	entry Entry
	start []byte
}

// entryAhead places a replyAhead's entry in a context: at index.
type entryAhead struct {
	index int
	reply *replyAhead
	// evidence is the evidence encoding completed last (encodingOf).
	evidence []byte
}

// evidenceEntryStart is how the evidence of an entry begins: the encoding
// of retained{Kind: evidenceKindEntry} up to the entry's.
const evidenceEntryStart = `{"kind":"` + evidenceKindEntry + `","entry":`

// tokensEnd is how an entry's encoding ends with no token count.
const tokensEnd = `"tokens":0}`

// prepareReply prepares, outside the store's write lock, what the result
// commit of resp adds to pid's context: the encoding of the reply's entry,
// and room for the context's encoding when the cached one's array looks
// short of it (roomFor). The room's estimate counts the reply's text and
// arguments as they are and half a kilobyte for each tool call's result;
// when the commit needs more (escaping, a large result) it moves the
// encoding itself. The bytes copied belong to committed versions and never
// change, and the cached context is never modified, so reading both here is
// safe.
func (k *Runtime) prepareReply(pid int64, resp llm.Response) *replyAhead {
	a := newReplyAhead(pid, resp)
	if c := k.cachedContext(pid); c != nil {
		need := len(resp.Text) + 256
		for _, call := range resp.ToolCalls {
			need += len(call.Arguments) + len(call.Name) + len(call.ID) + 512
		}
		a.room = c.roomFor(need)
	}
	return a
}

// newReplyAhead encodes resp's entry ahead of pid's result commit.
func newReplyAhead(pid int64, resp llm.Response) *replyAhead {
	a := &replyAhead{pid: pid, entry: replyEntry(resp)}
	// Its own tool calls: the entry the commit appends shares resp's, and
	// sameEntry would find a change made to them in place equal.
	a.entry.ToolCalls = slices.Clone(a.entry.ToolCalls)
	for i := range a.entry.ToolCalls {
		a.entry.ToolCalls[i].Arguments = slices.Clone(a.entry.ToolCalls[i].Arguments)
	}
	if enc, err := json.Marshal(&a.entry); err == nil && bytes.HasSuffix(enc, []byte(tokensEnd)) {
		enc = enc[:len(enc)-len(tokensEnd)+len(`"tokens":`)]
		// Room for the count, and the closing bytes of entry and evidence.
		a.start = make([]byte, 0, len(evidenceEntryStart)+len(enc)+24)
		a.start = append(append(a.start, evidenceEntryStart...), enc...)
	}
	return a
}

// replyEntry is the context entry of a model's reply.
func replyEntry(resp llm.Response) Entry {
	e := Entry{Role: llm.RoleAssistant, Content: resp.Text, ToolCalls: resp.ToolCalls}
	if e.Content == "" && len(e.ToolCalls) == 0 {
		// Servers refuse an empty assistant message in a later request.
		e.Content = "(empty reply)"
	}
	return e
}

// encodingOf returns the encoding of e, the entry at index i, completed
// from the one made ahead, if that was made for i and for this entry; else
// nil.
func (a *entryAhead) encodingOf(i int, e *Entry) []byte {
	if a == nil || a.index != i || a.reply.start == nil {
		return nil
	}
	if !sameEntry(&a.reply.entry, e) {
		return nil
	}
	b := strconv.AppendInt(a.reply.start, int64(e.Tokens), 10)
	a.evidence = append(b, "}}"...)
	return a.evidence[len(evidenceEntryStart) : len(a.evidence)-1 : len(a.evidence)-1]
}

// sameEntry reports whether a and b encode alike but for their token counts:
// the same fields, tool calls and arguments (a nil argument encodes as null,
// an empty one does not).
func sameEntry(a, b *Entry) bool {
	if a.Role != b.Role || a.Kind != b.Kind || a.Content != b.Content || a.ToolCallID != b.ToolCallID ||
		a.Name != b.Name || len(a.ToolCalls) != len(b.ToolCalls) {
		return false
	}
	for i := range a.ToolCalls {
		x, y := &a.ToolCalls[i], &b.ToolCalls[i]
		if x.ID != y.ID || x.Name != y.Name || (x.Arguments == nil) != (y.Arguments == nil) ||
			!bytes.Equal(x.Arguments, y.Arguments) {
			return false
		}
	}
	return true
}

// evidenceOf returns the evidence encoding encodingOf completed with entry,
// the entry's encoding it returned; else nil.
func (a *entryAhead) evidenceOf(entry []byte) []byte {
	if a == nil || len(a.evidence) == 0 || len(entry) != len(a.evidence)-len(evidenceEntryStart)-1 ||
		&entry[0] != &a.evidence[len(evidenceEntryStart)] {
		return nil
	}
	return a.evidence
}

// minContextRoom is the smallest encoding worth moving outside the lock:
// copying a smaller one in the commit costs less than making room for it
// when the estimate proves too high.
const minContextRoom = 8 << 10

// roomFor copies c's kept encoding into an array with room for need more
// bytes, unless its own array has that room past its length, the two make
// less than minContextRoom, or it keeps none.
func (c *llmContext) roomFor(need int) *contextRoom {
	n := len(c.encoded)
	if n == 0 || cap(c.encoded)-n >= need || n+need < minContextRoom {
		return nil
	}
	buf := make([]byte, n, contextCapacity(n+need))
	copy(buf, c.encoded)
	return &contextRoom{from: &c.encoded[0], n: n, buf: buf}
}

// share returns a copy of c for another holder (the cache, a later
// transaction): it shares c's entries and kept encoding, and may change
// neither in place.
func (c *llmContext) share() *llmContext {
	s := *c
	s.owned, s.newGeneration, s.ahead = false, 0, nil
	return &s
}

// maxRefusedArgsBytes bounds the arguments of a refused call that the
// context keeps: anything larger is replaced by a short description, so an
// oversized argument the runtime refused cannot fill the next request.
const maxRefusedArgsBytes = 4 << 10

// truncatedArgs describes arguments too large to keep: their size, hash and
// a prefix, as a JSON object (servers expect arguments to be JSON).
func truncatedArgs(args json.RawMessage) json.RawMessage {
	prefix := args[:min(len(args), 256)]
	for !utf8.Valid(prefix) && len(prefix) > 0 {
		prefix = prefix[:len(prefix)-1]
	}
	b, _ := json.Marshal(map[string]any{"libos_truncated": map[string]any{
		"bytes": len(args), "sha256": sha(args), "prefix": string(prefix),
		"note": "the runtime refused these arguments and kept only this description of them",
	}})
	return b
}

// shrinkRefusedCall replaces the arguments of call id in the latest
// assistant entry with a description when they are larger than
// maxRefusedArgsBytes. The entry may be shared with the cache, so it is
// copied before it changes.
func (k *Runtime) shrinkRefusedCall(tx *txn, r *procRecord, c *llmContext, id string) {
	for i := len(c.entries) - 1; i >= 0; i-- {
		if c.entries[i].Role != llm.RoleAssistant {
			continue
		}
		j := slices.IndexFunc(c.entries[i].ToolCalls, func(tc llm.ToolCall) bool { return tc.ID == id })
		if j < 0 || len(c.entries[i].ToolCalls[j].Arguments) <= maxRefusedArgsBytes {
			return
		}
		if !c.owned {
			c.entries, c.owned, c.entriesGrown = slices.Clone(c.entries), true, nil
		}
		if i < c.encodedN {
			c.dropEncoding()
		}
		e := &c.entries[i]
		e.ToolCalls = slices.Clone(e.ToolCalls)
		e.ToolCalls[j].Arguments = truncatedArgs(e.ToolCalls[j].Arguments)
		c.tokens -= e.Tokens
		e.Tokens = k.entryTokens(e)
		c.tokens += e.Tokens
		tx.stageContext(r, c)
		return
	}
}

// replaceContext stages a whole new entry list (a compaction writeback)
// and advances the generation.
func (k *Runtime) replaceContext(tx *txn, r *procRecord, c *llmContext, entries []Entry) {
	c.entries, c.owned, c.entriesGrown = entries, true, nil
	c.dropEncoding()
	c.tokens = 0
	for _, e := range entries {
		c.tokens += e.Tokens
	}
	c.newGeneration = c.generation() + 1
	// Evidence after a compaction starts from the summary: recovery rebuilds
	// the context from the last compaction on.
	r.RetainedEntries = 0
	tx.stageContext(r, c)
}

// writeContext stores c's entries with a compare-and-swap on the version c
// was read at.
func (k *Runtime) writeContext(tx *txn, r *procRecord, c *llmContext) error {
	var room *contextRoom
	if c.ahead != nil {
		room = c.ahead.reply.room
	}
	body, fresh, err := c.encode(r.RetainedEntries, room)
	if err != nil {
		return fmt.Errorf("encode context of pid %d: %w", r.PID, err)
	}
	var labels map[string]string
	if c.newGeneration != 0 {
		labels = map[string]string{labelGeneration: strconv.FormatUint(c.newGeneration, 10)}
		for key, v := range c.meta.Labels {
			if key != labelGeneration {
				labels[key] = v
			}
		}
		c.newGeneration = 0
		if k.retain {
			r.RetainSeq++
			if err := putJSON(tx, retainKey(r.PID, r.RetainSeq), retained{Kind: evidenceKindReset}); err != nil {
				return err
			}
		}
	}
	// encode kept the payload's running digest, so the store need not hash
	// the whole context again; the body's bytes never change, and the next
	// commit may append past them, so the closing bytes are kept apart.
	sum, err := c.payloadDigest()
	if err != nil {
		return fmt.Errorf("encode context of pid %d: %w", r.PID, err)
	}
	meta, err := tx.Write(c.meta.OID, c.meta.Version, objects.WriteSpec{Payload: body, PayloadTail: contextPayloadEnd, Labels: labels, PayloadSHA256: hex.EncodeToString(sum[:]), Handoff: true})
	if err != nil {
		return fmt.Errorf("write context of pid %d: %w", r.PID, err)
	}
	c.meta = meta
	if k.retain {
		if err := retainEntries(tx, r, c, fresh); err != nil {
			return err
		}
	}
	snapshot := c.share()
	c.owned = false // the cache now shares the array
	pid, ended, waiting := r.PID, r.State.Terminal(), r.waitsLong()
	// Under the write lock, before the next commit starts: a commit made on
	// another worker (a hand-off that resumes this process) finds this
	// version, not the one before. A cached context is checked against the
	// committed version at every load, so caching it before the sync is safe.
	tx.OnApplied(func() {
		if ended || waiting {
			// An ended process makes no more calls, and a waiting one may wait
			// for a long time: its decoded context leaves the cache, so
			// memory follows the processes that run.
			k.dropCachedContext(pid)
			return
		}
		k.cacheContext(pid, snapshot)
	})
	return nil
}

// retainEntries writes the entries of c not yet retained as evidence. fresh
// are the encodings of the last of them, as encode made them: an entry's
// evidence holds the same bytes, so it is not encoded twice.
func retainEntries(tx *txn, r *procRecord, c *llmContext, fresh [][]byte) error {
	for r.RetainedEntries < len(c.entries) {
		r.RetainSeq++
		key := retainKey(r.PID, r.RetainSeq)
		var err error
		if j := r.RetainedEntries - (len(c.entries) - len(fresh)); j >= 0 {
			// The encoding of retained{Kind: evidenceKindEntry, Entry: e},
			// made with the entry's before the transaction when it was.
			evidence := c.ahead.evidenceOf(fresh[j])
			if evidence == nil {
				evidence = slices.Concat([]byte(evidenceEntryStart), fresh[j], []byte("}"))
			}
			err = tx.SetHandoff(key, evidence)
		} else {
			err = putJSON(tx, key, retained{Kind: evidenceKindEntry, Entry: &c.entries[r.RetainedEntries]})
		}
		if err != nil {
			return err
		}
		r.RetainedEntries++
	}
	return nil
}

// forgetContext drops pid's context from the cache once tx commits.
func (k *Runtime) forgetContext(tx *txn, pid int64) {
	tx.AfterCommit(func() { k.dropCachedContext(pid) })
}

// cachedContext returns the context the cache holds for pid, if any; it is
// shared and never modified.
func (k *Runtime) cachedContext(pid int64) *llmContext {
	k.ctxMu.Lock()
	defer k.ctxMu.Unlock()
	return k.ctxCache[pid]
}

// cacheContext keeps c as pid's context unless the cache holds a newer
// version: commits may finish out of order.
func (k *Runtime) cacheContext(pid int64, c *llmContext) {
	k.ctxMu.Lock()
	if old := k.ctxCache[pid]; old == nil || old.meta.Version < c.meta.Version {
		k.ctxCache[pid] = c
	}
	k.ctxMu.Unlock()
}

// dropCachedContext lets pid's decoded context go (the Object keeps it).
func (k *Runtime) dropCachedContext(pid int64) {
	k.ctxMu.Lock()
	delete(k.ctxCache, pid)
	k.ctxMu.Unlock()
}

// retained is one durable full-I/O evidence item.
type retained struct {
	Kind  string `json:"kind"`
	Entry *Entry `json:"entry,omitempty"`
	// Header and goal items hold a goal text and the goal Object version it
	// is (the header: the initial goal, version 1).
	System      string `json:"system,omitempty"`
	Goal        string `json:"goal,omitempty"`
	GoalVersion uint64 `json:"goal_version,omitempty"`
}

// materialize builds the provider request messages of a process from its
// system prompt, goal and context entries.
func materialize(system, goal string, entries []Entry) []llm.Message {
	msgs := make([]llm.Message, 0, len(entries)+2)
	msgs = append(msgs, llm.Message{Role: llm.RoleSystem, Content: system}, llm.Message{Role: llm.RoleUser, Content: goal})
	for i := range entries {
		e := &entries[i]
		msgs = append(msgs, llm.Message{Role: e.Role, Content: e.Content, ToolCalls: e.ToolCalls, ToolCallID: e.ToolCallID, Name: e.Name})
	}
	return msgs
}

// systemPrompt is the image's prompt and the lines that name the process
// and its context Object. It is built at every call, so in one allocation.
func (k *Runtime) systemPrompt(r *procRecord, c *llmContext, imagePrompt string, contextObject bool) string {
	prompt := strings.TrimSpace(imagePrompt)
	var b strings.Builder
	b.Grow(len(prompt) + len(r.Image) + len(r.Namespace) + len(r.GoalOID) + len(c.meta.OID) + len(contextHeading) + 192)
	var num [20]byte
	b.WriteString(prompt)
	b.WriteString("\n\nProcess: pid ")
	b.Write(strconv.AppendInt(num[:0], r.PID, 10))
	b.WriteString(", image ")
	b.WriteString(r.Image)
	b.WriteString(", namespace ")
	b.WriteString(r.Namespace)
	b.WriteString(", goal object ")
	b.WriteString(r.GoalOID)
	b.WriteByte('.')
	if contextObject {
		b.WriteString("\n\n")
		b.WriteString(contextHeading)
		b.WriteString(" oid=")
		b.WriteString(c.meta.OID)
		b.WriteString(" version=")
		b.Write(strconv.AppendUint(num[:0], c.meta.Version, 10))
		b.WriteString(" generation=")
		b.Write(strconv.AppendUint(num[:0], c.generation(), 10))
		b.WriteString(" estimated_tokens=")
		b.Write(strconv.AppendInt(num[:0], int64(c.tokens), 10))
	}
	return b.String()
}
