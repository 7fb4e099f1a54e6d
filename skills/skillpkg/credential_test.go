package skillpkg

import (
	"errors"
	"strings"
	"testing"
)

func TestMatchCredentialName(t *testing.T) {
	credentials := map[string]string{
		"OPENAI_API_KEY":        "OPENAI_API_KEY",
		"openai_api_key":        "OPENAI_API_KEY",
		"ANTHROPIC_API_KEY":     "*_API_KEY",
		"Service_ApiKey":        "*_APIKEY",
		"GITHUB_TOKEN":          "*_TOKEN",
		"gh_token":              "*_TOKEN",
		"AWS_SECRET_ACCESS_KEY": "*_SECRET*",
		"CLIENT_SECRET":         "*_SECRET*",
		"SECRET_KEY":            "SECRET_*",
		"DB_PASSWORD":           "*PASSWORD*",
		"PasswordFile":          "*PASSWORD*",
		"MYSQL_PASSWD":          "*PASSWD*",
		"GOOGLE_CREDENTIALS":    "*_CREDENTIALS",
		"GCP_CREDENTIAL":        "*_CREDENTIAL",
		"API_KEY":               "API_KEY",
		"apikey":                "APIKEY",
		"TOKEN":                 "TOKEN",
		"Secret":                "SECRET",
		"PASSWORD":              "PASSWORD",
		"CREDENTIALS":           "CREDENTIALS",
	}
	for name, want := range credentials {
		got, ok := MatchCredentialName(name)
		if !ok || got != want || !IsCredentialName(name) {
			t.Errorf("MatchCredentialName(%q) = %q, %v; want %q", name, got, ok, want)
		}
		if err := CheckEnvironmentName(name); !errors.Is(err, ErrCredentialEnvironment) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckEnvironmentName(%q) = %v", name, err)
		}
	}
	for _, name := range []string{"REGION", "TRACE_LABEL", "HOME", "PATH", "TOKENIZER_MODEL", "KEY_ID", "SECRETARY", "HTTP_PROXY", "LANG"} {
		if p, ok := MatchCredentialName(name); ok || IsCredentialName(name) || CheckEnvironmentName(name) != nil {
			t.Errorf("MatchCredentialName(%q) = %q, want no match", name, p)
		}
	}
}

func TestAdmissionRefusesCredentialEnvironment(t *testing.T) {
	tests := []struct {
		name, doc, runner, variable, field string
	}{
		{"provider key optional", "run:\n  type: cli-tool\n  command: x\n  environment:\n    optional: [REGION, OPENAI_API_KEY]\n", "default", "OPENAI_API_KEY", "run.environment.optional[1]"},
		{"provider key required", "run:\n  type: javascript\n  module: m.mjs\n  environment:\n    required: [OPENAI_API_KEY]\n", "default", "OPENAI_API_KEY", "run.environment.required[0]"},
		{"token in lower case", "runners:\n  build:\n    default: true\n    type: cli-tool\n    command: x\n    environment:\n      optional: [github_token]\n", "build", "github_token", "runners.build.environment.optional[0]"},
		{"secret on an agent task", "runners:\n  review:\n    default: true\n    type: agent-task\n    environment:\n      required: [CLIENT_SECRET]\n", "review", "CLIENT_SECRET", "runners.review.environment.required[0]"},
		{"bare password", "run:\n  type: cli-tool\n  command: x\n  environment:\n    required: [PASSWORD]\n", "default", "PASSWORD", "run.environment.required[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRunnerManifest([]byte(tc.doc))
			if !errors.Is(err, ErrAdmission) || !errors.Is(err, ErrCredentialEnvironment) || errors.Is(err, ErrModuleRefused) {
				t.Fatalf("error %v: want an admission refusal matching ErrCredentialEnvironment", err)
			}
			for _, part := range []string{tc.field, "runner " + tc.runner, tc.variable, "credentials never flow through the environment channel"} {
				if !strings.Contains(err.Error(), part) {
					t.Fatalf("error %q does not name %q", err, part)
				}
			}
		})
	}

	// A bundled tool's runner is admitted by the same rule.
	_, err := ParseToolManifest("git", "push", []byte(`{"name": "git.push", "runner": {"type": "cli-tool", "command": "git", "environment": {"optional": ["GIT_PASSWORD"]}}}`))
	if !errors.Is(err, ErrCredentialEnvironment) || !strings.Contains(err.Error(), "runner git.push must not declare GIT_PASSWORD") {
		t.Fatalf("bundled tool: %v", err)
	}
}

func TestResolveEnvironmentNeverReadsACredential(t *testing.T) {
	var asked []string
	lookup := func(k string) (string, bool) {
		asked = append(asked, k)
		return "value-of-" + k, true
	}
	// An Environment built by hand, as if admission had been bypassed.
	_, err := ResolveEnvironment(Environment{Required: []string{"REGION"}, Optional: []string{"OPENAI_API_KEY"}}, lookup)
	if !errors.Is(err, ErrCredentialEnvironment) || !strings.Contains(err.Error(), "OPENAI_API_KEY") {
		t.Fatalf("err = %v", err)
	}
	if len(asked) != 0 {
		t.Fatalf("looked up %v before refusing", asked)
	}
}
