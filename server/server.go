// Package server is libos's HTTP face: a JSON API under /api/v1/ that a Host
// in any language can drive, Server-Sent Events of the durable event log,
// and a live web console at /, all served from one runtime directory.
//
// The console's assets are embedded in the binary (server/web) and load
// nothing from elsewhere; every answer carries a strict
// Content-Security-Policy. With a token every API call and the console need
// it (Authorization: Bearer, or the HttpOnly cookie the login form sets);
// state-changing requests are refused when a browser says they come from
// another origin, and request bodies are bounded.
//
// A Host wires the server to its runtime:
//
//	n := server.NewNotifier()
//	rt, err := kernel.Open(dir, kernel.Options{Provider: p, OnEvent: n.OnEvent})
//	srv, err := server.New(rt, server.Options{Notifier: n, Token: token})
//	go srv.RunScheduler(ctx) // quanta run as the API starts processes and posts messages
//	http.ListenAndServe(addr, srv)
package server

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/tools"
)

//go:embed web
var webFS embed.FS

//go:embed openapi.json
var openAPIDoc []byte

// Defaults of Options.
const (
	// DefaultMaxBodyBytes bounds a request body.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxStreams bounds the event streams served at once.
	DefaultMaxStreams = 256
	// DefaultPollInterval is how often the scheduler loop and the event
	// streams look for changes nobody told them about (a Host that did not
	// wire a Notifier, or a change made through the control socket).
	DefaultPollInterval = 250 * time.Millisecond
	// keepAliveInterval is how often an idle event stream sends a comment,
	// so proxies and browsers keep it open.
	keepAliveInterval = 15 * time.Second
)

// SessionCookie is the cookie the login form sets: an HttpOnly,
// SameSite=Strict session id (not the token itself).
const SessionCookie = "libos_session"

// Bounds of the console's sessions.
const (
	// sessionLifetime is how long a login lasts.
	sessionLifetime = 12 * time.Hour
	// maxSessions bounds the sessions held; a login past it ends the one
	// closest to expiry.
	maxSessions = 1024
)

// Options configure a Server.
type Options struct {
	// Token, when set, is required of every API call and console page:
	// "Authorization: Bearer TOKEN", or the session cookie the login form
	// sets. Without a token only requests whose Host is a loopback name are
	// served (a DNS-rebinding page cannot reach the API), but to every
	// local user that can connect to the port: libos serve always sets one.
	Token string
	// Notifier is told of each committed event (wire its OnEvent into
	// kernel.Options.OnEvent); it wakes the scheduler loop and the event
	// streams at once. Without one they poll every PollInterval.
	Notifier *Notifier
	// Skills is the catalog the runtime was opened with: POST /processes
	// {skills: [NAME]} grants execute on the scopes of those skills' tools.
	Skills tools.SkillCatalog
	// MaxBodyBytes bounds a request body (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// MaxStreams bounds the event streams served at once (default DefaultMaxStreams).
	MaxStreams int
	// PollInterval is the fallback polling interval (default DefaultPollInterval).
	PollInterval time.Duration
	// Now is the time source of ages, grant expiries and console sessions
	// (default time.Now).
	Now func() time.Time
	// Logf, when set, reports what the scheduler loop could not do.
	Logf func(format string, args ...any)
}

// Server serves one runtime over HTTP. It is an http.Handler.
type Server struct {
	rt       *kernel.Runtime
	opts     Options
	handler  http.Handler
	api      *http.ServeMux
	sessions *sessions
	hub      *hub
	cache    *caches

	streams chan struct{} // one token per event stream served
	closing chan struct{} // closed by Close: the streams end
	closeMu sync.Once

	kickMu sync.Mutex
	kickCh chan struct{} // closed when the server changed something
}

