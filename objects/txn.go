package objects

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Txn is a transaction passed to Update or View. Reads see the
// transaction's own staged writes (read-your-writes); staged writes live in
// an in-memory overlay until the Update commits them as one batch.
//
// A Txn belongs to the goroutine running the Update/View function and is
// valid only until that function returns. It is not safe for concurrent use.
type Txn struct {
	s        *Store
	reader   pebble.Reader
	readOnly bool
	finished bool

	writes map[string]*stagedValue // raw key -> staged value or tombstone
	// staged holds the values writes points to, a block at a time
	// (newStaged); a block is never grown in place, so none moves.
	staged []stagedValue
	locals map[string]*localChange // oid -> staged runtime-local payload change
	events []Event
	hooks  []func()
	// applied run under the write lock once the batch is applied.
	applied []func()

	// undo records, per staged change, what it replaced, so RollbackTo can
	// restore the overlay exactly.
	undo []undoEntry
	// keysHint sizes the staged writes' map, undo log and blocks: the
	// store's estimate of the keys an Update stages (Store.stagedHint).
	keysHint int
	// savepoints holds the ids of savepoints that are still valid, ascending.
	savepoints    []uint64
	nextSavepoint uint64

	// syncLater is set by SyncLater.
	syncLater bool
	// readFailedBatch is set when a read found, in a batch not yet applied,
	// a value whose encoding failed (SetFunc): that batch fails the store
	// in its turn, and this Update fails with it, whatever its function
	// made of the read's error.
	readFailedBatch bool
}

// storedRead is one key as the database held it when the transaction read it.
type storedRead struct {
	value []byte
	found bool
	// turn is the Update whose read put it in the read cache.
	turn uint64
}

type stagedValue struct {
	value   []byte
	deleted bool
	// meta is the decoded form of a staged object metadata value, kept so
	// that neither a later read in this transaction nor the metadata cache
	// decodes it again under the write lock. Never modified.
	meta *storedMeta
	// encode, when set, writes value the first time it is read (bytes):
	// when the batch is built, out of the write lock, unless a read in the
	// transaction or a later Update's read of the pending batch needs it
	// first (Txn.SetFunc, and object metadata, which is meta). encoded
	// guards it, since the batch's builder and such a read may race.
	encode    valueEncoder
	encoded   sync.Once
	encodeErr error
	// appender is encode for a value staged with SetFunc, held here so
	// that staging it allocates nothing.
	appender valueAppender
}

// valueEncoder writes a staged value encoded late.
type valueEncoder interface {
	encodeValue() ([]byte, error)
}

// A ValueEncoder writes a value staged with Txn.SetFunc: AppendValue
// appends it to dst and returns the result. dst is the store's scratch
// buffer, of which the store keeps an exact copy: AppendValue must not keep
// it. A pointer to a caller's own type is one, so handing it over allocates
// nothing.
type ValueEncoder interface {
	AppendValue(dst []byte) ([]byte, error)
}

// ValueEncoderFunc is a function that is a ValueEncoder.
type ValueEncoderFunc func(dst []byte) ([]byte, error)

// AppendValue calls f.
func (f ValueEncoderFunc) AppendValue(dst []byte) ([]byte, error) { return f(dst) }

// valueAppender is the valueEncoder of Txn.SetFunc: the value is appended
// to a scratch buffer and kept as an exact copy (appendExact).
type valueAppender struct{ ValueEncoder }

func (a *valueAppender) encodeValue() ([]byte, error) { return appendExact(nil, a.AppendValue) }

// bytes returns the staged value, written first if it is encoded late.
func (sv *stagedValue) bytes() ([]byte, error) {
	if sv.encode != nil {
		sv.encoded.Do(sv.runEncode)
	}
	return sv.value, sv.encodeErr
}

// runEncode writes value with encode; a panic of encode is its error.
func (sv *stagedValue) runEncode() {
	defer func() {
		if r := recover(); r != nil {
			sv.value, sv.encodeErr = nil, fmt.Errorf("encode a value: panic: %v", r)
		}
	}()
	v, err := sv.encode.encodeValue()
	if err != nil {
		sv.encodeErr = fmt.Errorf("encode a value: %w", err)
		return
	}
	sv.value = v
}

