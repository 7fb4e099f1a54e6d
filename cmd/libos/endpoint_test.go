package main

import (
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libos/libos/kernel"
)

// endpoint is a chat-completions server whose model exits at once, unless
// it is set to answer an error status or expects another model name.
type endpoint struct {
	srv    *httptest.Server
	status atomic.Int32 // non-zero: answer this status
	model  atomic.Value // non-empty: any other model is "not found"
	hits   atomic.Int32
}

func newEndpoint(t *testing.T) *endpoint {
	e := &endpoint{}
	e.model.Store("")
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.hits.Add(1)
		var req struct{ Model string }
		body, _ := io.ReadAll(r.Body)
		json.Unmarshal(body, &req)
		w.Header().Set("Content-Type", "application/json")
		if want := e.model.Load().(string); want != "" && req.Model != want {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"message":"The model '`+req.Model+`' does not exist","code":"model_not_found"}}`)
			return
		}
		if code := e.status.Load(); code != 0 {
			w.WriteHeader(int(code))
			io.WriteString(w, `{"error":{"message":"injected"}}`)
			return
		}
		io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"tool_calls",
			"message":{"role":"assistant","content":"done","tool_calls":[{"id":"c1","type":"function",
			"function":{"name":"process_exit","arguments":"{\"message\":\"done\"}"}}]}}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) runArgs(dir string, extra ...string) []string {
	return append([]string{"run", "base:v0", "--goal", "g", "--dir", dir, "--provider", "openai", "--model", "m", "--base-url", e.srv.URL + "/v1"}, extra...)
}

func TestEndpointFlagsOutOfRange(t *testing.T) {
	e := newEndpoint(t)
	for _, tc := range []struct{ flag, value string }{
		{"--retry-attempts", "0"}, {"--retry-attempts", "x"}, {"--retry-max-backoff", "-1"}, {"--retry-max-backoff", "25h"},
		{"--request-timeout", "0"}, {"--request-timeout", "soon"}, {"--max-tokens", "0"}, {"--temperature", "3"},
		{"--temperature", "NaN"}, {"--max-tokens-field", "tokens"},
	} {
		dir := filepath.Join(t.TempDir(), "rt")
		_, stderr, code := runBin(t, e.runArgs(dir, tc.flag, tc.value)...)
		if code != exitUsage || !strings.Contains(stderr, tc.flag) {
			t.Errorf("%s %s: exit %d, stderr %q", tc.flag, tc.value, code, stderr)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("%s %s: the refused run created its directory", tc.flag, tc.value)
		}
	}
	if e.hits.Load() != 0 {
		t.Fatal("a refused flag reached the server")
	}
}

// A server that stays down: the run retries, then ends with the root
// waiting on its provider (exit 3) instead of failing it; resume after the
// server is back finishes the tree.
func TestUnavailableProviderWaitsThenResumes(t *testing.T) {
	e := newEndpoint(t)
	e.status.Store(503)
	dir := t.TempDir()
	stdout, stderr, code := runBin(t, e.runArgs(dir, "--retry-attempts", "3", "--retry-max-backoff", "0.01")...)
	out := decodeOutcome(t, stdout)
	if code != exitWaiting || out["status"] != "waiting" || !strings.HasPrefix(out["reason"].(string), "provider unavailable") {
		t.Fatalf("exit %d, outcome %v\n%s", code, out, stderr)
	}
	if n := e.hits.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	if strings.Count(stderr, "attempt") < 3 {
		t.Fatalf("the trace does not show each attempt:\n%s", stderr)
	}
	ps, _, _ := runBin(t, "ps", "--dir", dir, "--json")
	if !strings.Contains(ps, `"waiting_on":"provider"`) {
		t.Fatalf("ps does not show the provider wait: %s", ps)
	}
	e.status.Store(0)
	stdout, stderr, code = runBin(t, "resume", "--dir", dir)
	if out := decodeOutcome(t, stdout); code != exitOK || out["status"] != "exited" {
		t.Fatalf("resume: exit %d, outcome %v\n%s", code, out, stderr)
	}
}

// Settings that cannot work (a bad key, an unknown model) are not retried:
// the run ends at once naming the fix, and resume with the corrected flag
// continues the tree.
func TestWrongSettingsWaitForTheHost(t *testing.T) {
	e := newEndpoint(t)
	e.status.Store(401)
	dir := t.TempDir()
	stdout, _, code := runBin(t, e.runArgs(dir)...)
	if out := decodeOutcome(t, stdout); code != exitWaiting || !strings.Contains(out["reason"].(string), "authentication failed: check OPENAI_API_KEY") {
		t.Fatalf("exit %d, outcome %v", code, out)
	}
	if e.hits.Load() != 1 {
		t.Fatalf("a bad key was retried: %d attempts", e.hits.Load())
	}

	e.status.Store(0)
	e.model.Store("good")
	stdout, _, code = runBin(t, "resume", "--dir", dir)
	if out := decodeOutcome(t, stdout); code != exitWaiting || !strings.Contains(out["reason"].(string), `model "m" not found`) {
		t.Fatalf("unknown model: exit %d, outcome %v", code, out)
	}
	if _, stderr, code := runBin(t, "resume", "--dir", dir, "--retry-attempts", "0"); code != exitUsage || !strings.Contains(stderr, "--retry-attempts") {
		t.Fatalf("a bad flag on resume: exit %d, %s", code, stderr)
	}
	stdout, stderr, code := runBin(t, "resume", "--dir", dir, "--model", "good")
	if out := decodeOutcome(t, stdout); code != exitOK || out["status"] != "exited" {
		t.Fatalf("resume with the right model: exit %d, outcome %v\n%s", code, out, stderr)
	}
}

// Flags that do not apply to the provider a run uses are refused, not
// dropped without a word; an empty --dir is refused rather than taken for
// the current directory.
func TestFlagsOfAnotherProviderAreRefused(t *testing.T) {
	script := filepath.Join("..", "..", "testdata", "replay", "clock.yaml")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--provider", "openai", "--model", "m", "--base-url", "http://127.0.0.1:1/v1", "--script", script}, "--script: only with --provider replay"},
		{[]string{"--script", script, "--model", "gpt-4o"}, "--model: only with --provider openai"},
		{[]string{"--script", script, "--base-url", "http://127.0.0.1:1/v1"}, "--base-url: only with --provider openai"},
		{[]string{"--script", script, "--temperature", "1"}, "--temperature and --request-timeout: only with --provider openai"},
	} {
		dir := filepath.Join(t.TempDir(), "rt")
		_, stderr, code := runBin(t, append([]string{"run", "base:v0", "--goal", "g", "--dir", dir}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, stderr, tc.want)
		}
	}
	// The retry flags are the kernel's, for any provider.
	dir := filepath.Join(t.TempDir(), "rt")
	if _, stderr, code := runBin(t, "run", "base:v0", "--goal", "g", "--dir", dir, "--script", script, "--retry-attempts", "3"); code != 0 {
		t.Fatalf("a replay run with --retry-attempts: exit %d, %s", code, stderr)
	}
	// resume of that replay run refuses a model server's flag too.
	if _, stderr, code := runBin(t, "resume", "--dir", dir, "--model", "m"); code != exitUsage || !strings.Contains(stderr, "the run recorded --provider replay") {
		t.Fatalf("resume --model of a replay run: exit %d, %s", code, stderr)
	}
	cwd := t.TempDir()
	cmd := exec.Command(libosBin, "run", "base:v0", "--goal", "g", "--script", filepath.Join(repoDir(t), "testdata", "replay", "clock.yaml"), "--dir", "")
	cmd.Dir = cwd
	out, _ := cmd.CombinedOutput()
	if entries, _ := os.ReadDir(cwd); cmd.ProcessState.ExitCode() != exitUsage || len(entries) != 0 || !strings.Contains(string(out), "dir: must not be empty") {
		t.Fatalf("--dir \"\": exit %d, %s, wrote %v", cmd.ProcessState.ExitCode(), out, entries)
	}
}

// repoDir is the repository's root, for a command run elsewhere.
func repoDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// resume --provider naming the provider the run recorded corrects only
// what the other flags give; the recorded model, base URL and endpoint
// settings stay, whatever the environment says.
func TestResumeRestatingTheProviderKeepsItsSettings(t *testing.T) {
	dir := t.TempDir()
	rt, err := kernel.Open(dir, kernel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	temp := float32(0.2)
	recorded := runSettings{Provider: "openai", Model: "recorded-model", BaseURL: "http://recorded.example/v1",
		Endpoint: endpointSettings{MaxTokens: 100, Temperature: &temp, RetryAttempts: 2}}
	if err := rt.PutMeta(metaProvider, recorded); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LIBOS_MODEL", "env-model")
	t.Setenv("OPENAI_BASE_URL", "http://env.example/v1")
	var pf providerFlags
	fs := flag.NewFlagSet("resume", flag.ContinueOnError)
	pf.register(fs, defaultsResume)
	if err := fs.Parse([]string{"--provider", "openai", "--request-timeout", "30s"}); err != nil {
		t.Fatal(err)
	}
	s, err := pf.resumeSettings(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := s.Endpoint
	if s.Model != "recorded-model" || s.BaseURL != "http://recorded.example/v1" || e.MaxTokens != 100 || e.Temperature == nil || *e.Temperature != temp ||
		e.RetryAttempts != 2 || e.RequestTimeout != 30*time.Second {
		t.Fatalf("settings %+v, endpoint %+v", s, e)
	}
}

// A base URL may carry a proxy's user and password. They reach the server
// on every call of the run, but the directory records the URL without them
// and nothing prints them; a resume takes them from OPENAI_BASE_URL again,
// as it takes the key from OPENAI_API_KEY, and warns when they are missing.
func TestBaseURLCredentialsAreNeverStored(t *testing.T) {
	const secret = "s3cret-pw"
	var unavailable atomic.Bool
	var mu sync.Mutex
	var calls []string // each call's user and password, as the server saw them
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, _ := r.BasicAuth()
		mu.Lock()
		calls = append(calls, user+":"+pass)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case user != "user" || pass != secret:
			// A model server's words go into the reason ps shows.
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":{"message":"proxy authentication required\u001b[2K\u009b1A"}}`)
		case unavailable.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":{"message":"down"}}`)
		default:
			io.WriteString(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"tool_calls",
				"message":{"role":"assistant","content":"done","tool_calls":[{"id":"c1","type":"function",
				"function":{"name":"process_exit","arguments":"{\"message\":\"done\"}"}}]}}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`)
		}
	}))
	t.Cleanup(srv.Close)
	lastCall := func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(calls) == 0 {
			return ""
		}
		return calls[len(calls)-1]
	}
	u, _ := url.Parse(srv.URL + "/v1")
	plain := u.String()
	u.User = url.UserPassword("user", secret)
	withCredentials := u.String()
	env := []string{"OPENAI_API_KEY=", "OPENAI_BASE_URL=", "LIBOS_MODEL="}
	noSecret := func(what, out string) {
		t.Helper()
		if strings.Contains(out, secret) {
			t.Fatalf("%s prints the password:\n%s", what, out)
		}
	}

	dir := t.TempDir()
	unavailable.Store(true)
	stdout, stderr, code := runBinEnv(t, env, "run", "base:v0", "--goal", "g", "--dir", dir, "--provider", "openai", "--model", "m",
		"--base-url", withCredentials, "--retry-attempts", "1")
	if code != exitWaiting || lastCall() != "user:"+secret {
		t.Fatalf("run: exit %d, the server saw %q\n%s", code, lastCall(), stderr)
	}
	noSecret("run", stdout+stderr)
	rt, err := kernel.Open(dir, kernel.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var recorded json.RawMessage
	var s runSettings
	err = rt.GetMeta(metaProvider, &recorded)
	rt.Close()
	if err != nil || json.Unmarshal(recorded, &s) != nil {
		t.Fatalf("recorded settings: %v", err)
	}
	if strings.Contains(string(recorded), secret) || s.BaseURL != plain || !s.BaseURLCredentials {
		t.Fatalf("recorded settings %s, want base_url %s without its password", recorded, plain)
	}

	unavailable.Store(false)
	stdout, stderr, code = runBinEnv(t, env, "resume", "--dir", dir)
	if code != exitWaiting || lastCall() != ":" || !strings.Contains(stderr, "warning: the run's base URL had a user and password, which are never stored") {
		t.Fatalf("resume without them: exit %d, the server saw %q\n%s", code, lastCall(), stderr)
	}
	noSecret("resume", stdout+stderr)
	for _, args := range [][]string{{"inspect", "1"}, {"ps", "--json"}, {"ps"}} {
		out, _, _ := runBin(t, append(args, "--dir", dir)...)
		if !strings.Contains(out, "authentication") || controlIn(out) != "" {
			t.Fatalf("%v shows the server's words raw, or not at all: %q", args, out)
		}
	}

	stdout, stderr, code = runBinEnv(t, []string{"OPENAI_API_KEY=", "OPENAI_BASE_URL=" + withCredentials}, "resume", "--dir", dir)
	if code != 0 || lastCall() != "user:"+secret || strings.Contains(stderr, "warning") {
		t.Fatalf("resume with OPENAI_BASE_URL: exit %d, the server saw %q\n%s", code, lastCall(), stderr)
	}
	noSecret("resume", stdout+stderr)
	for _, args := range [][]string{{"logs"}, {"logs", "--json"}, {"inspect", "1"}, {"ps", "--json"}} {
		out, _, _ := runBin(t, append(args, "--dir", dir)...)
		noSecret(strings.Join(args, " "), out)
	}
	// A malformed URL is refused without quoting it.
	_, stderr, code = runBinEnv(t, env, "run", "base:v0", "--goal", "g", "--dir", t.TempDir(), "--provider", "openai", "--model", "m",
		"--base-url", "http://user:"+secret+"@host:port/v1")
	if code != exitUsage || !strings.Contains(stderr, "--base-url: not a URL") {
		t.Fatalf("a malformed base URL: exit %d\n%s", code, stderr)
	}
	noSecret("a malformed base URL", stderr)
}
