package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/libos/libos/control"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
	"github.com/libos/libos/server"
)

// Host metadata keys a run records for resume.
const (
	metaProvider = "cli.provider"
	metaRoot     = "cli.root"
)

// runSettings are what resume needs to continue a run: the provider and
// the skill folders. Credentials are never stored: the API key comes from
// the environment again, and so do a base URL's user and password.
type runSettings struct {
	Provider string `json:"provider"`
	Script   string `json:"script,omitempty"` // absolute path, or "demo" for the embedded script
	Model    string `json:"model,omitempty"`
	// BaseURL never holds a user or a password (setBaseURL).
	BaseURL string `json:"base_url,omitempty"`
	// BaseURLCredentials says the base URL was given with a user or a
	// password, which a later resume must be given again.
	BaseURLCredentials bool `json:"base_url_credentials,omitempty"`
	// baseURLUser is that user and password, kept for this process only.
	baseURLUser *url.Userinfo
	SkillDirs   []string `json:"skill_dirs,omitempty"`
	// NoFullIO turns off retention of full provider I/O as evidence.
	NoFullIO bool `json:"no_full_io,omitempty"`
	// Endpoint holds the retry and request settings of a real endpoint.
	Endpoint endpointSettings `json:"endpoint,omitzero"`
	// newRoot says the settings are a new run's, which starts a root of
	// its own (see othersLive), not a resume's correction.
	newRoot bool
}

// requireDir refuses a missing runtime directory: ps, send and resume never create one.
func requireDir(dir string) error {
	if _, err := os.Stat(kernel.StorePath(dir)); err != nil {
		return fmt.Errorf("no runtime directory at %s (start one with libos run)", dir)
	}
	return nil
}

// withRuntime runs req against dir: opened directly when it is idle, through
// the control socket of the runtime that holds it otherwise. A request that
// only reads (control.ReadOnlyOps) opens an idle directory read-only, so it
// never writes to it (no recovery, nothing flushed) and works on a full disk.
func withRuntime(dir string, req control.Request) (control.Response, error) {
	c, err := connect(dir, control.ReadOnlyOps[req.Op])
	if err != nil {
		return control.Response{}, err
	}
	defer c.Close()
	return c.do(req)
}

// runtimeConn reaches a runtime directory for one command, which may make
// more than one request: through the runtime opened on it when it is idle,
// or the control socket of the runtime that holds it.
type runtimeConn struct {
	dir string
	rt  *kernel.Runtime // nil: through the socket
}

// connect reaches dir; readOnly opens an idle directory read-only (see
// withRuntime).
func connect(dir string, readOnly bool) (*runtimeConn, error) {
	if err := requireDir(dir); err != nil {
		return nil, err
	}
	rt, err := kernel.Open(dir, kernel.Options{ReadOnly: readOnly})
	if errors.Is(err, objects.ErrInUse) {
		return &runtimeConn{dir: dir}, nil
	}
	if err != nil {
		return nil, err
	}
	return &runtimeConn{dir: dir, rt: rt}, nil
}

func (c *runtimeConn) do(req control.Request) (control.Response, error) {
	if c.rt != nil {
		return control.Handle(c.rt, req), nil
	}
	return control.Dial(context.Background(), c.dir, req, 5*time.Second)
}

// live says a runtime holds the directory: what a command changes runs now,
// not when a runtime next runs the directory.
func (c *runtimeConn) live() bool { return c.rt == nil }

func (c *runtimeConn) Close() {
	if c.rt != nil {
		c.rt.Close()
	}
}

// requireProcess refuses a pid no process has, with the kernel's words
// (kernel.ErrNoProcess), as inspect or send do. The log and the checkpoint
// list only filter by pid, and would answer a missing one with an empty
// success (and logs -f with a wait for ever). Any other error of the probe
// is left to the request that follows.
func requireProcess(dir string, pid int64) error {
	c, err := connect(dir, true)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.requireProcess(pid)
}

func (c *runtimeConn) requireProcess(pid int64) error {
	resp, err := c.do(control.Request{Op: "inspect", PID: pid})
	if err != nil {
		return err
	}
	if strings.HasPrefix(resp.Error, kernel.ErrNoProcess.Error()) {
		return errors.New(resp.Error)
	}
	return nil
}

func psCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos ps", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := dirFlag(fs)
	asJSON := fs.Bool("json", false, "print a JSON array")
	if !parseNoPositional(fs, args, stderr) {
		return exitUsage
	}
	resp, err := withRuntime(*dir, control.Request{Op: "ps"})
	if err == nil && resp.Error != "" {
		err = errors.New(resp.Error)
	}
	if err != nil {
		fmt.Fprintf(stderr, "libos ps: %s\n", termLines(err.Error()))
		return exitFailed
	}
	now := time.Now()
	if *asJSON {
		// The same rows as the HTTP API's GET /processes.
		rows := make([]server.ProcessRow, 0, len(resp.Processes))
		for _, p := range resp.Processes {
			rows = append(rows, server.Row(p, now))
		}
		b, _ := json.Marshal(rows)
		fmt.Fprintln(stdout, string(termJSON(b)))
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tPARENT\tIMAGE\tSTATUS\tWAITING ON\tTURN\tAGE\tREASON")
	for _, p := range resp.Processes {
		parent := "-"
		if p.ParentPID != 0 {
			parent = strconv.FormatInt(p.ParentPID, 10)
		}
		w := server.WaitingOn(p)
		switch {
		case w == "":
			w = "-"
		case p.Wait.Kind == process.WaitProvider && !p.Wait.Until.IsZero():
			w += ", next attempt " + p.Wait.Until.UTC().Format(time.RFC3339)
		}
		reason := "-"
		if p.Reason != "" {
			reason = shorten(oneLine(p.Reason), 60)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", p.PID, parent, termText(p.Image), p.Status, termText(w), p.Turn, age(now.Sub(p.CreatedAt)), termText(reason))
	}
	tw.Flush()
	return exitOK
}

func sendCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos send", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := dirFlag(fs)
	interrupt := fs.Bool("interrupt", false, "deliver before the process's next tool call")
	from := fs.String("from", "", "sender name (default $USER)")
	subject := fs.String("subject", "", "message subject")
	asJSON := fs.Bool("json", false, "print the message as JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 2 {
		return usageError(stderr, fs.Name(), "want <pid> TEXT, got %s", countArgs(len(pos)))
	}
	pid, err := parsePID(pos[0])
	if err != nil {
		return usageError(stderr, fs.Name(), "%v", err)
	}
	name := *from
	if name == "" {
		name = os.Getenv("USER")
	}
	resp, err := withRuntime(*dir, control.Request{Op: "send", To: pid, From: name, Body: pos[1], Subject: *subject, Interrupt: *interrupt})
	if err == nil && resp.Error != "" {
		err = errors.New(resp.Error)
	}
	if err != nil {
		fmt.Fprintf(stderr, "libos send: %s\n", termLines(err.Error()))
		return exitFailed
	}
	if *asJSON {
		b, _ := json.Marshal(resp.Message)
		fmt.Fprintln(stdout, string(termJSON(b)))
		return exitOK
	}
	m := resp.Message
	fmt.Fprintf(stdout, "pid %d: %s message %s from %s posted\n", pid, termText(string(m.Kind)), termText(m.ID), termText(m.Sender))
	return exitOK
}

func resumeCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos resume", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := dirFlag(fs)
	var pf providerFlags
	pf.register(fs, defaultsResume)
	rf := registerRunFlags(fs, true)
	if !parseNoPositional(fs, args, stderr) {
		return exitUsage
	}
	if err := requireDir(*dir); err != nil {
		fmt.Fprintf(stderr, "libos resume: %v\n", err)
		return exitFailed
	}
	settings, err := pf.resumeSettings(*dir)
	if err != nil {
		fmt.Fprintf(stderr, "libos resume: %v\n", err)
		return exitUsage
	}
	if rf.givenAny(fs) {
		if settings == nil {
			recorded, err := recordedSettings(*dir)
			if err != nil {
				fmt.Fprintf(stderr, "libos resume: %v\n", err)
				return exitFailed
			}
			settings = &recorded
		}
		rf.apply(fs, settings, false)
		// Refuse a bad skill package before the directory is touched.
		catalog, err := loadSkillCatalog(settings.SkillDirs)
		if err != nil {
			fmt.Fprintf(stderr, "libos resume: %v\n", err)
			return exitUsage
		}
		catalog.Close()
	}
	return session(*dir, stdout, stderr, func(rt *kernel.Runtime) (int64, error) {
		var root int64
		if err := rt.GetMeta(metaRoot, &root); err != nil {
			return 0, fmt.Errorf("this directory records no root process started by libos run: %w", err)
		}
		return root, nil
	}, settings)
}

