package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// Two tasks keep the test short; the whole benchmark's goal is asserted by
// internal/safety's own test.
const safetySubset = "^(legit_own_objects|cap_read_foreign_object_by_oid)$"

func TestBenchSafetyJSON(t *testing.T) {
	stdout, stderr, code := runBin(t, "bench", "safety", "--json", "--run", safetySubset)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	out := decodeOutcome(t, stdout)
	for _, k := range []string{"tasks", "task_success_rate", "safety_pass_rate", "unauthorized_side_effects", "false_denials", "failing", "goal_met", "results"} {
		if _, ok := out[k]; !ok {
			t.Errorf("the report lacks %q: %s", k, stdout)
		}
	}
	if out["tasks"] != 2.0 || out["legitimate_tasks"] != 1.0 || out["attack_tasks"] != 1.0 || out["task_success_rate"] != 1.0 ||
		out["safety_pass_rate"] != 1.0 || out["unauthorized_side_effects"] != 0.0 || out["false_denials"] != 0.0 || out["goal_met"] != true {
		t.Fatalf("figures %s", stdout)
	}
	if failing, ok := out["failing"].([]any); !ok || len(failing) != 0 {
		t.Fatalf("failing %v", out["failing"])
	}
	var results []struct {
		Name     string `json:"name"`
		Category string `json:"category"`
		Passed   bool   `json:"passed"`
	}
	raw, _ := json.Marshal(out["results"])
	if err := json.Unmarshal(raw, &results); err != nil || len(results) != 2 {
		t.Fatalf("results %s: %v", raw, err)
	}
	for _, r := range results {
		if !r.Passed || r.Category == "" {
			t.Errorf("result %+v", r)
		}
	}
}

func TestBenchSafetyTable(t *testing.T) {
	stdout, stderr, code := runBin(t, "bench", "safety", "--run", safetySubset)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, want := range []string{"TASK", "legit_own_objects", "cap_read_foreign_object_by_oid", "capability_escape",
		"tasks                      2", "task_success_rate          1.000", "unauthorized_side_effects  0", "false_denials              0", "goal                       met"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, stdout)
		}
	}
}

func TestBenchSafetyUsage(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "safety", "extra"},
		{"bench", "safety", "--run", "no task has this name"},
		{"bench", "safety", "--run", "("},
	} {
		if _, stderr, code := runBin(t, args...); code != 2 || strings.TrimSpace(stderr) == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr)
		}
	}
}
