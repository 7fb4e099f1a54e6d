package tools_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/tools"
)

// The store's refusal of a field is the caller's arguments at fault: the
// model sees invalid_arguments with the store's message, not failed.
func TestStoreRefusalsAreInvalidArguments(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("objects: create: %w: name: must be at most 256 bytes, got 400", objects.ErrInvalid),
		fmt.Errorf("objects: create: %w: namespace: must not contain NUL bytes", objects.ErrInvalid),
	} {
		if e := tools.AsError(err); e.Code != tools.CodeInvalidArguments || e.Message != err.Error() || !errors.Is(e, objects.ErrInvalid) {
			t.Errorf("%v: %+v", err, e)
		}
	}
}

// Hide keeps a refusal an ask grant made, so the kernel holds the call;
// any other refusal becomes the hidden denial of a missing target.
func TestHideKeepsApprovalRequired(t *testing.T) {
	ask := fmt.Errorf("%w: write on object_namespace:proc-2 (grant g asks)", tools.ErrApprovalRequired)
	if got := tools.Hide(ask, authority.ObjectWrite, "object:x"); got != ask {
		t.Fatalf("ask: %v", got)
	}
	deny := fmt.Errorf("%w: write on object:x: denied by grant d", tools.ErrDenied)
	if got := tools.Hide(deny, authority.ObjectWrite, "object:x"); got.Error() != tools.HiddenDenial(authority.ObjectWrite, "object:x").Error() {
		t.Fatalf("deny: %v", got)
	}
}
