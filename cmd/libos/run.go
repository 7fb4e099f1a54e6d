package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "embed"

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/control"
	"github.com/libos/libos/images"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/mailbox"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/process"
)

//go:embed demo/demo.yaml
var demoScript []byte

// grantFlag collects repeated RESOURCE=RIGHTS flags.
type grantFlag struct {
	name   string
	grants []capabilities.Grant
	effect capabilities.Effect
	// err is why the last value was refused, said once (see setError).
	err error
}

func (g *grantFlag) String() string { return "" }

func (g *grantFlag) Set(v string) error {
	id := fmt.Sprintf("cli-%s-%d", g.name, len(g.grants)+1)
	grant, err := capabilities.ParseGrantSpec(id, v, g.effect, time.Now())
	if err != nil {
		g.err = fmt.Errorf("--%s %q: %s", g.name, v, grantSpecRule(v, id, err))
		return g.err
	}
	g.grants = append(g.grants, grant)
	return nil
}

func (g *grantFlag) setError() error { return g.err }

// grantSpecRule is the rule spec broke, for an error that names the flag and
// the spec once: ParseGrantSpec's errors repeat the spec or name the grant's
// id (the CLI's own, never typed), and name grant fields where the user
// wrote a part of the spec.
func grantSpecRule(spec, id string, err error) string {
	msg := err.Error()
	for _, prefix := range []string{
		fmt.Sprintf("grant %q: ", spec),
		fmt.Sprintf("%v %q: ", capabilities.ErrInvalidGrant, spec),
		fmt.Sprintf("%v %q: ", capabilities.ErrInvalidGrant, id),
	} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	for _, f := range [][2]string{
		{"field resource: ", ""}, // the resource's own error quotes it
		{"field rights: ", "RIGHTS: "},
		{"field uses_remaining: ", "@USES: "},
		{"field expires_at: ", "~DURATION: "},
	} {
		if rest, ok := strings.CutPrefix(msg, f[0]); ok {
			return f[1] + rest
		}
	}
	return msg
}

// providerFlags select and configure the LLM provider.
type providerFlags struct {
	provider, script, model, baseURL string
	endpoint                         endpointFlags
}

// providerDefaults says where a command's provider settings come from when
// a flag is not given, for its help.
type providerDefaults int

const (
	defaultsRun    providerDefaults = iota // the flags and the environment
	defaultsResume                         // what the run recorded
	defaultsServe                          // what the directory recorded, else as run
)

func (p *providerFlags) register(fs *flag.FlagSet, d providerDefaults) {
	provider := "replay when --script is given, else openai"
	model := "$LIBOS_MODEL"
	baseURL := "$OPENAI_BASE_URL, else " + llm.DefaultOpenAIBaseURL + ", which needs $OPENAI_API_KEY"
	switch d {
	case defaultsResume:
		provider, model, baseURL = "the one the run recorded", "the recorded one", "the recorded one"
	case defaultsServe:
		provider, model, baseURL = "the one the directory recorded, else "+provider, "the recorded one, else "+model, "the recorded one, else "+baseURL
	}
	fs.StringVar(&p.provider, "provider", "", "LLM provider: replay or openai (default: "+provider+")")
	fs.StringVar(&p.script, "script", "", "replay script (YAML) for --provider replay")
	fs.StringVar(&p.model, "model", "", "model name for --provider openai (default: "+model+")")
	fs.StringVar(&p.baseURL, "base-url", "", "OpenAI-compatible base URL (default: "+baseURL+"); a user and password in it are sent, never stored")
	p.endpoint.register(fs)
}