type undoEntry struct {
	local bool // entry refers to locals[key] rather than writes[key]
	key   string
	// prevValue/prevLocal is what the map held before; nil means absent.
	prevValue *stagedValue
	prevLocal *localChange
}

// Savepoint marks a point in a transaction that RollbackTo can return to.
type Savepoint struct {
	tx      *Txn
	id      uint64
	undo    int
	events  int
	hooks   int
	applied int
}

func newTxn(s *Store, reader pebble.Reader, readOnly bool) *Txn {
	return &Txn{s: s, reader: reader, readOnly: readOnly, keysHint: stagedKeysHint}
}

func (tx *Txn) usable(write bool) error {
	if tx.finished {
		return ErrTxnDone
	}
	if write && tx.readOnly {
		return ErrReadOnly
	}
	return nil
}

func (tx *Txn) empty() bool {
	return len(tx.writes) == 0 && len(tx.events) == 0 && len(tx.locals) == 0
}

// stage records a raw write (value, copied) or delete (value nil, deleted
// true).
func (tx *Txn) stage(key []byte, value []byte, deleted bool) {
	sv := tx.newStaged()
	sv.deleted = deleted
	if !deleted {
		sv.value = append(make([]byte, 0, len(value)), value...)
	}
	tx.stageValue(key, sv)
}

// stagedKeysHint is the first estimate of the keys an Update stages
// (Store.stagedHint): a quantum's commits stage about this many, which a
// map and an undo log grown from empty reach in several allocations.
const stagedKeysHint = 16

// nextStagedHint moves the estimate hint of the keys an Update stages an
// eighth of the way to n, the keys the last one staged, rounding towards
// n, so that it settles on n.
func nextStagedHint(hint, n int) int {
	if n < hint {
		return max((7*hint+n)/8, 1)
	}
	return min((7*hint+n+7)/8, 4*stagedKeysHint)
}

// newStaged returns a zero stagedValue for the transaction to stage: a
// quantum's commit stages a few dozen, which blocks hold in a few
// allocations instead of one each. The first block is small, for the
// transactions that stage one Object or two.
func (tx *Txn) newStaged() *stagedValue {
	if len(tx.staged) == cap(tx.staged) {
		n := max(tx.keysHint, 4)
		if tx.staged == nil {
			n = min(n, 4)
		}
		tx.staged = make([]stagedValue, 0, n)
	}
	tx.staged = tx.staged[:len(tx.staged)+1]
	return &tx.staged[len(tx.staged)-1]
}

// stageBytes stages value, handed over, under key.
func (tx *Txn) stageBytes(key, value []byte) {
	sv := tx.newStaged()
	sv.value = value
	tx.stageValue(key, sv)
}

// stageValue records sv under key; sv.value must not be shared with the
// caller (values the package just built are handed over without a copy).
func (tx *Txn) stageValue(key []byte, sv *stagedValue) {
	if tx.writes == nil {
		tx.writes = make(map[string]*stagedValue, tx.keysHint)
		if tx.undo == nil {
			tx.undo = make([]undoEntry, 0, 2*tx.keysHint)
		}
	}
	k := string(key)
	tx.undo = append(tx.undo, undoEntry{key: k, prevValue: tx.writes[k]})
	tx.writes[k] = sv
}

func (tx *Txn) stageLocal(oid string, c *localChange) {
	if tx.locals == nil {
		tx.locals = make(map[string]*localChange)
	}
	tx.undo = append(tx.undo, undoEntry{local: true, key: oid, prevLocal: tx.locals[oid]})
	tx.locals[oid] = c
}

