package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/libos/libos/skills/skillpkg"
)

// TestRunxFixtureGate runs runx's skill-author-runtime fixture gate
// (testdata/runx/fixtures/skill-author-runtime/cases.json with its
// probe.mjs) through a cli-tool runner written as a runx author would, and
// compares what runx's gate compares, field by field: status, stdout JSON,
// stdout bytes and stderr.
func TestRunxFixtureGate(t *testing.T) {
	gate := filepath.Join("..", "..", "testdata", "runx", "fixtures", "skill-author-runtime")
	raw, err := os.ReadFile(filepath.Join(gate, "cases.json"))
	if err != nil {
		t.Fatalf("the runx sample is missing: %v", err)
	}
	var suite struct {
		Probe string `json:"probe"`
		Cases []struct {
			ID              string          `json:"id"`
			Mode            string          `json:"mode"`
			Cwd             string          `json:"cwd"`
			InputMode       string          `json:"input_mode"`
			LargeInputBytes int             `json:"large_input_bytes"`
			TimeoutSeconds  int             `json:"timeout_seconds"`
			Inputs          json.RawMessage `json:"inputs"`
			Expected        struct {
				Status         string          `json:"status"`
				StdoutBytes    *int64          `json:"stdout_bytes"`
				StdoutJSON     json.RawMessage `json:"stdout_json"`
				StderrContains string          `json:"stderr_contains"`
			} `json:"expected"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &suite); err != nil {
		t.Fatal(err)
	}
	probe, err := filepath.Abs(filepath.Join(gate, suite.Probe))
	if err != nil {
		t.Fatal(err)
	}
	if len(suite.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range suite.Cases {
		t.Run(c.ID, func(t *testing.T) {
			// runx's layout: the package folder "skill" and the workspace
			// "skill-author-runtime" (RUNX_CWD) holding it.
			ws := filepath.Join(t.TempDir(), "skill-author-runtime")
			dir := filepath.Join(ws, "skill")
			for _, d := range []string{dir, filepath.Join(ws, "workspace-target")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			manifest := fmt.Sprintf("skill: gate\nrunners:\n  probe:\n    default: true\n    type: cli-tool\n    command: node\n    args: [%q, %q]\n    timeout_seconds: %d\n", probe, c.Mode, c.TimeoutSeconds)
			if c.Cwd != "" {
				manifest += fmt.Sprintf("    cwd: %q\n", c.Cwd)
			}
			if c.InputMode != "" {
				manifest += fmt.Sprintf("    input_mode: %s\n", c.InputMode)
			}
			writeGateFile(t, filepath.Join(dir, "SKILL.md"), "---\nname: gate\n---\nrunx's fixture gate.\n")
			writeGateFile(t, filepath.Join(dir, "X.yaml"), manifest)
			inputs := map[string]any{}
			if err := json.Unmarshal(c.Inputs, &inputs); err != nil {
				t.Fatal(err)
			}
			if c.LargeInputBytes > 0 {
				inputs["large"] = strings.Repeat("x", c.LargeInputBytes)
			}
			in, _ := json.Marshal(inputs)
			pkg, err := skillpkg.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			env := Run(context.Background(), pkg, "", in, RunOptions{Workspace: ws, LookupEnv: func(name string) (string, bool) {
				if name == "PATH" {
					return os.LookupEnv(name)
				}
				return "", false
			}})
			if string(env.Status) != c.Expected.Status {
				t.Fatalf("status %s, want %s: %+v", env.Status, c.Expected.Status, env.Error)
			}
			if c.Expected.StderrContains != "" {
				if env.Stderr == nil || !strings.Contains(*env.Stderr, c.Expected.StderrContains) {
					t.Fatalf("stderr %v lacks %q", env.Stderr, c.Expected.StderrContains)
				}
			} else if env.Stderr == nil || *env.Stderr != "" {
				t.Fatalf("stderr %v, want empty", env.Stderr)
			}
			if c.Expected.StdoutJSON != nil {
				var got, want map[string]any
				if err := json.Unmarshal(env.Output, &got); err != nil {
					t.Fatalf("output %s: %v", env.Output, err)
				}
				if err := json.Unmarshal(c.Expected.StdoutJSON, &want); err != nil {
					t.Fatal(err)
				}
				for k, w := range want {
					if !reflect.DeepEqual(got[k], w) {
						t.Errorf("stdout_json.%s = %v, want %v", k, got[k], w)
					}
				}
				if len(got) != len(want) {
					t.Errorf("stdout_json = %v, want %v", got, want)
				}
			}
			if c.Expected.StdoutBytes != nil && (env.StdoutBytes == nil || *env.StdoutBytes != *c.Expected.StdoutBytes) {
				t.Fatalf("stdout_bytes %v, want %d", env.StdoutBytes, *c.Expected.StdoutBytes)
			}
		})
	}
}

func writeGateFile(t *testing.T, p, body string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRetry retries a failed run up to retry.max_attempts, and never a
// mutating runner without an idempotency key (runx's rule), reporting the
// attempts in the envelope's metadata.
func TestRetry(t *testing.T) {
	for _, tc := range []struct {
		name, governance string
		status           Status
		attempts         string
	}{
		{"read-only retry", "retry: {max_attempts: 3, backoff_ms: 1}", StatusSealed, `"attempts":2`},
		{"mutating without idempotency", "retry: {max_attempts: 3}\n    risk: {mutating: true}", StatusFailure, `"denied":"retry of 3 attempts denied`},
		{"mutating with idempotency", "retry: {max_attempts: 3}\n    risk: {mutating: true}\n    idempotency: {key: k}", StatusSealed, `"attempts":2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			dir := t.TempDir()
			writeGateFile(t, filepath.Join(dir, "SKILL.md"), "---\nname: flaky\n---\n")
			// Fails on its first run in a workspace, succeeds afterwards.
			writeGateFile(t, filepath.Join(dir, "X.yaml"), "skill: flaky\nversion: \"1.0.0\"\nrunners:\n  once:\n    type: cli-tool\n    command: sh\n    args: [\"-c\", \"if [ -e \\\"$RUNX_CWD/ran\\\" ]; then echo ok; else touch \\\"$RUNX_CWD/ran\\\"; exit 1; fi\"]\n    "+tc.governance+"\n")
			pkg, err := skillpkg.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			env := Run(context.Background(), pkg, "", nil, RunOptions{Workspace: ws})
			meta, _ := json.Marshal(env.Metadata)
			if env.Status != tc.status || !strings.Contains(string(meta), tc.attempts) || !strings.Contains(string(meta), `"version":"1.0.0"`) {
				t.Fatalf("status %s, metadata %s, error %+v", env.Status, meta, env.Error)
			}
		})
	}
}
