package tools_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/toolstest"
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

// StatAuthorized answers a found Object the caller may not reach exactly as
// a missing OID for that caller: with read on object:* and a deny on the
// namespace that holds it, both are not_found, with one message but for
// the OID given.
func TestStatAuthorizedAnswersForbiddenAsMissing(t *testing.T) {
	sys := toolstest.New(2,
		capabilities.Grant{Resource: "object:*", Rights: []capabilities.Right{capabilities.Read}},
		capabilities.Grant{Resource: "object_namespace:shared", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Deny})
	secret := sys.Put("shared", "secret", []byte(`1`))
	const missing = "00000000-0000-4000-8000-000000000000"
	_, err1 := tools.StatAuthorized(sys, authority.ObjectRead, secret.OID)
	_, err2 := tools.StatAuthorized(sys, authority.ObjectRead, missing)
	if !errors.Is(err1, objects.ErrNotFound) || !errors.Is(err2, objects.ErrNotFound) ||
		strings.ReplaceAll(err1.Error(), secret.OID, "ID") != strings.ReplaceAll(err2.Error(), missing, "ID") || strings.Contains(err1.Error(), "shared") {
		t.Fatalf("secret: %v\nmissing: %v\nwant one not_found", err1, err2)
	}
	// Without read on object:*, both are the hidden denial.
	sys.Grants = sys.Grants[1:]
	_, err1 = tools.StatAuthorized(sys, authority.ObjectRead, secret.OID)
	_, err2 = tools.StatAuthorized(sys, authority.ObjectRead, missing)
	if !errors.Is(err1, tools.ErrDenied) || strings.ReplaceAll(err1.Error(), secret.OID, "ID") != strings.ReplaceAll(err2.Error(), missing, "ID") {
		t.Fatalf("secret: %v\nmissing: %v\nwant one hidden denial", err1, err2)
	}
}