// get reads key through the overlay. The returned slice is owned by the
// caller.
func (tx *Txn) get(key []byte) ([]byte, bool, error) {
	if sv, ok := tx.writes[string(key)]; ok {
		if sv.deleted {
			return nil, false, nil
		}
		v, err := sv.bytes()
		if err != nil {
			return nil, false, fmt.Errorf("read %q: %w", key, err)
		}
		return append(make([]byte, 0, len(v)), v...), true, nil
	}
	out, ok, err := tx.getStored(key)
	if err != nil {
		return nil, false, tx.s.readErr(err)
	}
	return out, ok, nil
}

// getStored reads key as the transaction sees the database: for an
// Update, the batches not yet applied, then the read cache, then Pebble;
// for a View, its snapshot. Reads are not remembered per transaction: a key
// an Update reads again is found in the read cache, and nothing else
// changes what it reads (it holds the write lock; a View reads a snapshot)
// but a batch not yet applied that fails and is dropped meanwhile, after
// which the Update fails whatever it read (Store.update).
func (tx *Txn) getStored(key []byte) (_ []byte, _ bool, err error) {
	var r storedRead
	var ok bool
	if !tx.readOnly {
		if r, ok, err = tx.pendingRead(key); err != nil {
			return nil, false, err
		}
	}
	if !ok && !tx.readOnly {
		// An Update holds the write lock, so the committed state the
		// store's cache holds is the database's.
		r, ok = tx.s.reads.get(key)
	}
	if !ok {
		if r, err = tx.readStored(key); err != nil {
			return nil, false, err
		}
		if !tx.readOnly {
			tx.s.reads.put(string(key), r)
		}
	}
	if !r.found {
		return nil, false, nil
	}
	return append(make([]byte, 0, len(r.value)), r.value...), true, nil
}

// pendingRead reads key from the newest batch not yet applied that wrote it,
// which Pebble may not have yet (Store.pending). Only an Update reads it.
func (tx *Txn) pendingRead(key []byte) (storedRead, bool, error) {
	sv := tx.pendingStaged(key)
	if sv == nil {
		return storedRead{}, false, nil
	}
	if sv.deleted {
		return storedRead{}, true, nil
	}
	v, err := sv.bytes()
	if err != nil {
		tx.readFailedBatch = true
		return storedRead{}, false, fmt.Errorf("read %q: %w", key, err)
	}
	return storedRead{value: v, found: true}, true, nil
}

// pendingStaged returns what the newest batch not yet applied that wrote
// key staged under it, if any. Only an Update reads it.
func (tx *Txn) pendingStaged(key []byte) *stagedValue {
	var sv *stagedValue
	tx.s.pending.Load().newestFirst(func(p *pendingBatch) bool {
		sv = p.writes[string(key)]
		return sv == nil
	})
	return sv
}

// readStored looks key up in the transaction's reader.
func (tx *Txn) readStored(key []byte) (_ storedRead, err error) {
	defer recoverFatal(&err)
	v, closer, err := tx.reader.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return storedRead{}, nil
	}
	if err != nil {
		return storedRead{}, err
	}
	out := append(make([]byte, 0, len(v)), v...)
	if err := closer.Close(); err != nil {
		return storedRead{}, err
	}
	return storedRead{value: out, found: true}, nil
}

func checkRawKey(key []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: key: must not be empty", ErrInvalid)
	}
	if p := reservedPrefixOf(key); p != "" {
		return fmt.Errorf("%w: key %q: prefix %q belongs to the objects package", ErrReservedKey, key, p)
	}
	return nil
}

// Get returns a copy of the value stored under a raw key, or an error
// wrapping ErrNotFound.
func (tx *Txn) Get(key []byte) ([]byte, error) {
	v, ok, err := tx.Find(key)
	if err == nil && !ok {
		return nil, &keyNotFound{key: string(key)}
	}
	return v, err
}

// Find is Get for a key that may be missing: it returns a copy of the value
// stored under a raw key and whether there is one, a missing key being no
// error.
func (tx *Txn) Find(key []byte) (value []byte, found bool, err error) {
	if err := tx.usable(false); err != nil {
		return nil, false, fmt.Errorf("objects: get: %w", err)
	}
	if err := checkRawKey(key); err != nil {
		return nil, false, fmt.Errorf("objects: get: %w", err)
	}
	v, ok, err := tx.get(key)
	if err != nil {
		return nil, false, fmt.Errorf("objects: get %q: %w", key, err)
	}
	return v, ok, nil
}