// settings validates the flags (loading the script, checking the OpenAI
// configuration) before anything touches the runtime directory.
func (p *providerFlags) settings() (runSettings, error) {
	name := p.provider
	if name == "" {
		name = "openai"
		if p.script != "" {
			name = "replay"
		}
	}
	var s runSettings
	switch name {
	case "replay":
		if p.script == "" {
			return s, errors.New("--script: required with --provider replay")
		}
		if err := p.onlyOpenAI("a replay script answers for the model"); err != nil {
			return s, err
		}
		abs, err := filepath.Abs(p.script)
		if err != nil {
			return s, fmt.Errorf("--script: %w", err)
		}
		s = runSettings{Provider: "replay", Script: abs}
	case "openai":
		if p.script != "" {
			return s, errors.New("--script: only with --provider replay (a model server answers with --provider openai)")
		}
		cfg := llm.OpenAIConfigFromEnv()
		s = runSettings{Provider: "openai", Model: cfg.Model}
		if p.model != "" {
			s.Model = p.model
		}
		var err error
		if p.baseURL != "" {
			err = s.setBaseURL("--base-url", p.baseURL)
		} else {
			err = s.setBaseURL(llm.EnvOpenAIBaseURL, cfg.BaseURL)
		}
		if err != nil {
			return s, err
		}
	default:
		return s, fmt.Errorf("--provider %q: must be replay or openai", name)
	}
	if err := p.endpoint.apply(&s); err != nil {
		return s, err
	}
	if err := checkProviderSettings(s); err != nil {
		if name == "replay" {
			return s, fmt.Errorf("--script: %w", err)
		}
		return s, err
	}
	return s, nil
}

func runCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	goal := fs.String("goal", "", "the root process's goal (required)")
	dir := dirFlag(fs)
	var pf providerFlags
	pf.register(fs, defaultsRun)
	grants := &grantFlag{name: "grant", effect: capabilities.Allow}
	denies := &grantFlag{name: "deny", effect: capabilities.Deny}
	fs.Var(grants, "grant", "grant `RESOURCE=RIGHTS[@USES][~DURATION]` to the root (repeatable; RIGHTS is comma-separated; @N: a one-shot of N uses; ~D such as ~10m: expires D after the run starts)")
	fs.Var(denies, "deny", "deny `RESOURCE=RIGHTS` to the root (repeatable; deny beats ask, ask beats allow)")
	asks := &grantFlag{name: "ask", effect: capabilities.Ask}
	fs.Var(asks, "ask", "make calls that need `RESOURCE=RIGHTS[~DURATION]` wait for a Human's approval (repeatable; ~D: the ask expires D after the run starts; see libos approvals)")
	rf := registerRunFlags(fs, false)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return exitUsage
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, "libos run: exactly one image argument is required (for example base:v0)")
		return exitUsage
	}
	if *goal == "" {
		fmt.Fprintln(stderr, "libos run: --goal: required")
		return exitUsage
	}
	if _, err := images.Builtin(pos[0]); err != nil {
		fmt.Fprintf(stderr, "libos run: %v\n", err)
		return exitUsage
	}
	settings, err := pf.settings()
	if err != nil {
		fmt.Fprintf(stderr, "libos run: %v\n", err)
		return exitUsage
	}
	rf.apply(fs, &settings, true)
	settings.newRoot = true
	// Refuse a bad skill package before the directory is touched.
	catalog, err := loadSkillCatalog(settings.SkillDirs)
	if err != nil {
		fmt.Fprintf(stderr, "libos run: %v\n", err)
		return exitUsage
	}
	catalog.Close()
	return session(*dir, stdout, stderr, spawnRoot(pos[0], *goal, rootGrants(append(grants.grants, asks.grants...), denies.grants)), &settings)
}

// rootGrants are what a root started from the command line holds: the clock,
// plus the flags' grants (allow and ask), with denies last (deny beats ask,
// and ask beats allow).
func rootGrants(grants, denies []capabilities.Grant) []capabilities.Grant {
	out := []capabilities.Grant{
		{ID: "cli-clock-now", Resource: "clock:now", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow},
		{ID: "cli-clock-sleep", Resource: "clock:sleep", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow},
	}
	out = append(out, grants...)
	return append(out, denies...)
}

func demoCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := dirFlag(fs)
	if !parseNoPositional(fs, args, stderr) {
		return exitUsage
	}
	goal := "Show the runtime: read the clock, have a bad argument refused, keep an Object, delegate to a child that reports by message, sleep once, compact the context, and exit with a structured result."
	grants := []capabilities.Grant{
		{ID: "demo-spawn", Resource: "process:spawn", Rights: []capabilities.Right{capabilities.Write}, Effect: capabilities.Allow},
		{ID: "demo-compressor", Resource: "image:context-compressor:v0", Rights: []capabilities.Right{capabilities.Read}, Effect: capabilities.Allow},
	}
	// The root's pid is the hint's: a directory that already holds a run
	// gives the demo's root the next free pid.
	var root int64
	spawn := spawnRoot("base:v0", goal, rootGrants(grants, nil))
	code := session(*dir, stdout, stderr, func(rt *kernel.Runtime) (int64, error) {
		pid, err := spawn(rt)
		root = pid
		return pid, err
	}, &runSettings{Provider: "replay", Script: "demo", newRoot: true})
	if code == exitOK {
		demoHint(stderr, *dir, root, os.Args[0])
	}
	return code
}

