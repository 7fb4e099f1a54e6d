package skillpkg

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Harness is runx's harness: block: test cases run by "libos skill test".
type Harness struct {
	// Files are package files the cases need, as runx lists them.
	Files []string
	Cases []HarnessCase
}

// HarnessCase is one case of harness.cases (or of a runx fixture file).
type HarnessCase struct {
	Name string
	// Runner names the runner; "" means the default one.
	Runner string
	// Inputs is the JSON object of inputs ({} when absent).
	Inputs json.RawMessage
	// Env holds variables the case sets for its run.
	Env map[string]string
	// Answers are caller.answers: for an agent-task runner,
	// "agent_task.<skill>.output" holds the output a model would give.
	Answers map[string]json.RawMessage
	Expect  Expectation
	// Line is the case's line in the manifest, for messages.
	Line int
}

// Expectation is a case's expect: block. Receipt and step expectations are
// runx's receipt and graph evidence, which libos does not produce; they are
// kept as metadata and not compared.
type Expectation struct {
	// Status is sealed, failure, needs_agent, policy_denied or escalated;
	// "" means not checked.
	Status string
	// Output holds output.exact and output.subset (nil when absent).
	OutputExact  json.RawMessage
	OutputSubset json.RawMessage
	// StepOutputs is expect.step_outputs (graph runners only).
	StepOutputs json.RawMessage
	// Receipt is expect.receipt as compact JSON, not compared.
	Receipt json.RawMessage
}

var (
	harnessFields       = []string{"files", "cases"}
	harnessCaseFields   = []string{"name", "runner", "inputs", "env", "caller", "expect", "operator_journeys"}
	harnessCallerFields = []string{"answers", "approvals", "http_responses"}
	expectFields        = []string{"status", "receipt", "steps", "output", "step_outputs"}
	expectStatuses      = []string{"sealed", "failure", "needs_agent", "policy_denied", "escalated"}
	// runtimeOwnedEnv are variables a case may not set: the runtime owns them.
	runtimeOwnedEnv = []string{"RUNX_CWD", "RUNX_RECEIPT_DIR"}
)

func (r nodeReader) parseHarness(n *yaml.Node, runners []*Runner) (*Harness, error) {
	entries, err := r.mapping(n, "harness")
	if err != nil {
		return nil, err
	}
	h := &Harness{}
	haveCases := false
	for _, e := range entries {
		f := join("harness", e.key)
		switch e.key {
		case "files":
			h.Files, err = r.strList(e.value, f)
		case "cases":
			haveCases = true
			if err = r.plain(e.value, f); err == nil && e.value.Kind != yaml.SequenceNode {
				err = r.fail(e.value, f, "must be a list of cases, got %s", kindName(e.value))
			}
			if err == nil {
				for i, item := range e.value.Content {
					var c HarnessCase
					if c, err = r.parseCase(item, fmt.Sprintf("%s[%d]", f, i), false); err != nil {
						break
					}
					if c.Runner != "" && !slices.ContainsFunc(runners, func(x *Runner) bool { return x.Name == c.Runner }) {
						err = r.fail(item, fmt.Sprintf("%s[%d].runner", f, i), "names runner %q, which is not declared in runners", c.Runner)
						break
					}
					h.Cases = append(h.Cases, c)
				}
			}
		default:
			err = r.fail(e.keyAt, f, "is not a known field (allowed: %s)", strings.Join(harnessFields, ", "))
		}
		if err != nil {
			return nil, err
		}
	}
	if !haveCases {
		return nil, r.fail(n, "harness.cases", "is required")
	}
	return h, nil
}

// ParseFixture parses one of runx's package fixture files
// (fixtures/<name>.yaml: name, kind, target, runner, inputs, env, caller,
// expect, and metadata runx keeps for its own tooling). It returns the case,
// its kind and target; only kind skill with target ".." (the package
// itself) is a case of the package. Keys runx's fixture schema does not
// know are refused.
func ParseFixture(file string, data []byte) (c HarnessCase, kind, target string, err error) {
	r := nodeReader{file: file}
	if len(data) > MaxManifestBytes {
		return c, "", "", r.fail(nil, "", "must be at most %d bytes", MaxManifestBytes)
	}
	root, err := r.parseDocument(data)
	if err != nil {
		return c, "", "", err
	}
	if root == nil {
		return c, "", "", r.fail(nil, "", "must be a mapping")
	}
	entries, err := r.mapping(root, "")
	if err != nil {
		return c, "", "", err
	}
	for _, e := range entries {
		switch e.key {
		case "kind":
			kind, err = r.nonEmptyStr(e.value, "kind")
		case "target":
			target, err = r.nonEmptyStr(e.value, "target")
		}
		if err != nil {
			return c, "", "", err
		}
	}
	c, err = r.parseCase(root, "", true)
	return c, kind, target, err
}

// fixtureOnlyFields are the keys of a fixture file beyond a harness case's.
var fixtureOnlyFields = []string{"kind", "target", "metadata", "setup", "lane", "agent", "task", "description"}

