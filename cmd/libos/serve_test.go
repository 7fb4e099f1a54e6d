package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/libos/libos/server"
)

// served is a running `libos serve`.
type served struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	stderr *lockedBuffer
	done   chan error
	// token is what request sends: the token serve made up, unless a test
	// sets another.
	token     string
	tokenFile string
}

func startServe(t *testing.T, args ...string) *served {
	t.Helper()
	return startServeEnv(t, nil, args...)
}

// startServeEnv starts serve with extra environment variables; $LIBOS_TOKEN
// of the test's own environment is never passed on.
func startServeEnv(t *testing.T, env []string, args ...string) *served {
	t.Helper()
	cmd := exec.Command(libosBin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), tokenEnv+"="), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &served{t: t, cmd: cmd, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-s.done
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("serve printed no address: %v\nstderr:\n%s", err, s.stderr)
	}
	var info struct {
		URL, Dir  string
		TokenFile string `json:"token_file"`
	}
	if err := json.Unmarshal([]byte(line), &info); err != nil || !strings.HasPrefix(info.URL, "http://127.0.0.1:") {
		t.Fatalf("serve's first line %q: %v", line, err)
	}
	s.url = strings.TrimSuffix(info.URL, "/")
	if s.tokenFile = info.TokenFile; s.tokenFile != "" {
		b, err := os.ReadFile(s.tokenFile)
		if err != nil {
			t.Fatalf("the token file serve names: %v", err)
		}
		s.token = strings.TrimSpace(string(b))
	}
	return s
}

func (s *served) request(method, path, body string) (int, []byte) {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.url+server.APIPrefix+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// stop sends SIGTERM and returns the exit code.
func (s *served) stop() int {
	s.t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.t.Fatalf("serve did not stop on SIGTERM\nstderr:\n%s", s.stderr)
	}
	s.done <- nil // for the cleanup
	return s.cmd.ProcessState.ExitCode()
}

// libos serve runs what the API starts, records its provider, and keeps the
// control socket: ps, send and approve reach the served directory, and ps
// --json lists what GET /processes lists.
func TestServeAPIAndControlSocket(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, "--dir", dir, "--script", "../../testdata/replay/approval.yaml", "--quiet")
	status, body := s.request("POST", "/processes", `{"image": "base:v0", "goal": "spawn a helper", "grants": ["process:spawn=write"], "asks": ["process:spawn=write"]}`)
	if status != http.StatusCreated || string(body) != "{\"pid\":1}\n" {
		t.Fatalf("spawn: %d %s", status, body)
	}
	var list []struct {
		PID    int64  `json:"pid"`
		CallID string `json:"call_id"`
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(list) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no approval\nstderr:\n%s", s.stderr)
		}
		time.Sleep(10 * time.Millisecond)
		stdout, stderr, code := runBin(t, "approvals", "--json", "--dir", dir)
		if code != 0 {
			t.Fatalf("approvals: %d %s", code, stderr)
		}
		decodeJSON(t, "approvals", stdout, &list)
	}
	if _, stderr, code := runBin(t, "approve", "1", list[0].CallID, "--dir", dir); code != 0 {
		t.Fatalf("approve through the control socket: %s", stderr)
	}
	for {
		if time.Now().After(deadline) {
			t.Fatalf("pid 1 did not exit\nstderr:\n%s", s.stderr)
		}
		_, b := s.request("GET", "/processes/1", "")
		var d struct{ Status string }
		json.Unmarshal(b, &d)
		if d.Status == "exited" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	psOut, stderr, code := runBin(t, "ps", "--json", "--dir", dir)
	if code != 0 {
		t.Fatalf("ps: %s", stderr)
	}
	_, apiOut := s.request("GET", "/processes", "")
	var fromPS, fromAPI []map[string]any
	decodeJSON(t, "ps --json", psOut, &fromPS)
	decodeJSON(t, "GET /processes", string(apiOut), &fromAPI)
	if len(fromPS) != 2 || len(fromAPI) != 2 {
		t.Fatalf("ps %s\napi %s", psOut, apiOut)
	}
	for i := range fromPS {
		delete(fromPS[i], "age_seconds")
		delete(fromAPI[i], "age_seconds")
		a, _ := json.Marshal(fromPS[i])
		b, _ := json.Marshal(fromAPI[i])
		if string(a) != string(b) {
			t.Fatalf("ps --json row %s\nGET /processes row %s", a, b)
		}
	}
	if code := s.stop(); code != 0 {
		t.Fatalf("serve exit %d\nstderr:\n%s", code, s.stderr)
	}
	// The provider was recorded: a later serve of the directory needs no flag.
	s2 := startServe(t, "--dir", dir, "--quiet")
	if status, _ := s2.request("GET", "/processes/2", ""); status != 200 {
		t.Fatalf("a second serve: %d\nstderr:\n%s", status, s2.stderr)
	}
	if code := s2.stop(); code != 0 {
		t.Fatalf("second serve exit %d", code)
	}
}