// demoHint tells where the demo's run is kept and the commands to look
// around it, naming the CLI as arg0 started it (cliCommand).
func demoHint(w io.Writer, dir string, root int64, arg0 string) {
	cli, build := cliCommand(arg0)
	d := shellQuote(dir)
	look := "Look around"
	if build {
		look = "Build the CLI once with go build -o libos ./cmd/libos, then look around"
	}
	fmt.Fprintf(w, "The run is kept in %s. %s: %s ps --dir %s; %s inspect %d --dir %s; %s logs --dir %s;\n"+
		"or open the web console with %s serve --dir %s (it prints the console's link).\n", dir, look, cli, d, cli, root, d, cli, d, cli, d)
}

// cliCommand is how a hint names the CLI: as arg0 (os.Args[0]) when that
// is a libos binary the shell can start again, else ./libos, which needs
// building first (build): `go run ./cmd/libos` leaves no binary behind,
// only one in go's temporary go-build folder.
func cliCommand(arg0 string) (cli string, build bool) {
	base := filepath.Base(arg0)
	if (base == "libos" || base == "libos.exe") && !strings.Contains(filepath.ToSlash(arg0), "/go-build") {
		return shellQuote(arg0), false
	}
	return "./libos", true
}

// session opens dir with the provider settings (a run's own, or, when nil,
// those the directory recorded), serves the control socket, lets start pick
// the root to report, and runs until that root ends or the runtime is idle,
// printing progress to stderr and the outcome to stdout. SIGINT or SIGTERM
// stops it cleanly (see runSession); a second one exits at once.
func session(dir string, stdout, stderr io.Writer, start func(*kernel.Runtime) (int64, error), settings *runSettings) int {
	ctx, stop := watchSignals(stderr, os.Exit)
	defer stop()
	return runSession(ctx, dir, stdout, stderr, start, settings)
}

// runSession is session under ctx. When ctx is cancelled (by a signal, its
// cause a signalStop) the scheduler stops, the root's current outcome is
// printed all the same, and a root that is not terminal makes the exit code
// the signal's, with a hint on how to continue. A root that already ended
// keeps its own exit code: a signal that comes after the exit changes
// nothing.
func runSession(ctx context.Context, dir string, stdout, stderr io.Writer, start func(*kernel.Runtime) (int64, error), settings *runSettings) int {
	record := settings != nil
	if !record {
		recorded, err := recordedSettings(dir)
		if err != nil {
			fmt.Fprintf(stderr, "libos: %v\n", err)
			return exitFailed
		}
		settings = &recorded
	}
	catalog, err := loadSkillCatalog(settings.SkillDirs)
	if err != nil {
		fmt.Fprintf(stderr, "libos: %v\n", err)
		return exitFailed
	}
	defer catalog.Close()
	rt, err := kernel.Open(dir, kernel.Options{OnEvent: progressPrinter(stderr), Skills: catalog, DisableFullIO: settings.NoFullIO,
		ProviderRetry: settings.Endpoint.retryPolicy()})
	if err != nil {
		fmt.Fprintf(stderr, "libos: %v\n", err)
		return exitFailed
	}
	defer rt.Close()
	if settings.newRoot {
		if err := othersLive(rt, *settings, dir); err != nil {
			fmt.Fprintf(stderr, "libos: %v\n", err)
			return exitUsage
		}
	}
	if record {
		if err := rt.PutMeta(metaProvider, settings); err != nil {
			fmt.Fprintf(stderr, "libos: %v\n", err)
			return exitFailed
		}
	}
	provider, err := providerFromSettings(*settings, rt)
	if err != nil {
		fmt.Fprintf(stderr, "libos: provider (%s): %v\n", settings, err)
		return exitFailed
	}
	credentialsHint(*settings, stderr, "libos")
	rt.SetProvider(provider)
	stopControl, err := control.Serve(rt)
	if err != nil {
		fmt.Fprintf(stderr, "libos: %v\n", err)
		return exitFailed
	}
	defer stopControl()
	pid, err := start(rt)
	if err != nil {
		fmt.Fprintf(stderr, "libos: %v\n", err)
		if errors.Is(err, kernel.ErrInvalidSpawn) {
			return exitUsage
		}
		return exitFailed
	}
	err = rt.RunUntilIdle(ctx)
	stopped := ctx.Err() != nil
	if err != nil && !(stopped && errors.Is(err, context.Canceled)) {
		fmt.Fprintf(stderr, "libos: %v\n", err)
		return exitFailed
	}
	code := printOutcome(rt, pid, stdout, stderr)
	if code == exitWaiting {
		waitHints(rt, dir, pid, !stopped, stderr)
	}
	if !stopped {
		return code
	}
	sig := stopCause(ctx)
	if code == exitWaiting || unfinished(rt) {
		fmt.Fprintf(stderr, "libos: stopped by %s; continue with: libos resume --dir %s\n", sig.name(), shellQuote(dir))
	}
	if code == exitWaiting {
		return sig.exitCode()
	}
	return code
}