// keyNotFound is Get's error for a missing key, formatted only when read:
// many callers expect the miss (a queue never written, a first record).
type keyNotFound struct{ key string }

func (e *keyNotFound) Error() string { return fmt.Sprintf("objects: get %q: %v", e.key, ErrNotFound) }
func (e *keyNotFound) Unwrap() error { return ErrNotFound }

// Set stages value under a raw key. Keys under the reserved prefixes "o/",
// "ev/" and "seq/" are refused with ErrReservedKey. Key and value are copied.
func (tx *Txn) Set(key, value []byte) error {
	return tx.set(key, value, false)
}

// SetHandoff is Set for a value its caller hands over: it is kept as given,
// not copied, and the caller must not change it afterwards.
func (tx *Txn) SetHandoff(key, value []byte) error {
	return tx.set(key, value, true)
}

// SetFunc is Set for a value its caller encodes later: encode writes it
// once (ValueEncoder), when the batch is built, out of the write lock, or
// earlier, if a read needs it first (in this transaction, or in a later
// Update while the batch waits to be applied). encode must depend only on
// data that does not change after the call, and should not fail: if it
// fails or panics, a read of the value returns its error, and the commit
// fails, failing the store, as an event encoder's does (AppendEventFunc).
func (tx *Txn) SetFunc(key []byte, encode ValueEncoder) error {
	if err := tx.canSet(key); err != nil {
		return err
	}
	if f, isFunc := encode.(ValueEncoderFunc); encode == nil || (isFunc && f == nil) {
		return fmt.Errorf("objects: set %q: %w: encode: must not be nil", key, ErrInvalid)
	}
	sv := tx.newStaged()
	sv.encode = &sv.appender
	sv.appender.ValueEncoder = encode
	tx.stageValue(key, sv)
	return nil
}

// canSet refuses a raw write in a transaction that cannot write or to a key
// that is not a raw key.
func (tx *Txn) canSet(key []byte) error {
	if err := tx.usable(true); err != nil {
		return fmt.Errorf("objects: set: %w", err)
	}
	if err := checkRawKey(key); err != nil {
		return fmt.Errorf("objects: set: %w", err)
	}
	return nil
}

func (tx *Txn) set(key, value []byte, handoff bool) error {
	if err := tx.canSet(key); err != nil {
		return err
	}
	if !handoff || value == nil {
		value = append(make([]byte, 0, len(value)), value...)
	}
	tx.stageBytes(key, value)
	return nil
}

// Delete stages the removal of a raw key; deleting an absent key is not an
// error.
func (tx *Txn) Delete(key []byte) error {
	if err := tx.usable(true); err != nil {
		return fmt.Errorf("objects: delete: %w", err)
	}
	if err := checkRawKey(key); err != nil {
		return fmt.Errorf("objects: delete: %w", err)
	}
	tx.stage(key, nil, true)
	return nil
}

// Scan calls fn for every raw key with the given prefix in ascending order,
// merging staged writes. Keys under the reserved prefixes are skipped (and a
// prefix inside one is refused). fn receives copies it may keep; returning
// ErrStopScan stops the scan and Scan returns nil, any other error stops it
// and is returned as is. Writes fn stages are not seen by the running scan.
func (tx *Txn) Scan(prefix []byte, fn func(key, value []byte) error) error {
	if err := tx.usable(false); err != nil {
		return fmt.Errorf("objects: scan: %w", err)
	}
	if fn == nil {
		return fmt.Errorf("objects: scan: %w: fn: must not be nil", ErrInvalid)
	}
	if p := reservedPrefixOf(prefix); p != "" {
		return fmt.Errorf("objects: scan: %w: prefix %q is inside %q, which belongs to the objects package", ErrReservedKey, prefix, p)
	}
	var lower, upper []byte
	if len(prefix) > 0 {
		lower, upper = prefix, prefixEnd(prefix)
	}
	return tx.iterate(lower, upper, false, true, fn)
}

