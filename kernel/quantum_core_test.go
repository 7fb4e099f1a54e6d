package kernel

import (
	"testing"

	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/quantum"
)

// The core tells an interrupt by its kind without importing the mailbox.
func TestQuantumInterruptKindIsTheMailbox(t *testing.T) {
	if quantum.KindInterrupt != mailbox.KindInterrupt {
		t.Fatalf("quantum.KindInterrupt %q, mailbox.KindInterrupt %q", quantum.KindInterrupt, mailbox.KindInterrupt)
	}
}
