package server

import (
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestTokenAuth(t *testing.T) {
	f := newFixture(t, clockScript, func(o *Options) { o.Token = "s3cret" })
	f.must(http.StatusOK, "GET", "/processes", nil, nil)
	before := f.rt.Store().LastEventSeq()

	for _, c := range []struct{ name, auth, says string }{
		{"none", "", "a token is required"},
		{"wrong", "Bearer nope", "the token is wrong"},
		{"not bearer", "Basic czNjcmV0", "the token is wrong"},
	} {
		for _, req := range [][2]string{{"GET", "/processes"}, {"POST", "/processes"}, {"GET", "/events"}, {"GET", "/openapi.json"}} {
			r := f.do(req[0], req[1], `{"image": "base:v0", "goal": "x"}`, "Authorization", c.auth)
			code, msg := r.errorCode(t)
			if r.status != http.StatusUnauthorized || code != "unauthorized" || !strings.Contains(msg, c.says) || r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s token, %s %s: %d %s", c.name, req[0], req[1], r.status, r.body)
			}
		}
	}
	if after := f.rt.Store().LastEventSeq(); after != before {
		t.Fatal("an unauthorized request changed the runtime")
	}

	client := f.ts.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(path string, cookies ...*http.Cookie) *http.Response {
		req, _ := http.NewRequest("GET", f.ts.URL+path, nil)
		for _, c := range cookies {
			req.AddCookie(c)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	// The console without a session goes to the login form; assets are public.
	if resp := get("/"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Fatalf("console without a session: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp := get("/login"); resp.StatusCode != http.StatusOK {
		t.Fatalf("login page: %d", resp.StatusCode)
	}
	if resp := get("/assets/app.css"); resp.StatusCode != http.StatusOK {
		t.Fatalf("asset: %d", resp.StatusCode)
	}
	login := func(token string) *http.Response {
		resp, err := client.PostForm(f.ts.URL+"/login", url.Values{"token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := login("nope"); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login?failed=1" || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong login: %d %s %v", resp.StatusCode, resp.Header.Get("Location"), resp.Cookies())
	}
	resp := login("s3cret")
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == SessionCookie {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || strings.Contains(session.Value, "s3cret") {
		t.Fatalf("session cookie %+v", session)
	}
	if !strings.Contains(resp.Header.Get("Set-Cookie"), "SameSite=Strict") || !strings.Contains(resp.Header.Get("Set-Cookie"), "HttpOnly") {
		t.Fatalf("Set-Cookie %q", resp.Header.Get("Set-Cookie"))
	}
	if resp := get("/", session); resp.StatusCode != http.StatusOK {
		t.Fatalf("console with the session: %d", resp.StatusCode)
	}
	r := f.do("GET", "/processes", nil, "Authorization", "", "Cookie", SessionCookie+"="+session.Value)
	if r.status != http.StatusOK {
		t.Fatalf("API with the session cookie: %d %s", r.status, r.body)
	}
	// A state-changing request a browser says comes from another site is
	// refused even with the cookie.
	r = f.do("POST", "/processes", map[string]any{"image": "base:v0", "goal": "x"}, "Authorization", "",
		"Cookie", SessionCookie+"="+session.Value, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
	if code, _ := r.errorCode(t); r.status != http.StatusForbidden || code != "cross_origin" {
		t.Fatalf("cross-site POST: %d %s", r.status, r.body)
	}
	r = f.do("POST", "/processes", map[string]any{"image": "base:v0", "goal": "x"}, "Origin", "https://evil.example")
	if r.status != http.StatusForbidden {
		t.Fatalf("cross-origin POST: %d %s", r.status, r.body)
	}
	if after := f.rt.Store().LastEventSeq(); after != before {
		t.Fatal("a refused request changed the runtime")
	}
	// A same-origin POST from the console goes through.
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "x"}, nil)
}

// Without a token only loopback Host names are served: a page that
// re-resolves its own name to 127.0.0.1 cannot reach the API.
func TestHostCheckWithoutToken(t *testing.T) {
	f := newFixture(t, clockScript)
	for host, want := range map[string]int{"evil.example:7070": 403, "localhost:7070": 200, "127.0.0.1": 200, "[::1]:1": 200, "app.localhost": 200} {
		req, _ := http.NewRequest("GET", f.ts.URL+APIPrefix+"/processes", nil)
		req.Host = host
		resp, err := f.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:7070": true, "localhost:1": true, "[::1]:7070": true, ":7070": false, "0.0.0.0:7070": false, "10.1.2.3:80": false} {
		if LoopbackHost(addr) != want {
			t.Errorf("LoopbackHost(%q) = %v", addr, !want)
		}
	}
}

func TestConsoleHeadersAndAssets(t *testing.T) {
	f := newFixture(t, "")
	resp, err := f.ts.Client().Get(f.ts.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `<script src="/assets/app.js"`) {
		t.Fatalf("console: %d\n%s", resp.StatusCode, body)
	}
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("CSP %q allows inline code", csp)
	}
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("headers %v", resp.Header)
	}
	// Nothing in the console loads from elsewhere, and nothing is inline.
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	inline := regexp.MustCompile(`(?i)<script>|<style|\sstyle=|\son[a-z]+=`)
	fs.WalkDir(webFS, "web", func(path string, d fs.DirEntry, err error) error {
		if d.IsDir() {
			return nil
		}
		b, _ := webFS.ReadFile(path)
		if m := external.Find(b); m != nil {
			t.Errorf("%s refers to %s", path, m)
		}
		if strings.HasSuffix(path, ".html") {
			if m := inline.Find(b); m != nil {
				t.Errorf("%s has inline code %q", path, m)
			}
		}
		return nil
	})
	if resp, _ := f.ts.Client().Get(f.ts.URL + "/nope"); resp.StatusCode != 404 {
		t.Errorf("unknown page: %d", resp.StatusCode)
	}
}

// Each login is a session of its own, held by the server: logging out ends
// it (a copy of the cookie no longer works), another login's goes on, and a
// session expires.
func TestLogoutEndsTheSession(t *testing.T) {
	f := newFixture(t, clockScript, func(o *Options) { o.Token = "s3cret" })
	client := f.ts.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	login := func() string {
		t.Helper()
		resp, err := client.PostForm(f.ts.URL+"/login", url.Values{"token": {"s3cret"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, c := range resp.Cookies() {
			if c.Name == SessionCookie && c.Value != "" {
				return c.Value
			}
		}
		t.Fatalf("login set no session: %v", resp.Cookies())
		return ""
	}
	api := func(session string) int {
		t.Helper()
		return f.do("GET", "/processes", nil, "Authorization", "", "Cookie", SessionCookie+"="+session).status
	}
	first, second := login(), login()
	if first == second {
		t.Fatalf("two logins share the session %q", first)
	}
	if api(first) != http.StatusOK || api(second) != http.StatusOK {
		t.Fatal("a fresh session is refused")
	}
	req, _ := http.NewRequest("POST", f.ts.URL+"/logout", nil)
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: first})
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
		t.Fatalf("logout: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if got := api(first); got != http.StatusUnauthorized {
		t.Fatalf("the logged-out session answered %d", got)
	}
	if got := api(second); got != http.StatusOK {
		t.Fatalf("another login's session answered %d after the logout", got)
	}
	f.clock.Advance(sessionLifetime)
	if got := api(second); got != http.StatusUnauthorized {
		t.Fatalf("an expired session answered %d", got)
	}
	// The sessions held are bounded: the oldest goes first.
	oldest := login()
	f.clock.Advance(time.Second)
	for i := 0; i < maxSessions; i++ {
		login()
	}
	if got := api(oldest); got != http.StatusUnauthorized {
		t.Fatalf("the oldest of %d sessions answered %d", maxSessions+1, got)
	}
	f.srv.sessions.mu.Lock()
	n := len(f.srv.sessions.ids)
	f.srv.sessions.mu.Unlock()
	if n != maxSessions {
		t.Fatalf("%d sessions held, bound %d", n, maxSessions)
	}
}