// ScanRange calls fn for every raw key in [start, end) (nil start: from the
// first key; nil end: to the last), ascending or, if reverse, descending,
// merging staged writes. Reserved keys are skipped; start must not lie inside
// a reserved prefix. fn behaves as in Scan.
func (tx *Txn) ScanRange(start, end []byte, reverse bool, fn func(key, value []byte) error) error {
	if err := tx.usable(false); err != nil {
		return fmt.Errorf("objects: scan range: %w", err)
	}
	if fn == nil {
		return fmt.Errorf("objects: scan range: %w: fn: must not be nil", ErrInvalid)
	}
	if p := reservedPrefixOf(start); p != "" {
		return fmt.Errorf("objects: scan range: %w: start %q is inside %q, which belongs to the objects package", ErrReservedKey, start, p)
	}
	if len(start) == 0 {
		start = nil
	}
	if len(end) == 0 {
		end = nil
	}
	if start != nil && end != nil {
		switch c := bytes.Compare(start, end); {
		case c > 0:
			return fmt.Errorf("objects: scan range: %w: end %q: must not be before start %q", ErrInvalid, end, start)
		case c == 0:
			return nil
		}
	}
	return tx.iterate(start, end, reverse, true, fn)
}

type rawKV struct {
	key     []byte
	value   []byte
	deleted bool
}

// stagedRange returns the staged writes in [lower, upper), sorted
// ascending: the transaction's own, and for an Update those of the batches
// being applied, each key as its newest write left it.
func (tx *Txn) stagedRange(lower, upper []byte, skipReserved bool) ([]rawKV, error) {
	var out []rawKV
	var encodeErr error
	var seen map[string]struct{} // keys in range a newer write already gave
	add := func(writes map[string]*stagedValue, more, pending bool) {
		for k, sv := range writes {
			// Out-of-range keys are most of a batch's writes: they are
			// passed over before anything is allocated or remembered.
			if lower != nil && k < string(lower) {
				continue
			}
			if upper != nil && k >= string(upper) {
				continue
			}
			if _, ok := seen[k]; ok {
				continue
			}
			if more {
				if seen == nil {
					seen = make(map[string]struct{})
				}
				seen[k] = struct{}{}
			}
			kb := []byte(k)
			if skipReserved && reservedPrefixOf(kb) != "" {
				continue
			}
			v, err := sv.bytes()
			if err != nil && encodeErr == nil {
				encodeErr = fmt.Errorf("read %q: %w", k, err)
				tx.readFailedBatch = tx.readFailedBatch || pending
			}
			out = append(out, rawKV{key: kb, value: v, deleted: sv.deleted})
		}
	}
	var pending *pendingList
	if !tx.readOnly {
		pending = tx.s.pending.Load()
	}
	add(tx.writes, pending != nil, false)
	if pending != nil {
		n := len(pending.batches)
		pending.newestFirst(func(p *pendingBatch) bool {
			n--
			add(p.writes, n > 0, true)
			return true
		})
	}
	if encodeErr != nil {
		return nil, encodeErr
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].key, out[j].key) < 0 })
	return out, nil
}

