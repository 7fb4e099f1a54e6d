package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/libos/libos/control"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/objects"
	"github.com/libos/libos/server"
)

const serveSynopsis = "libos serve [--dir DIR] [--listen ADDR] [--token T] [--provider replay|openai] [--script FILE] [--skills DIR]... [provider flags]"

// serveCommand holds a runtime directory, runs its scheduler and serves the
// HTTP API and the web console until SIGINT or SIGTERM.
func serveCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := dirFlag(fs)
	listen := fs.String("listen", "127.0.0.1:7070", "`ADDR` to listen on (host:port; a non-loopback host needs --token)")
	token := fs.String("token", os.Getenv("LIBOS_TOKEN"), "the token every API call and the console need ($LIBOS_TOKEN sets the default)")
	quiet := fs.Bool("quiet", false, "do not print one line per event on stderr")
	var pf providerFlags
	pf.register(fs)
	skillDirs := registerSkillsFlag(fs)
	retainIO := fs.Bool("retain-io", true, "retain full provider I/O and tool results as durable evidence (context and goal recovery after a reopen need it)")
	if !parseNoPositional(fs, args, stderr) {
		return exitUsage
	}
	if !server.LoopbackHost(*listen) && *token == "" {
		return usageError(stderr, fs.Name(), "--listen %s is not a loopback address: --token is required to serve it", *listen)
	}
	settings, err := serveSettings(*dir, &pf)
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitUsage
	}
	if len(skillDirs.dirs) > 0 {
		settings.SkillDirs = skillDirs.dirs
	}
	if !*retainIO {
		settings.NoFullIO = true
	}
	ctx, stop := watchSignals(stderr, os.Exit)
	defer stop()
	return serveSession(ctx, *dir, *listen, *token, settings, *quiet, stdout, stderr)
}

// serveSettings are the provider settings a served directory runs with: the
// flags' for a directory without recorded settings, else the recorded ones
// corrected by the flags, as resume takes them.
func serveSettings(dir string, pf *providerFlags) (runSettings, error) {
	if requireDir(dir) != nil {
		return pf.settings()
	}
	recorded, err := recordedSettings(dir)
	if errors.Is(err, objects.ErrNotFound) {
		return pf.settings()
	}
	if err != nil {
		return runSettings{}, err
	}
	s, err := pf.resumeSettings(dir)
	if err != nil {
		return runSettings{}, err
	}
	if s == nil {
		return recorded, nil
	}
	return *s, nil
}

// serveInfo is the line serve prints on stdout once it listens.
type serveInfo struct {
	URL string `json:"url"`
	Dir string `json:"dir"`
}

func serveSession(ctx context.Context, dir, listen, token string, settings runSettings, quiet bool, stdout, stderr io.Writer) int {
	catalog, err := loadSkillCatalog(settings.SkillDirs)
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitUsage
	}
	defer catalog.Close()
	notifier := server.NewNotifier()
	onEvent := notifier.OnEvent
	if !quiet {
		progress := progressPrinter(stderr)
		onEvent = func(ev kernel.Event) {
			progress(ev)
			notifier.OnEvent(ev)
		}
	}
	rt, err := kernel.Open(dir, kernel.Options{OnEvent: onEvent, Skills: catalog, DisableFullIO: settings.NoFullIO,
		ProviderRetry: settings.Endpoint.retryPolicy()})
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitFailed
	}
	defer rt.Close()
	if err := rt.PutMeta(metaProvider, settings); err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitFailed
	}
	provider, err := providerFromSettings(settings, rt)
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: provider (%s): %v\n", settings, err)
		return exitFailed
	}
	rt.SetProvider(provider)
	stopControl, err := control.Serve(rt)
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitFailed
	}
	defer stopControl()
	srv, err := server.New(rt, server.Options{Token: token, Notifier: notifier, Skills: catalog})
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitFailed
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		return exitFailed
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
		IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	url := "http://" + ln.Addr().String() + "/"
	b, _ := json.Marshal(serveInfo{URL: url, Dir: rt.Dir()})
	fmt.Fprintln(stdout, string(b))
	fmt.Fprintf(stderr, "libos serve: %s on %s (console at /, API at %s/, provider %s)\n", rt.Dir(), url, server.APIPrefix, settings)

	schedCtx, stopSched := context.WithCancel(ctx)
	defer stopSched()
	scheduled := make(chan error, 1)
	go func() { scheduled <- srv.RunScheduler(schedCtx) }()

	code := exitOK
	select {
	case <-ctx.Done():
	case err := <-served:
		fmt.Fprintf(stderr, "libos serve: %v\n", err)
		code = exitFailed
	case err := <-scheduled:
		if err != nil {
			fmt.Fprintf(stderr, "libos serve: scheduler: %v\n", err)
			code = exitFailed
		}
	}
	// Streams end first: Shutdown waits for every open request.
	srv.Close()
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutCtx); err != nil {
		hs.Close()
	}
	stopSched()
	<-scheduled
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "libos serve: stopped by %s; %s is idle\n", stopCause(ctx).name(), shellQuote(dir))
	}
	return code
}
