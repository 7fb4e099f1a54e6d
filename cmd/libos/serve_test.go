package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
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
	stderr *bytes.Buffer
	done   chan error
}

func startServe(t *testing.T, args ...string) *served {
	t.Helper()
	cmd := exec.Command(libosBin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &served{t: t, cmd: cmd, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
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
	var info struct{ URL, Dir string }
	if err := json.Unmarshal([]byte(line), &info); err != nil || !strings.HasPrefix(info.URL, "http://127.0.0.1:") {
		t.Fatalf("serve's first line %q: %v", line, err)
	}
	s.url = strings.TrimSuffix(info.URL, "/")
	return s
}

func (s *served) request(method, path, body string) (int, []byte) {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.url+server.APIPrefix+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
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
		_, stderr, code := runBin(t, "serve", "--listen", addr, "--dir", t.TempDir(), "--script", "../../testdata/replay/clock.yaml")
		if code != exitUsage || !strings.Contains(stderr, "--token is required") {
			t.Fatalf("serve --listen %s without a token: exit %d\n%s", addr, code, stderr)
		}
	}
	stdout, _, code := runBin(t, "help", "serve")
	if code != 0 || !strings.Contains(stdout, "--token") || !strings.Contains(stdout, "--listen") {
		t.Fatalf("help serve: %d\n%s", code, stdout)
	}
}

// With a token, the API needs it.
func TestServeWithToken(t *testing.T) {
	s := startServe(t, "--dir", t.TempDir(), "--script", "../../testdata/replay/clock.yaml", "--token", "s3cret", "--quiet")
	if status, _ := s.request("GET", "/processes", ""); status != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", status)
	}
	req, _ := http.NewRequest("GET", s.url+server.APIPrefix+"/processes", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with the token: %d", resp.StatusCode)
	}
	if code := s.stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}