// New returns a server of rt.
func New(rt *kernel.Runtime, opts Options) (*Server, error) {
	if rt == nil {
		return nil, errors.New("server: a runtime is required")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Notifier == nil {
		opts.Notifier = NewNotifier()
	}
	s := &Server{rt: rt, opts: opts, streams: make(chan struct{}, opts.MaxStreams), closing: make(chan struct{}), kickCh: make(chan struct{}),
		sessions: &sessions{ids: map[string]time.Time{}}}
	s.hub = newHub(rt, opts.Notifier, opts.PollInterval)
	s.cache = newCaches()
	s.api = s.apiMux()
	s.handler = s.routes()
	return s, nil
}

// ServeHTTP serves the API, the event stream and the console.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Close ends the event streams (an http.Server's Shutdown waits for them)
// and their shared reader.
func (s *Server) Close() {
	s.closeMu.Do(func() {
		close(s.closing)
		s.hub.close()
	})
}

// kick tells the scheduler loop the server changed something.
func (s *Server) kick() {
	s.kickMu.Lock()
	close(s.kickCh)
	s.kickCh = make(chan struct{})
	s.kickMu.Unlock()
}

func (s *Server) kicked() <-chan struct{} {
	s.kickMu.Lock()
	defer s.kickMu.Unlock()
	return s.kickCh
}

// csp is the console's Content-Security-Policy: everything from the binary
// itself, nothing inline, no frames, forms only back to the server.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// routes wraps the API and the console in the security layers, outermost
// first: headers, host check, cross-origin protection, authentication.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/api/", s.api)
	static, _ := fs.Sub(webFS, "web")
	assets := http.FileServerFS(static)
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", assets))
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	mux.HandleFunc("GET /{$}", s.consolePage)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errNotFound("path %s: no such page", r.URL.Path))
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusForbidden, Code: "cross_origin",
			Message: "a state-changing request from another origin is refused (the browser reported it with Sec-Fetch-Site or Origin)"})
	}))
	var h http.Handler = mux
	h = s.authenticate(h)
	h = cop.Handler(h)
	h = s.checkHost(h)
	return securityHeaders(h)
}

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// checkHost refuses, without a token, a request whose Host is not a
// loopback name: a page on another site that re-resolves its own name to
// 127.0.0.1 (DNS rebinding) would otherwise be same-origin with the API.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Token == "" && !LoopbackHost(r.Host) {
			writeError(w, &apiError{Status: http.StatusForbidden, Code: "forbidden_host",
				Message: "Host " + r.Host + ": without --token only loopback names (localhost, 127.0.0.1, [::1]) are served"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// LoopbackHost reports whether hostport (a Host header or a listen address)
// names the loopback interface: localhost, 127.0.0.0/8 or ::1.
func LoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authenticate admits a request that carries the token (or the session
// cookie); public paths (the login form, the static assets) pass.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Token == "" || s.authorized(r) || r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/assets/") {
			next.ServeHTTP(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/api/") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="libos"`)
			msg := "a token is required: send Authorization: Bearer TOKEN (or log in at /login)"
			if r.Header.Get("Authorization") != "" {
				msg = "the token is wrong"
			}
			writeError(w, &apiError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: msg})
			return
		}
		http.Redirect(w, r, "/login", http.StatusSeeOther)
	})
}

func (s *Server) authorized(r *http.Request) bool {
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, tok, ok := strings.Cut(auth, " ")
		return ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.opts.Token)) == 1
	}
	c, err := r.Cookie(SessionCookie)
	return err == nil && s.sessions.valid(c.Value, s.opts.Now())
}

// sessions are the console's logins: a random id each, held only in this
// process's memory (a restart of serve ends them all), until it expires or
// its logout.
type sessions struct {
	mu  sync.Mutex
	ids map[string]time.Time // id -> expiry
}

// start begins a session that lasts until now+sessionLifetime.
func (ss *sessions) start(now time.Time) string {
	id := rand.Text()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for old, exp := range ss.ids {
		if !now.Before(exp) {
			delete(ss.ids, old)
		}
	}
	if len(ss.ids) >= maxSessions {
		var first string
		for old, exp := range ss.ids {
			if first == "" || exp.Before(ss.ids[first]) {
				first = old
			}
		}
		delete(ss.ids, first)
	}
	ss.ids[id] = now.Add(sessionLifetime)
	return id
}

func (ss *sessions) valid(id string, now time.Time) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	exp, ok := ss.ids[id]
	if ok && !now.Before(exp) {
		delete(ss.ids, id)
		return false
	}
	return ok
}

func (ss *sessions) end(id string) {
	ss.mu.Lock()
	delete(ss.ids, id)
	ss.mu.Unlock()
}

func (s *Server) consolePage(w http.ResponseWriter, r *http.Request) {
	b, err := webFS.ReadFile("web/index.html")
	if err != nil {
		writeError(w, errInternal(err))
		return
	}
	if s.opts.Token == "" {
		// No token, no session: nothing to log out of.
		b = []byte(strings.Replace(string(b), `<form method="post" action="/logout" class="logout">`, `<form method="post" action="/logout" class="logout" hidden>`, 1))
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if s.opts.Token == "" || s.authorized(r) {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	b, err := webFS.ReadFile("web/login.html")
	if err != nil {
		writeError(w, errInternal(err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Query().Get("failed") != "" {
		b = []byte(strings.Replace(string(b), `<p id="failed" hidden>`, `<p id="failed">`, 1))
	}
	w.Write(b)
}

// login checks the form's token and sets the session cookie.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.opts.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		writeError(w, &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Message: "login form: " + err.Error()})
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("token")), []byte(s.opts.Token)) != 1 {
		http.Redirect(w, r, "/login?failed=1", http.StatusSeeOther)
		return
	}
	id := s.sessions.start(s.opts.Now())
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: id, Path: "/", HttpOnly: true, MaxAge: int(sessionLifetime / time.Second),
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout ends the cookie's session, whoever holds a copy of it.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		s.sessions.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", HttpOnly: true, MaxAge: -1,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