// iterate merges the database view and the overlay over [lower, upper).
func (tx *Txn) iterate(lower, upper []byte, reverse, skipReserved bool, fn func(key, value []byte) error) (err error) {
	defer recoverFatal(&err)
	staged, err := tx.stagedRange(lower, upper, skipReserved)
	if err != nil {
		return err
	}
	if reverse {
		for i, j := 0, len(staged)-1; i < j; i, j = i+1, j-1 {
			staged[i], staged[j] = staged[j], staged[i]
		}
	}
	it, err := tx.reader.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("objects: scan: %w", tx.s.readErr(err))
	}
	defer func() {
		if cerr := it.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("objects: scan: %w", tx.s.readErr(cerr))
		}
	}()
	step := it.Next
	valid := false
	if reverse {
		step = it.Prev
		valid = it.Last()
	} else {
		valid = it.First()
	}
	i := 0
	for {
		if valid && skipReserved {
			if p := reservedPrefixOf(it.Key()); p != "" {
				if reverse {
					valid = it.SeekLT([]byte(p))
				} else if end := prefixEnd([]byte(p)); end != nil {
					valid = it.SeekGE(end)
				} else {
					valid = false
				}
				continue
			}
		}
		haveStaged := i < len(staged)
		if !valid && !haveStaged {
			break
		}
		c := 0
		switch {
		case !valid:
			c = 1
		case !haveStaged:
			c = -1
		default:
			c = bytes.Compare(it.Key(), staged[i].key)
			if reverse {
				c = -c
			}
		}
		var key, value []byte
		if c < 0 {
			v, verr := it.ValueAndErr()
			if verr != nil {
				return fmt.Errorf("objects: scan: %w", tx.s.readErr(verr))
			}
			key = append([]byte(nil), it.Key()...)
			value = append(make([]byte, 0, len(v)), v...)
			valid = step()
		} else {
			kv := staged[i]
			i++
			if c == 0 {
				valid = step()
			}
			if kv.deleted {
				continue
			}
			key = append([]byte(nil), kv.key...)
			value = append(make([]byte, 0, len(kv.value)), kv.value...)
		}
		if ferr := fn(key, value); ferr != nil {
			if errors.Is(ferr, ErrStopScan) {
				return nil
			}
			return ferr
		}
	}
	if ierr := it.Error(); ierr != nil {
		return fmt.Errorf("objects: scan: %w", tx.s.readErr(ierr))
	}
	return nil
}

// NextSequence increments the durable counter name and returns the new
// value; the first value is 1. The increment commits with the transaction.
func (tx *Txn) NextSequence(name string) (uint64, error) {
	if err := tx.usable(true); err != nil {
		return 0, fmt.Errorf("objects: next sequence: %w", err)
	}
	if err := checkIdent("name", name); err != nil {
		return 0, fmt.Errorf("objects: next sequence: %w", err)
	}
	key := sequenceKey(name)
	raw, ok, err := tx.get(key)
	if err != nil {
		return 0, fmt.Errorf("objects: next sequence %q: %w", name, err)
	}
	var cur uint64
	if ok {
		if cur, err = decodeUint64(raw); err != nil {
			return 0, fmt.Errorf("objects: next sequence %q: %w", name, err)
		}
	}
	cur++
	tx.stageBytes(key, encodeUint64(cur))
	return cur, nil
}

// AppendEvent stages an event with data marshalled to JSON and returns its
// seq. Seqs are assigned in commit order without gaps: a transaction that
// does not commit consumes none.
func (tx *Txn) AppendEvent(kind string, data any) (uint64, error) {
	if err := tx.canAppendEvent(kind); err != nil {
		return 0, err
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return 0, fmt.Errorf("objects: append event %s: %w: data: must marshal to JSON: %w", kind, ErrInvalid, err)
	}
	return tx.appendEvent(kind, raw), nil
}

// AppendEventFunc is AppendEvent for data its caller encodes, later: encode
// runs when the batch is built, after the write lock is let go, while later
// transactions run. It appends the data to dst and returns the result
// (EventEncoder); it must write valid JSON, as json.Marshal writes it, and read
// only what nobody changes once it is handed over. An error or a panic of encode, or (with
// LIBOS_CHECK_CACHES=1) data that is not valid JSON, fails the commit and
// the store with it, as a failed apply does: later transactions may
// already have read this one's writes.
func (tx *Txn) AppendEventFunc(kind string, encode EventEncoder) (uint64, error) {
	if err := tx.canAppendEvent(kind); err != nil {
		return 0, err
	}
	if f, isFunc := encode.(EventEncoderFunc); encode == nil || (isFunc && f == nil) {
		return 0, fmt.Errorf("objects: append event %s: %w: encode: must not be nil", kind, ErrInvalid)
	}
	seq := tx.appendEvent(kind, nil)
	tx.events[len(tx.events)-1].encode = encode
	return seq, nil
}