// providerFromSettings rebuilds the provider a run started with; a replay
// provider asks spawns which script entry each process follows.
func providerFromSettings(s runSettings, spawns llm.SpawnIndexer) (llm.Provider, error) {
	switch s.Provider {
	case "replay":
		if s.Script == "demo" {
			script, err := llm.ParseScript(demoScript)
			if err != nil {
				return nil, err
			}
			return llm.NewReplay(script, spawns)
		}
		script, err := llm.LoadScript(s.Script)
		if err != nil {
			return nil, err
		}
		return llm.NewReplay(script, spawns)
	case "openai":
		cfg := llm.OpenAIConfigFromEnv()
		cfg.Model, cfg.BaseURL = s.Model, s.clientBaseURL()
		s.Endpoint.configure(&cfg)
		p, err := llm.NewOpenAI(cfg)
		if err != nil && cfg.BaseURL != s.BaseURL {
			// The adapter quotes a base URL it refuses: not its password.
			return nil, redacted{err: err, secret: cfg.BaseURL, shown: s.BaseURL}
		}
		return p, err
	}
	return nil, fmt.Errorf("recorded provider %q: must be replay or openai", s.Provider)
}

// setBaseURL sets the base URL raw (from flag, named in errors) without its
// user and password, which are kept in memory for this process's client:
// the directory records the settings, and resume prints them.
func (s *runSettings) setBaseURL(flag, raw string) error {
	s.BaseURL, s.BaseURLCredentials, s.baseURLUser = raw, false, nil
	if !strings.Contains(raw, "@") {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the URL, password and all.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%s: not a URL: %v", flag, err)
	}
	if u.User == nil {
		return nil
	}
	s.baseURLUser, s.BaseURLCredentials = u.User, true
	u.User = nil
	s.BaseURL = u.String()
	return nil
}

// clientBaseURL is the base URL the client uses: with its user and password
// when they were given to this process, or, for recorded settings, when
// OPENAI_BASE_URL gives them for the same URL (as the key comes from
// OPENAI_API_KEY again).
func (s runSettings) clientBaseURL() string {
	user := s.baseURLUser
	if user == nil && s.BaseURLCredentials {
		if env, err := url.Parse(strings.TrimSpace(os.Getenv(llm.EnvOpenAIBaseURL))); err == nil && env.User != nil {
			cu := env.User
			env.User = nil
			if env.String() == s.BaseURL {
				user = cu
			}
		}
	}
	u, err := url.Parse(s.BaseURL)
	if user == nil || err != nil {
		return s.BaseURL
	}
	u.User = user
	return u.String()
}

// missingCredentials says the recorded base URL had a user and password
// that this process was not given again.
func (s runSettings) missingCredentials() bool {
	return s.Provider == "openai" && s.BaseURLCredentials && s.clientBaseURL() == s.BaseURL
}

// credentialsHint tells, when the run's base URL had credentials this
// process lacks, how to give them again: without them the server refuses
// every call.
func credentialsHint(s runSettings, stderr io.Writer, name string) {
	if s.missingCredentials() {
		fmt.Fprintf(stderr, "%s: warning: the run's base URL had a user and password, which are never stored: give them again with --base-url or %s (%s)\n",
			name, llm.EnvOpenAIBaseURL, s.BaseURL)
	}
}

// redacted is err with a secret replaced where it shows.
type redacted struct {
	err           error
	secret, shown string
}

func (r redacted) Error() string { return strings.ReplaceAll(r.err.Error(), r.secret, r.shown) }
func (r redacted) Unwrap() error { return r.err }

// checkProviderSettings reports why s names no provider that can be built,
// before any runtime exists to answer a replay provider's spawn indexes.
func checkProviderSettings(s runSettings) error {
	_, err := providerFromSettings(s, llm.SpawnIndexFunc(func(int64) (int, error) {
		return 0, errors.New("no runtime is open")
	}))
	return err
}

func (s runSettings) String() string {
	parts := []string{s.Provider}
	if s.Script != "" {
		parts = append(parts, "script "+s.Script)
	}
	if s.Model != "" {
		parts = append(parts, "model "+s.Model)
	}
	return strings.Join(parts, ", ")
}

// recordedSettings reads the settings a run recorded in dir.
func recordedSettings(dir string) (runSettings, error) {
	var s runSettings
	rt, err := kernel.Open(dir, kernel.Options{ReadOnly: true})
	if err != nil {
		return s, err
	}
	defer rt.Close()
	if err := rt.GetMeta(metaProvider, &s); err != nil {
		return s, fmt.Errorf("this directory records no provider settings: %w", err)
	}
	return s, nil
}