// othersLive refuses a new run in a directory whose live processes an
// earlier run started with another model: a run drives every live process
// of its directory with its own provider, so a root left waiting for its
// server to be fixed would be answered by another model or script (and
// failed for good when a replay script has nothing for it).
func othersLive(rt *kernel.Runtime, settings runSettings, dir string) error {
	var recorded runSettings
	if err := rt.GetMeta(metaProvider, &recorded); err != nil {
		return nil // a new directory, or one no run recorded settings in
	}
	if recorded.Provider == settings.Provider && recorded.Script == settings.Script &&
		recorded.Model == settings.Model && recorded.BaseURL == settings.BaseURL {
		return nil
	}
	ps, err := rt.Processes()
	if err != nil {
		return err
	}
	var live []string
	for _, p := range ps {
		if !p.Status.Terminal() {
			live = append(live, strconv.FormatInt(p.PID, 10))
		}
	}
	if len(live) == 0 {
		return nil
	}
	d := shellQuote(dir)
	return fmt.Errorf("%s holds processes an earlier run started with %s that have not ended (pid %s), and this run would "+
		"drive them with %s: continue them with libos resume --dir %s, end them with libos kill PID --dir %s, or run in another --dir",
		dir, recorded, strings.Join(live, ", "), settings, d, d)
}

// unfinished reports whether any process of rt is not terminal.
func unfinished(rt *kernel.Runtime) bool {
	ps, err := rt.Processes()
	if err != nil {
		return true
	}
	for _, p := range ps {
		if !p.Status.Terminal() {
			return true
		}
	}
	return false
}

// signalStop is the cancellation cause of a session stopped by a signal.
type signalStop struct{ sig os.Signal }

func (s signalStop) Error() string { return "stopped by " + s.name() }

func (s signalStop) name() string {
	switch s.sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.sig.String()
}

// exitCode is 128 plus the signal's number, as a shell reports a process
// the signal ended.
func (s signalStop) exitCode() int {
	if s.sig == os.Interrupt {
		return exitInterrupted
	}
	return exitTerminated
}

// stopCause is the signal that cancelled ctx; any other cancellation counts
// as SIGTERM, a request to stop from outside.
func stopCause(ctx context.Context) signalStop {
	var s signalStop
	if errors.As(context.Cause(ctx), &s) {
		return s
	}
	return signalStop{sig: syscall.SIGTERM}
}

// watchSignals returns a context cancelled, with a signalStop cause, by the
// first SIGINT or SIGTERM; a second one calls exit with its code, so a stop
// that hangs can still be cut short. stop ends the watch.
func watchSignals(stderr io.Writer, exit func(int)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		stopping := false
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				s := signalStop{sig: sig}
				if !stopping {
					stopping = true
					fmt.Fprintf(stderr, "libos: %s: stopping (send it again to exit at once)\n", s.name())
					cancel(s)
					continue
				}
				fmt.Fprintf(stderr, "libos: second signal (%s): exiting without a clean stop\n", s.name())
				exit(s.exitCode())
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		<-finished
		cancel(nil)
	}
}