// encodeEvents writes the data of object events and runs the encoders of
// the events appended with AppendEventFunc. A panic of one is its error: the
// batch is handed on by then, and the store must fail, not stop with its
// turn held.
func (tx *Txn) encodeEvents() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("encode an event: panic: %v", r)
		}
	}()
	for i := range tx.events {
		e := &tx.events[i]
		if e.object != nil {
			e.Data, e.object = objectEventJSON(e.object), nil
			continue
		}
		if e.encode == nil {
			continue
		}
		// The data is written into the event's stored form, after its
		// header, so that one allocation holds both.
		var room [64]byte
		header := appendEventHeader(room[:0], e)
		stored, err := appendExact(header, e.encode.AppendEvent)
		if err != nil {
			return fmt.Errorf("encode event %d (%s): %w", e.Seq, e.Kind, err)
		}
		if !bytes.HasPrefix(stored, header) {
			return fmt.Errorf("encode event %d (%s): %w: the encoder must append its data to dst, and returned %q", e.Seq, e.Kind, ErrInvalid, stored)
		}
		data := stored[len(header):]
		if tx.s.checkHandoffs && !json.Valid(data) {
			return fmt.Errorf("encode event %d (%s): %w: data: must be valid JSON, got %q", e.Seq, e.Kind, ErrInvalid, data)
		}
		e.Data, e.stored, e.encode = data, stored, nil
	}
	return nil
}

// canAppendEvent refuses an event in a transaction that cannot write or
// of a kind that is not an identifier.
func (tx *Txn) canAppendEvent(kind string) error {
	if err := tx.usable(true); err != nil {
		return fmt.Errorf("objects: append event: %w", err)
	}
	if err := checkIdent("kind", kind); err != nil {
		return fmt.Errorf("objects: append event: %w", err)
	}
	return nil
}

func (tx *Txn) appendEvent(kind string, data json.RawMessage) uint64 {
	seq := tx.s.publishedEventSeq + uint64(len(tx.events)) + 1
	tx.events = append(tx.events, Event{Seq: seq, Time: tx.s.now(), Kind: kind, Data: data})
	return seq
}

// AfterCommit registers fn to run after the transaction's batch is durable,
// outside the write lock, in registration order, each whatever the one
// before it did (a panic goes on up once they all ran). Hooks do not run if the
// transaction function returns an error or the commit fails, nor if a
// RollbackTo undoes the point where they were registered.
func (tx *Txn) AfterCommit(fn func()) {
	if tx.finished {
		panic("objects: AfterCommit called after the transaction finished")
	}
	if fn != nil {
		tx.hooks = append(tx.hooks, fn)
	}
}

// OnApplied registers fn to run once the transaction's writes are handed on
// to be applied, with the store's write lock still held, before
// the next Update starts and before the batch is applied and synced; it is
// for caches of committed state that the next Update must see. fn must be
// fast and must not use the store. It does not run if the transaction
// function returns an error, nothing was staged, or a RollbackTo undoes the
// point where it was registered. If the apply or the sync then fails, the
// store refuses every later Update, and one whose function ran meanwhile
// fails too, so no Update can act on such a cache.
// Only an Update may register it.
func (tx *Txn) OnApplied(fn func()) {
	if tx.finished {
		panic("objects: OnApplied called after the transaction finished")
	}
	if tx.readOnly {
		panic("objects: OnApplied called in a view")
	}
	if fn != nil {
		tx.applied = append(tx.applied, fn)
	}
}

// runHooks runs the hooks in order. One that panics or ends its goroutine
// (runtime.Goexit) does not keep the ones after it from running: they tell
// of a commit that is durable (the kernel's scheduler learns of its work
// through them), so they run before the panic goes on up.
func (tx *Txn) runHooks() {
	next := 0
	defer func() {
		if next < len(tx.hooks) {
			tx.hooks = tx.hooks[next+1:]
			tx.runHooks()
		}
	}()
	for ; next < len(tx.hooks); next++ {
		tx.hooks[next]()
	}
}