func TestServeRefusesAnOpenListenWithoutToken(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:7070", ":7070", "10.0.0.1:80"} {
		_, stderr, code := runBinEnv(t, []string{tokenEnv + "="}, "serve", "--listen", addr, "--dir", t.TempDir(), "--script", "../../testdata/replay/clock.yaml")
		if code != exitUsage || !strings.Contains(stderr, "needs a token of your own (--token-file FILE or $LIBOS_TOKEN)") {
			t.Fatalf("serve --listen %s without a token: exit %d\n%s", addr, code, stderr)
		}
	}
	stdout, _, code := runBin(t, "help", "serve")
	if code != 0 || !strings.Contains(stdout, "--token-file") || !strings.Contains(stdout, "--listen") {
		t.Fatalf("help serve: %d\n%s", code, stdout)
	}
}

// With a token of one's own, the API needs it; given with --token it
// works, with a warning that the command line shows it.
func TestServeWithToken(t *testing.T) {
	s := startServe(t, "--dir", t.TempDir(), "--script", "../../testdata/replay/clock.yaml", "--token", "s3cret", "--quiet")
	if status, _ := s.request("GET", "/processes", ""); status != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", status)
	}
	s.token = "s3cret"
	if status, _ := s.request("GET", "/processes", ""); status != http.StatusOK {
		t.Fatalf("with the token: %d", status)
	}
	if code := s.stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(s.stderr.String(), "warning: --token shows the token to every local user") || !strings.Contains(s.stderr.String(), "--token-file") {
		t.Fatalf("--token without a warning:\n%s", s.stderr)
	}
}

// By default serve makes up a token, writes it to DIR/serve-token for its
// owner alone, and answers nothing without it: any local user can reach a
// loopback port, as the runtime's control socket (owner-only) never lets
// them. The console link carries the token in its fragment, and the file
// goes when serve does.
func TestServeIsOwnerOnlyByDefault(t *testing.T) {
	// A directory made by hand, open to every user, as one may make it.
	parent := t.TempDir()
	dir := filepath.Join(parent, "rt")
	if err := os.Chmod(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--dir", dir, "--script", "../../testdata/replay/clock.yaml", "--quiet")
	if s.tokenFile != filepath.Join(dir, serveTokenFile) {
		t.Fatalf("token file %q, want it in the directory", s.tokenFile)
	}
	fi, err := os.Stat(s.tokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v, want mode 0600", fi.Mode(), err)
	}
	if b, err := base64.RawURLEncoding.DecodeString(s.token); err != nil || len(b) != 32 {
		t.Fatalf("token %q: %d random bytes (%v), want 32 in base64url", s.token, len(b), err)
	}
	token := s.token
	s.token = ""
	for _, req := range [][3]string{{"GET", "/processes", ""}, {"POST", "/processes", `{"image": "base:v0", "goal": "spawned by anyone", "grants": ["*=read,write,materialize,execute,admin"]}`},
		{"GET", "/approvals", ""}, {"POST", "/processes/1/signal", `{"signal": "kill"}`}} {
		if status, body := s.request(req[0], req[1], req[2]); status != http.StatusUnauthorized {
			t.Fatalf("%s %s without the token: %d %s", req[0], req[1], status, body)
		}
	}
	s.token = token
	if status, body := s.request("GET", "/processes", ""); status != http.StatusOK || string(body) != "[]\n" {
		t.Fatalf("with the token: %d %s", status, body)
	}
	if !strings.Contains(s.stderr.String(), "/#token="+token) {
		t.Fatalf("serve does not print the console's link:\n%s", s.stderr)
	}
	if os.Getuid() == 0 {
		// Another user finds the file and cannot read it.
		cat := exec.Command("cat", s.tokenFile)
		cat.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cat.CombinedOutput(); err == nil || strings.Contains(string(out), token) {
			t.Fatalf("uid 65534 read the token file: %q %v", out, err)
		}
	}
	if code := s.stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, s.stderr)
	}
	if _, err := os.Stat(s.tokenFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the token file outlives serve: %v", err)
	}
}

