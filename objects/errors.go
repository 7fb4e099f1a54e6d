package objects

import "errors"

// Sentinel errors. Returned errors wrap them with context; callers tell them
// apart with errors.Is.
var (
	// ErrNotFound reports that an object or raw key does not exist.
	ErrNotFound = errors.New("objects: not found")
	// ErrConflict reports a compare-and-swap mismatch: the expected version is
	// not the current one. Nothing was changed.
	ErrConflict = errors.New("objects: version conflict")
	// ErrPayloadLost reports that a runtime-local payload was written by an
	// earlier runtime instance and is no longer available after reopen.
	ErrPayloadLost = errors.New("objects: payload not available after reopen")
	// ErrNameTaken reports that the (namespace, name) pair is already used by
	// another object.
	ErrNameTaken = errors.New("objects: name already taken")
	// ErrExists reports that an object with the requested OID already exists.
	ErrExists = errors.New("objects: object already exists")
	// ErrInUse reports that the runtime directory is held by another runtime,
	// in this process or another one.
	ErrInUse = errors.New("objects: directory is in use by another runtime")
	// ErrClosed reports an operation on a closed store.
	ErrClosed = errors.New("objects: store closed")
	// ErrFailed reports that the store hit a write or sync error and refuses
	// further writes. The error that carries it also wraps the cause. Reads
	// (View, Events) return it too once they could observe state that never
	// became durable; Close still releases the directory.
	ErrFailed = errors.New("objects: store failed")
	// ErrInvalid reports bad input; the message names the field and the rule.
	ErrInvalid = errors.New("objects: invalid argument")
	// ErrReservedKey reports a raw key inside a prefix this package reserves
	// for itself (object, event and sequence records).
	ErrReservedKey = errors.New("objects: reserved key")
	// ErrReadOnly reports a write staged in a View transaction, or an Update
	// on a store opened with Options.ReadOnly.
	ErrReadOnly = errors.New("objects: read-only transaction")
	// ErrCorrupt reports that a file of the store holds data that fails its
	// checksum, or that acknowledged commits were lost from the write-ahead
	// log. The error that carries it names the file and says how to proceed;
	// the store refuses to open (or, found later, refuses further writes)
	// rather than carry on from a state that silently lost work.
	ErrCorrupt = errors.New("objects: store is corrupt")
	// ErrDiskFull reports that a write failed because the disk (or the
	// user's quota) is full. The store fails at once instead of retrying;
	// what was acknowledged before stays durable.
	ErrDiskFull = errors.New("objects: disk is full")
	// ErrTxnDone reports use of a transaction after its function returned.
	ErrTxnDone = errors.New("objects: transaction already finished")
	// ErrStopScan may be returned by a Scan or ScanRange callback to stop the
	// scan early; the scan then returns nil.
	ErrStopScan = errors.New("objects: stop scan")
)