// Savepoint marks the current state of the transaction.
func (tx *Txn) Savepoint() Savepoint {
	tx.nextSavepoint++
	tx.savepoints = append(tx.savepoints, tx.nextSavepoint)
	return Savepoint{tx: tx, id: tx.nextSavepoint, undo: len(tx.undo), events: len(tx.events), hooks: len(tx.hooks), applied: len(tx.applied)}
}

// RollbackTo undoes every change staged since sp: raw keys, objects,
// runtime-local payloads, events, sequences, AfterCommit and OnApplied hooks. sp stays
// valid and can be rolled back to again; savepoints taken after sp become
// invalid. Passing an invalid savepoint (from another transaction, or one
// invalidated by an earlier rollback) is a programming error and panics.
func (tx *Txn) RollbackTo(sp Savepoint) {
	if sp.tx != tx {
		panic("objects: RollbackTo with a savepoint of another transaction")
	}
	if tx.finished {
		panic("objects: RollbackTo called after the transaction finished")
	}
	idx := sort.Search(len(tx.savepoints), func(i int) bool { return tx.savepoints[i] >= sp.id })
	if idx == len(tx.savepoints) || tx.savepoints[idx] != sp.id {
		panic("objects: RollbackTo with a savepoint invalidated by an earlier rollback")
	}
	tx.savepoints = tx.savepoints[:idx+1]
	for i := len(tx.undo) - 1; i >= sp.undo; i-- {
		u := tx.undo[i]
		switch {
		case u.local && u.prevLocal == nil:
			delete(tx.locals, u.key)
		case u.local:
			tx.locals[u.key] = u.prevLocal
		case u.prevValue == nil:
			delete(tx.writes, u.key)
		default:
			tx.writes[u.key] = u.prevValue
		}
		tx.undo[i] = undoEntry{}
	}
	tx.undo = tx.undo[:sp.undo]
	tx.events = tx.events[:sp.events]
	tx.hooks = tx.hooks[:sp.hooks]
	tx.applied = tx.applied[:sp.applied]
}

// buildBatch turns the overlay into one Pebble batch.
func (tx *Txn) buildBatch() (*pebble.Batch, error) {
	if err := tx.encodeEvents(); err != nil {
		return nil, fmt.Errorf("build batch: %w", err)
	}
	// Sized up front so that the batch's buffer does not grow (a copy per
	// doubling).
	size := batchHeaderLen
	for k, sv := range tx.writes {
		v, err := sv.bytes()
		if err != nil {
			return nil, fmt.Errorf("build batch: %q: %w", k, err)
		}
		size += len(k) + len(v) + batchRecordOverhead
	}
	for i := range tx.events {
		e := &tx.events[i]
		size += 8 + len(prefixEvents) + len(e.Kind) + len(e.Data) + batchRecordOverhead + 16
	}
	b := tx.s.db.NewBatchWithSize(size)
	for k, sv := range tx.writes {
		var err error
		if sv.deleted {
			err = b.Delete([]byte(k), nil)
		} else {
			v, _ := sv.bytes() // encoded, without error, as the batch was sized
			err = b.Set([]byte(k), v, nil)
		}
		if err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("build batch: %w", err)
		}
	}
	for i := range tx.events {
		e := &tx.events[i]
		if err := b.Set(eventKey(e.Seq), encodeEvent(e), nil); err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("build batch: %w", err)
		}
	}
	return b, nil
}

// batchHeaderLen is the size of a Pebble batch's header (sequence number and
// count).
const batchHeaderLen = 12

// batchRecordOverhead covers a batch record's kind byte and two length
// varints.
const batchRecordOverhead = 1 + 2*binary.MaxVarintLen32

// SyncLater lets the commit's sync wait, for a short while, for the sync of
// a later commit, which makes both durable: a caller that knows another
// commit is on its way and that nothing waits on this one spares the log a
// sync in a row. Update still returns only once the commit is durable.
func (tx *Txn) SyncLater() { tx.syncLater = true }
