package ckpt

import (
	"strings"
	"testing"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/toolstest"
)

// restoreSys is a fake whose RestoreCheckpoint records that it ran.
type restoreSys struct {
	*toolstest.Syscalls
	restored []string
}

func (s *restoreSys) RestoreCheckpoint(id string) (any, error) {
	s.restored = append(s.restored, id)
	return map[string]any{"checkpoint_id": id}, nil
}

func restore(t *testing.T, sys tools.Syscalls, id string) (map[string]any, *tools.Error) {
	t.Helper()
	out, e := toolstest.Call(Tools(tools.Config{}), sys, "checkpoint_restore", `{"checkpoint_id":"`+id+`"}`)
	return out.Result, e
}

// Without rights, an existing checkpoint and a missing one answer alike:
// neither its existence nor its owner leaks.
func TestCheckpointExistenceStaysHidden(t *testing.T) {
	sys := &restoreSys{Syscalls: toolstest.New(2)}
	sys.CheckpointRoots = map[string]int64{"cp-1": 1}
	_, e1 := restore(t, sys, "cp-1")
	_, e2 := restore(t, sys, "cp-999")
	if e1 == nil || e2 == nil || e1.Code != tools.CodeDenied || e2.Code != tools.CodeDenied {
		t.Fatalf("want two denials: %v / %v", e1, e2)
	}
	if strings.Replace(e1.Message, "cp-1", "ID", 1) != strings.Replace(e2.Message, "cp-999", "ID", 1) || strings.Contains(e1.Message, "process:1") {
		t.Fatalf("answers differ or name the owner:\n %s\n %s", e1.Message, e2.Message)
	}
	if len(sys.restored) != 0 {
		t.Fatal("a denied restore ran")
	}

	// With admin on the owner's subtree the restore runs; a missing id
	// still reads as the same denial, since its owner cannot be known.
	sys.Grants = []capabilities.Grant{{Resource: "checkpoint:process:1", Rights: []capabilities.Right{capabilities.Admin}}}
	if _, e := restore(t, sys, "cp-1"); e != nil || len(sys.restored) != 1 {
		t.Fatalf("authorized restore: %v", e)
	}
	if _, e := restore(t, sys, "cp-999"); e == nil || e.Code != tools.CodeDenied {
		t.Fatalf("missing checkpoint with rights elsewhere: %v", e)
	}
}
