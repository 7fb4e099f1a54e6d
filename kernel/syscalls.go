package kernel

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
)

// syscalls implements tools.Syscalls for one call of process r, bound to the
// transaction the call's effects commit in.
type syscalls struct {
	k  *Runtime
	tx *objects.Txn
	r  *procRecord
}

var _ tools.Syscalls = (*syscalls)(nil)

func (s *syscalls) Self() tools.Self {
	im, _ := s.k.image(s.r.Image)
	return tools.Self{
		PID: s.r.PID, ParentPID: s.r.ParentPID, Image: s.r.Image, Gated: im != nil && im.Gated(),
		GoalOID: s.r.GoalOID, Namespace: s.r.Namespace,
	}
}

func (s *syscalls) Now() time.Time { return s.k.now() }

func (s *syscalls) Config() tools.Config {
	return tools.Config{MaxSleepSeconds: s.k.opts.MaxSleepSeconds}
}

// Authorize checks the process's grants and, when a one-shot grant is what
// allows the call, consumes one use in the call's transaction: if the call
// later fails before its effect, the kernel rolls the transaction back to
// the call's savepoint and the use is restored with it.
func (s *syscalls) Authorize(right capabilities.Right, names ...string) error {
	d := capabilities.Check(s.r.Grants, right, names...)
	if !d.Allowed {
		return fmt.Errorf("%w: %s", tools.ErrDenied, d.Reason)
	}
	if d.OneShot {
		grants, _, err := capabilities.Reserve(s.r.Grants, d)
		if err != nil {
			return fmt.Errorf("%w: %v", tools.ErrDenied, err)
		}
		s.r.Grants = grants
		return saveProc(s.tx, s.r)
	}
	return nil
}

func (s *syscalls) StatObject(oid string) (objects.Meta, error) { return s.tx.Stat(oid) }

func (s *syscalls) ReadObject(oid string) (objects.Meta, []byte, error) { return s.tx.Read(oid) }

func (s *syscalls) CreateResult(data json.RawMessage) (objects.Meta, error) {
	if !json.Valid(data) {
		return objects.Meta{}, tools.Errorf(tools.CodeInvalidArguments, "result: not valid JSON")
	}
	name := resultName
	if _, err := s.tx.Lookup(s.r.Namespace, name); err == nil {
		name = fmt.Sprintf("%s:%d", resultName, s.k.now().UnixNano())
	}
	return s.tx.Create(objects.CreateSpec{
		Namespace: s.r.Namespace, Name: name, Kind: "result", Owner: fmt.Sprint(s.r.PID), Payload: data,
	})
}

func (s *syscalls) CompletionReview(token string, evidence json.RawMessage) (process.Decision, error) {
	return process.Decision{}, tools.Errorf(tools.CodeFailed, "completion review is not available for image %s", s.r.Image)
}
