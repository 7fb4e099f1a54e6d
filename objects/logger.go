package objects

import (
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
)

// storeLogger passes Pebble's log output to out (nil: silent) and handles
// Fatalf, which Pebble calls when it cannot go on (a failed MANIFEST write,
// a commit pipeline error) and expects never to return: returning would let
// Pebble continue from a state it considers unrecoverable.
//
// On a goroutine that runs a store method, Fatalf panics with a pebbleFatal
// that the method recovers into an error. On one of Pebble's own
// goroutines (a flush, a compaction) nothing could recover a panic and it
// would end the process, so Fatalf parks the goroutine for good instead;
// the store has already failed with the error, and Close leaves Pebble
// alone. Either way the error reaches the store's callers.
type storeLogger struct {
	out   pebble.Logger
	store *Store
}

func (l storeLogger) Infof(format string, args ...any) {
	if l.out != nil {
		l.out.Infof(format, args...)
	}
}

func (l storeLogger) Errorf(format string, args ...any) {
	if l.out != nil {
		l.out.Errorf(format, args...)
	}
}

func (l storeLogger) Fatalf(format string, args ...any) {
	if l.out != nil {
		l.out.Errorf(format, args...)
	}
	err := fatalError(format, args...)
	onStore := onStoreGoroutine()
	if l.store != nil {
		l.store.fatal.CompareAndSwap(nil, &err)
		l.store.fail(err)
		if !onStore && !l.store.parked.Swap(true) {
			close(l.store.parkedCh)
		}
	}
	if onStore {
		panic(pebbleFatal{err: err})
	}
	select {}
}

// fatalError builds the error of a Fatalf call. It wraps the first error
// among the arguments, and ErrDiskFull when that error says the disk is
// full.
func fatalError(format string, args ...any) error {
	e := &fatalErr{msg: "pebble: " + fmt.Sprintf(format, args...)}
	for _, a := range args {
		if cause, ok := a.(error); ok {
			e.causes = append(e.causes, cause)
			break
		}
	}
	if (len(e.causes) > 0 && isDiskFull(e.causes[0])) || strings.Contains(e.msg, syscall.ENOSPC.Error()) {
		e.msg = ErrDiskFull.Error() + ": " + e.msg + " " + diskFullAdvice
		e.causes = append(e.causes, ErrDiskFull)
	}
	return e
}

// fatalErr is the error of a Fatalf call: Pebble's message, which already
// includes the text of its causes.
type fatalErr struct {
	msg    string
	causes []error
}

func (e *fatalErr) Error() string   { return e.msg }
func (e *fatalErr) Unwrap() []error { return e.causes }

// pebbleFatal is the panic value of Fatalf on a store goroutine.
type pebbleFatal struct{ err error }

// recoverFatal, deferred by a store method that calls into Pebble, turns a
// pebbleFatal panic into *errp. Other panics go on.
func recoverFatal(errp *error) {
	r := recover()
	if r == nil {
		return
	}
	f, ok := r.(pebbleFatal)
	if !ok {
		panic(r)
	}
	*errp = f.err
}

// storeFuncPrefix is the prefix of this package's function names.
var storeFuncPrefix = func() string {
	name := runtime.FuncForPC(reflect.ValueOf(Open).Pointer()).Name()
	return name[:strings.LastIndex(name, ".")+1]
}()

// onStoreGoroutine reports whether a store method is on the calling
// goroutine's stack (below the logger itself).
func onStoreGoroutine() bool {
	pcs := make([]uintptr, 1024)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, storeFuncPrefix) && !strings.HasPrefix(f.Function, storeFuncPrefix+"storeLogger") {
			return true
		}
		if !more {
			return false
		}
	}
}