// shellQuote quotes dir for the hint when a shell would split or expand it.
func shellQuote(dir string) string {
	if dir != "" && strings.IndexFunc(dir, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:,@%=", r))
	}) < 0 {
		return dir
	}
	return "'" + strings.ReplaceAll(dir, "'", `'\''`) + "'"
}

// spawnRoot starts the root of a run and records it for resume.
func spawnRoot(image, goal string, grants []capabilities.Grant) func(*kernel.Runtime) (int64, error) {
	return func(rt *kernel.Runtime) (int64, error) {
		return rt.Spawn(kernel.SpawnSpec{Image: image, Goal: goal, Grants: grants, RecordPIDAs: metaRoot})
	}
}

// outcome is the final JSON line of run, demo and resume.
type outcome struct {
	PID       int64           `json:"pid"`
	Image     string          `json:"image"`
	Status    process.State   `json:"status"`
	ResultOID *string         `json:"result_oid"`
	Result    json.RawMessage `json:"result"`
	Reason    string          `json:"reason,omitempty"`
}

func printOutcome(rt *kernel.Runtime, pid int64, stdout, stderr io.Writer) int {
	info, err := rt.Process(pid)
	if err != nil {
		fmt.Fprintf(stderr, "libos: %v\n", err)
		return exitFailed
	}
	out := outcome{PID: info.PID, Image: info.Image, Status: info.Status, Result: json.RawMessage("null"), Reason: info.Reason}
	if info.ResultOID != "" {
		oid := info.ResultOID
		out.ResultOID = &oid
		_, payload, err := rt.ReadObject(oid)
		switch {
		case errors.Is(err, objects.ErrCorrupt):
			// A store that cannot be trusted cannot report success.
			fmt.Fprintf(stderr, "libos: result %s: %v\n", oid, err)
			return exitFailed
		case err != nil:
			fmt.Fprintf(stderr, "libos: result %s: %v\n", oid, err)
		case json.Valid(payload):
			out.Result = payload
		}
	}
	b, _ := json.Marshal(out)
	fmt.Fprintln(stdout, string(termJSON(b)))
	switch info.Status {
	case process.Exited:
		return exitOK
	case process.Failed, process.Killed:
		return exitFailed
	}
	return exitWaiting
}

// progressPrinter prints one line per event on w, escaped (termText): tool
// names, arguments, summaries and reasons are the model's.
func progressPrinter(w io.Writer) func(kernel.Event) {
	return func(ev kernel.Event) {
		var line string
		switch ev.Kind {
		case kernel.EventSpawn:
			line = fmt.Sprintf("spawned %s", ev.Image)
			if ev.Parent != 0 {
				line += fmt.Sprintf(" (parent %d)", ev.Parent)
			}
		case kernel.EventState:
			line = fmt.Sprintf("%s -> %s", ev.From, ev.To)
			if ev.Wait != "" {
				line += " (" + ev.Wait + ")"
			}
			if ev.Reason != "" {
				line += ": " + ev.Reason
			}
		case kernel.EventQuantum:
			line = fmt.Sprintf("quantum: provider call, turn %d", ev.Turn)
		case kernel.EventProvider:
			line = providerLine(ev)
		case kernel.EventToolCall:
			line = fmt.Sprintf("call %s %s", ev.Tool, ev.Args)
		case kernel.EventToolDone:
			status := "ok"
			if ev.OK != nil && !*ev.OK {
				status = "error"
				if ev.Code != "" {
					status += " " + ev.Code
				}
			}
			line = fmt.Sprintf("  %s %s: %s", ev.Tool, status, ev.Summary)
		case kernel.EventRecovered:
			line = "recovered: " + ev.Reason
		default:
			line = ev.Kind
		}
		fmt.Fprintf(w, "[pid %d] %s\n", ev.PID, termText(line))
	}
}