func (r nodeReader) parseCase(n *yaml.Node, field string, fixture bool) (HarnessCase, error) {
	c := HarnessCase{Inputs: json.RawMessage("{}"), Line: n.Line}
	entries, err := r.mapping(n, field)
	if err != nil {
		return c, err
	}
	haveName, haveExpect := false, false
	for _, e := range entries {
		f := join(field, e.key)
		switch e.key {
		case "name":
			c.Name, err = r.nonEmptyStr(e.value, f)
			haveName = true
		case "runner":
			c.Runner, err = r.nonEmptyStr(e.value, f)
		case "inputs":
			if _, err = r.mapping(e.value, f); err == nil {
				c.Inputs, err = r.jsonValue(e.value, f)
			}
		case "env":
			var m []keyValue
			if m, err = r.mapping(e.value, f); err == nil {
				c.Env = map[string]string{}
				for _, x := range m {
					if slices.Contains(runtimeOwnedEnv, x.key) {
						err = r.fail(x.keyAt, join(f, x.key), "is owned by the harness runtime and cannot be overridden")
						break
					}
					if c.Env[x.key], err = r.str(x.value, join(f, x.key)); err != nil {
						break
					}
				}
			}
		case "caller":
			err = r.parseCaller(e.value, f, &c)
		case "expect":
			haveExpect = true
			c.Expect, err = r.parseExpect(e.value, f)
		case "operator_journeys":
			// runx's selection evidence for agents; not a libos concern.
			_, err = r.jsonValue(e.value, f)
		default:
			if fixture && slices.Contains(fixtureOnlyFields, e.key) {
				_, err = r.jsonValue(e.value, f)
				break
			}
			allowed := harnessCaseFields
			if fixture {
				allowed = append(append([]string(nil), harnessCaseFields...), fixtureOnlyFields...)
			}
			err = r.fail(e.keyAt, f, "is not a known field (allowed: %s)", strings.Join(allowed, ", "))
		}
		if err != nil {
			return c, err
		}
	}
	if !haveName {
		return c, r.fail(n, join(field, "name"), "is required")
	}
	// A fixture file's expect: defaults to checking nothing, as in runx
	// (harness_fixture.rs: #[serde(default)] expect); a harness case in the
	// manifest must state one (skill/fixtures.rs: required_object).
	if !haveExpect && !fixture {
		return c, r.fail(n, join(field, "expect"), "is required")
	}
	return c, nil
}

func (r nodeReader) parseCaller(n *yaml.Node, field string, c *HarnessCase) error {
	entries, err := r.mapping(n, field)
	if err != nil {
		return err
	}
	for _, e := range entries {
		f := join(field, e.key)
		switch e.key {
		case "answers":
			var m []keyValue
			if m, err = r.mapping(e.value, f); err != nil {
				return err
			}
			c.Answers = map[string]json.RawMessage{}
			for _, x := range m {
				if c.Answers[x.key], err = r.jsonValue(x.value, join(f, x.key)); err != nil {
					return err
				}
			}
		case "approvals", "http_responses":
			if _, err := r.mapping(e.value, f); err != nil {
				return err
			}
		default:
			return r.fail(e.keyAt, f, "is not a known field (allowed: %s)", strings.Join(harnessCallerFields, ", "))
		}
	}
	return nil
}

func (r nodeReader) parseExpect(n *yaml.Node, field string) (Expectation, error) {
	var x Expectation
	entries, err := r.mapping(n, field)
	if err != nil {
		return x, err
	}
	for _, e := range entries {
		f := join(field, e.key)
		switch e.key {
		case "status":
			if x.Status, err = r.str(e.value, f); err == nil && !slices.Contains(expectStatuses, x.Status) {
				err = r.fail(e.value, f, "must be one of %s, got %q", strings.Join(expectStatuses, ", "), x.Status)
			}
		case "receipt":
			if _, err = r.mapping(e.value, f); err == nil {
				x.Receipt, err = r.jsonValue(e.value, f)
			}
		case "steps":
			_, err = r.strList(e.value, f)
		case "output":
			x.OutputExact, x.OutputSubset, err = r.parseJSONExpectation(e.value, f)
		case "step_outputs":
			var m []keyValue
			if m, err = r.mapping(e.value, f); err == nil {
				for _, s := range m {
					if _, _, err = r.parseJSONExpectation(s.value, join(f, s.key)); err != nil {
						break
					}
				}
				if err == nil {
					x.StepOutputs, err = r.jsonValue(e.value, f)
				}
			}
		default:
			err = r.fail(e.keyAt, f, "is not a known field (allowed: %s)", strings.Join(expectFields, ", "))
		}
		if err != nil {
			return x, err
		}
	}
	return x, nil
}

func (r nodeReader) parseJSONExpectation(n *yaml.Node, field string) (exact, subset json.RawMessage, err error) {
	entries, err := r.mapping(n, field)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		f := join(field, e.key)
		switch e.key {
		case "exact":
			exact, err = r.jsonValue(e.value, f)
		case "subset":
			subset, err = r.jsonValue(e.value, f)
		default:
			err = r.fail(e.keyAt, f, "is not a known field (allowed: exact, subset)")
		}
		if err != nil {
			return nil, nil, err
		}
	}
	if exact == nil && subset == nil {
		return nil, nil, r.fail(n, field, "must hold exact or subset")
	}
	return exact, subset, nil
}