// A token of one's own comes from --token-file or $LIBOS_TOKEN; serve then
// writes no file, and removes the token a crashed serve left behind.
func TestServeTokenOfYourOwn(t *testing.T) {
	clock := "../../testdata/replay/clock.yaml"
	tokens := t.TempDir()
	file := filepath.Join(tokens, "token")
	if err := os.WriteFile(file, []byte("from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	stale := filepath.Join(dir, serveTokenFile)
	if err := os.WriteFile(stale, []byte("stale\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, "--dir", dir, "--script", clock, "--quiet", "--token-file", file)
	if s.tokenFile != "" {
		t.Fatalf("serve wrote a token file %s although it was given one", s.tokenFile)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a stale token file is kept: %v", err)
	}
	for token, want := range map[string]int{"from-a-file": http.StatusOK, "stale": http.StatusUnauthorized} {
		s.token = token
		if status, _ := s.request("GET", "/processes", ""); status != want {
			t.Fatalf("token %q: %d, want %d", token, status, want)
		}
	}
	if code := s.stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(s.stderr.String(), "from-a-file") || strings.Contains(s.stderr.String(), "warning") {
		t.Fatalf("stderr:\n%s", s.stderr)
	}

	// The token file of a serve may be given to the next one: it is kept.
	if err := os.WriteFile(stale, []byte("kept\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = startServe(t, "--dir", dir, "--quiet", "--token-file", stale)
	s.token = "kept"
	if status, _ := s.request("GET", "/processes", ""); status != http.StatusOK {
		t.Fatalf("--token-file DIR/serve-token: %d", status)
	}
	if code := s.stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("the --token-file given was removed: %v", err)
	}

	s = startServeEnv(t, []string{tokenEnv + "=from-the-environment"}, "--dir", dir, "--quiet")
	s.token = "from-the-environment"
	if status, _ := s.request("GET", "/processes", ""); status != http.StatusOK || s.tokenFile != "" {
		t.Fatalf("$%s: %d, token file %q", tokenEnv, status, s.tokenFile)
	}
	if code := s.stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}

	empty := filepath.Join(tokens, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	spaced := filepath.Join(tokens, "spaced")
	os.WriteFile(spaced, []byte("two words\n"), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--token", "t", "--token-file", file}, "--token and --token-file: give one"},
		{[]string{"--token-file", empty}, "--token-file " + empty + ": the token is empty"},
		{[]string{"--token-file", spaced}, "printable ASCII without spaces"},
		{[]string{"--token-file", filepath.Join(tokens, "missing")}, "--token-file"},
		{[]string{"--token-file", tokens}, "must be a regular file"},
	} {
		_, stderr, code := runBin(t, append([]string{"serve", "--listen", "127.0.0.1:0", "--dir", t.TempDir(), "--script", clock}, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d %q, want %q", c.args, code, stderr, c.want)
		}
	}
}

// The loopback rule holds for the address serve bound, not the name it was
// given: a resolver decides where a name such as foo.localhost leads.
func TestServeChecksTheAddressItBound(t *testing.T) {
	defer func(listen func(string) (net.Listener, error)) { listenTCP = listen }(listenTCP)
	var asked string
	listenTCP = func(addr string) (net.Listener, error) {
		asked = addr
		return net.Listen("tcp", "0.0.0.0:0") // what the name resolved to
	}
	t.Setenv(tokenEnv, "")
	dir := filepath.Join(t.TempDir(), "rt")
	var stdout, stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- serveCommand([]string{"--listen", "foo.localhost:0", "--dir", dir, "--script", "../../testdata/replay/clock.yaml"}, &stdout, &stderr)
	}()
	var code int
	select {
	case code = <-done:
	case <-time.After(20 * time.Second):
		// It serves: stop it as an operator would, then fail.
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		<-done
		t.Fatalf("serve took a non-loopback bind without a token of its own:\n%s", stderr.String())
	}
	if code != exitUsage || asked != "foo.localhost:0" || !strings.Contains(stderr.String(), "--listen foo.localhost:0 bound ") ||
		!strings.Contains(stderr.String(), "not a loopback address") {
		t.Fatalf("exit %d, listened on %q:\n%s", code, asked, stderr.String())
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused serve opened its directory: %v", err)
	}
}