// providerLine is one provider call attempt on one line: its attempt,
// outcome, latency and tokens, and the start of the model's text (or the
// error, shortened once by the adapter).
func providerLine(ev kernel.Event) string {
	d, _ := ev.Detail.(map[string]any)
	line := fmt.Sprintf("provider call, turn %d, attempt %v: %v, %v ms", ev.Turn, d["attempt"], d["outcome"], d["latency_ms"])
	if ev.Reason != "" {
		return line + fmt.Sprintf(" (%v): %s", d["disposition"], ev.Reason)
	}
	line += fmt.Sprintf(", %v+%v tokens, %v tool calls", d["prompt_tokens"], d["completion_tokens"], d["tool_calls"])
	if fr, ok := d["finish_reason"]; ok && fr != "stop" && fr != "tool_calls" {
		line += fmt.Sprintf(", finish %v", fr)
	}
	if ev.Summary != "" {
		line += ": " + strconv.Quote(ev.Summary)
	}
	return line
}

// waitHints tells, when a run ends with its root not ended, what holds the
// tree up and the command that moves it on: the only other sign of why the
// run ended is its exit status. A run stopped by a signal (idle false) has
// its own hint (libos resume) and lists the held calls alone; an idle run
// lists every process only the Host can move, each line saying that nothing
// else can move.
func waitHints(rt *kernel.Runtime, dir string, root int64, idle bool, stderr io.Writer) {
	prefix := "libos: "
	if idle {
		prefix += "nothing else can move: "
	}
	d := shellQuote(dir)
	then := "then libos resume --dir " + d
	printed := false
	hint := func(format string, args ...any) {
		fmt.Fprintf(stderr, prefix+format+"\n", args...)
		printed = true
	}
	if list, err := rt.Approvals(); err == nil {
		for _, a := range list {
			// The call id is the model's: quoted for the shell, escaped for the terminal.
			call := termText(a.CallID)
			hint("pid %d waits for approval of call %s (%s, %s on %s): libos approve %d %s --dir %s (or libos deny), %s",
				a.PID, call, termText(a.Tool), termText(strings.Join(a.Rights, ",")), termText(a.Resource), a.PID, shellQuote(call), d, then)
		}
	}
	if !idle {
		return
	}
	ps, err := rt.Processes()
	if err != nil {
		return
	}
	for _, p := range ps {
		switch {
		case p.Status == process.Paused:
			hint("pid %d is paused: libos continue %d --dir %s, %s", p.PID, p.PID, d, then)
		case p.Status != process.Waiting || p.Wait == nil:
		case p.Wait.Kind == process.WaitHuman || p.Wait.Kind == process.WaitMessage:
			hint("pid %d %s", p.PID, messageWaitHint(p.PID, p.Wait.Filter, d, then))
		case p.Wait.Kind == process.WaitProvider && p.Wait.Until.IsZero():
			hint("pid %d waits on its provider (%s): libos resume --dir %s asks again, with corrected flags (such as --base-url or --model) if the reason calls for them",
				p.PID, termText(shorten(oneLine(p.Reason), 160)), d)
		}
		// A child or compaction wait ends with what its children wait on,
		// listed on their own lines; an approval is listed above; a timer
		// or a provider's backoff does not leave a run idle.
	}
	if !printed {
		hint("pid %d waits; libos inspect %d --dir %s shows on what", root, root, d)
	}
}

// messageWaitHint says what message a process waits on (filter, its
// receive's) and how to send one that matches: the Human's name and the
// kind the filter asks for, since a message from anyone else does not end
// the wait.
func messageWaitHint(pid int64, filter json.RawMessage, d, then string) string {
	var f mailbox.Filter
	json.Unmarshal(filter, &f)
	if f.Sender != nil && !strings.HasPrefix(*f.Sender, mailbox.SenderHumanPrefix) {
		return fmt.Sprintf("waits on a message from %s (libos inspect %d --dir %s shows the wait)", termText(*f.Sender), pid, d)
	}
	what, flags := "a message", ""
	if f.Sender != nil {
		name := strings.TrimPrefix(*f.Sender, mailbox.SenderHumanPrefix)
		what = "a Human message from " + termText(name)
		flags += " --from " + shellQuote(termText(name))
	}
	if f.Kind != nil && *f.Kind == mailbox.KindInterrupt {
		flags += " --interrupt"
	}
	more := ""
	if f.Channel != nil || f.CorrelationID != nil || f.ReplyTo != nil || f.MessageIDs != nil {
		more = fmt.Sprintf(" (its filter may ask for more: libos inspect %d --dir %s)", pid, d)
	}
	return fmt.Sprintf("waits on %s%s: libos send %d TEXT%s --dir %s, %s", what, more, pid, flags, d, then)
}
