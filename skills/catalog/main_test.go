package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/skills/catalog"
	"github.com/libos/libos/skills/runner/jsrunner"
	"github.com/libos/libos/tools"
)

func TestMain(m *testing.M) {
	// The javascript pool re-executes this test binary as its worker.
	jsrunner.MaybeRunWorker()
	os.Exit(m.Run())
}

// agentSkills is the folder of the agent-process skill fixtures.
func agentSkills(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "testdata", "skills", "agent"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// testOptions run skills in a private workspace with a small javascript pool.
func testOptions(t testing.TB) catalog.CatalogOptions {
	return catalog.CatalogOptions{
		Workspace:  t.TempDir(),
		JavaScript: jsrunner.PoolOptions{Workers: 1, MemoryLimit: 128 << 20},
	}
}

// loadAgent loads the fixtures and closes the catalog after the test.
func loadAgent(t testing.TB) *catalog.Catalog {
	t.Helper()
	c, err := catalog.LoadCatalog([]string{agentSkills(t)}, testOptions(t))
	if err != nil {
		t.Fatalf("LoadCatalog: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func toolByName(t testing.TB, ts []*tools.Tool, name string) *tools.Tool {
	t.Helper()
	for _, tl := range ts {
		if tl.Name == name {
			return tl
		}
	}
	t.Fatalf("no tool %q", name)
	return nil
}

// call validates raw against the tool's schema, as the broker does, and
// invokes the tool.
func call(t testing.TB, tl *tools.Tool, sys tools.Syscalls, raw string) (tools.Outcome, error) {
	t.Helper()
	args, err := tl.Schema.Normalize(json.RawMessage(raw))
	if err != nil {
		return tools.Outcome{}, err
	}
	return tl.Invoke(context.Background(), sys, args)
}

// wantToolError fails unless err is a tool error with code whose message
// contains each of parts.
func wantToolError(t testing.TB, err error, code string, parts ...string) *tools.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("call succeeded, want %s", code)
	}
	te := tools.AsError(err)
	if te.Code != code {
		t.Fatalf("error code %s (%v), want %s", te.Code, err, code)
	}
	for _, p := range parts {
		if !strings.Contains(te.Message, p) {
			t.Fatalf("error %q does not mention %q", te.Message, p)
		}
	}
	return te
}

// fakeSys is the part of the syscall surface skill tools use; any other
// call panics through the nil embedded interface.
type fakeSys struct {
	tools.Syscalls

	grants     map[string]bool // "right resource"
	authorized []string
	skills     []tools.SkillInfo
	active     []string
	spawned    []tools.ChildSpec
	spawnErr   error
	child      tools.ChildStatus
	objects    map[string][]byte
}

// Require decides each requirement of op from the authority table against
// grants, by its most specific name. Skill tools may require only what the
// table lists for runner and agent-task tools.
func (f *fakeSys) Require(op authority.Op, p authority.Params) error {
	if !slices.Contains(authority.RunnerOps, op) && !slices.Contains(authority.AgentTaskOps, op) {
		return fmt.Errorf("a skill tool requires %s, which the authority table does not list for skill tools", op)
	}
	reqs, err := authority.Requirements(op, p)
	if err != nil {
		return err
	}
	for _, q := range reqs {
		key := string(q.Right) + " " + q.Names[0]
		f.authorized = append(f.authorized, key)
		if !f.grants[key] {
			return fmt.Errorf("%w: no grant allows %s on %s", tools.ErrDenied, q.Right, q.Names[0])
		}
	}
	return nil
}

// Holding answers an unlimited allow grant for what grants allows.
func (f *fakeSys) Holding(op authority.Op, p authority.Params) (capabilities.Grant, bool) {
	reqs, err := authority.Requirements(op, p)
	if err != nil || len(reqs) == 0 || !f.grants[string(reqs[0].Right)+" "+reqs[0].Names[0]] {
		return capabilities.Grant{}, false
	}
	return capabilities.Grant{ID: "fake", Resource: reqs[0].Names[0], Rights: []capabilities.Right{reqs[0].Right}, Effect: capabilities.Allow}, true
}

// Now is a fixed time: deadlines in these tests are read, never reached.
func (f *fakeSys) Now() time.Time { return time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC) }

func (f *fakeSys) DiscoverSkills() []tools.SkillInfo { return f.skills }

func (f *fakeSys) ActiveSkills() []string { return slices.Clone(f.active) }

func (f *fakeSys) ActivateSkill(name string) (tools.SkillInfo, error) {
	for _, s := range f.skills {
		if s.Name == name {
			if !slices.Contains(f.active, name) {
				f.active = append(f.active, name)
			}
			return s, nil
		}
	}
	return tools.SkillInfo{}, tools.Errorf(tools.CodeNotFound, "name: no skill %q", name)
}

func (f *fakeSys) UnloadSkill(name string) error {
	i := slices.Index(f.active, name)
	if i < 0 {
		return tools.Errorf(tools.CodeNotFound, "name: skill %q is not active", name)
	}
	f.active = slices.Delete(f.active, i, i+1)
	return nil
}

func (f *fakeSys) SpawnChild(spec tools.ChildSpec) (tools.ChildStatus, error) {
	if f.spawnErr != nil {
		return tools.ChildStatus{}, f.spawnErr
	}
	f.spawned = append(f.spawned, spec)
	return tools.ChildStatus{PID: 7, Image: spec.Image, Status: "runnable"}, nil
}

func (f *fakeSys) Child(pid int64) (tools.ChildStatus, error) {
	if pid != f.child.PID {
		return tools.ChildStatus{}, tools.Errorf(tools.CodeDenied, "pid %d: not a direct child", pid)
	}
	return f.child, nil
}

func (f *fakeSys) ReadObject(oid string) (objects.Meta, []byte, error) {
	p, ok := f.objects[oid]
	if !ok {
		return objects.Meta{}, nil, fmt.Errorf("object %s: %w", oid, objects.ErrNotFound)
	}
	return objects.Meta{OID: oid, PayloadBytes: len(p)}, p, nil
}
