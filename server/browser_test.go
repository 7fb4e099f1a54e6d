package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/libos/libos/kernel"
)

// The browser tests drive the console in a real headless Chromium (Debian's
// chromium package; .ci/run installs it). They skip only on a machine
// without Chromium outside CI.

// chromiumPath finds Chromium, or skips (fails in CI) without it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LIBOS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("Chromium is not installed, and CI is set: the browser tests must run (.ci/run installs Debian's chromium)")
	}
	t.Skip("Chromium is not installed (apt-get install chromium) and CI is unset: skipping the browser tests")
	return ""
}

var (
	browserOnce   sync.Once
	browserCtx    context.Context
	browserCancel context.CancelFunc
	browserErr    error
)

// browser starts one headless Chromium for the package's browser tests.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath(t)
	browserOnce.Do(func() {
		dir, err := os.MkdirTemp("", "libos-chromium-")
		if err != nil {
			browserErr = err
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path),
			chromedp.Headless,
			chromedp.NoSandbox,
			chromedp.DisableGPU,
			chromedp.NoFirstRun,
			chromedp.Flag("disable-quic", true),
			chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true),
			chromedp.Flag("disable-sync", true),
			chromedp.UserDataDir(dir),
			chromedp.WindowSize(1400, 1000),
		)
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(actx)
		browserCtx, browserCancel = ctx, func() {
			cancel()
			acancel()
			os.RemoveAll(dir)
		}
		// The first action starts the browser.
		browserErr = chromedp.Do(ctx, chromedp.Navigate("about:blank"))
	})
	if browserErr != nil {
		t.Fatalf("start Chromium: %v", browserErr)
	}
	return browserCtx
}

func TestMain(m *testing.M) {
	code := m.Run()
	if browserCancel != nil {
		browserCancel()
	}
	os.Exit(code)
}

// tab opens a new tab on the shared browser that fails the test on any
// uncaught exception or console error (a CSP violation included), but the
// failed loads of URLs holding one of expected (an error answer a test
// asks for).
func tab(t *testing.T, expected ...string) context.Context {
	t.Helper()
	// A browser context of its own: no cookie of another test leaks in.
	ctx, cancel := chromedp.NewContext(browser(t), chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	var mu sync.Mutex
	var problems []string
	chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+e.ExceptionDetails.Text+" "+describeException(e))
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError && !strings.Contains(e.Entry.URL, "favicon") &&
				!slices.ContainsFunc(expected, func(u string) bool { return e.Entry.URL != "" && strings.Contains(e.Entry.URL, u) }) {
				problems = append(problems, "console error: "+e.Entry.Text+" "+e.Entry.URL)
			}
		}
	})
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			t.Errorf("the console page reported %s", p)
		}
	})
	tctx, tcancel := context.WithTimeout(ctx, 45*time.Second)
	t.Cleanup(tcancel)
	return tctx
}

func describeException(e *runtime.EventExceptionThrown) string {
	if e.ExceptionDetails.Exception != nil {
		return e.ExceptionDetails.Exception.Description
	}
	return ""
}

// until polls a JavaScript condition in the page within a generous bound
// (a navigation meanwhile restarts the poll in the new page).
func until(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[any](cond, chromedp.WithPollingInterval(25*time.Millisecond), chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil {
			return
		}
		if ctx.Err() == nil && time.Now().Before(deadline) && navigating(err) {
			time.Sleep(25 * time.Millisecond)
			continue
		}
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s: %v\npage:\n%s", what, err, shorten(body, 3000))
	}
}

// navigating says err came from a page being replaced under the poll: its
// execution context was destroyed or is not found yet.
func navigating(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "navigated") || strings.Contains(msg, "context was destroyed") ||
		strings.Contains(msg, "Cannot find context with specified id")
}

func shorten(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// rowStatus is the JavaScript condition that pid's tree row shows status.
func rowStatus(pid int, status string) string {
	return fmt.Sprintf(`(document.querySelector('.row[data-pid="%d"] .status') || {}).textContent === %q`, pid, status)
}

// runLive runs the fixture's scheduler loop until the test ends.
func (f *fixture) runLive() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.srv.RunScheduler(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			f.t.Error(err)
		}
	})
}

// treeScript: the root spawns a child and waits for it; the child waits for
// a message from ana and exits with it.
const treeScript = `
processes:
  - image: base:v0
    turns:
      - text: delegating to a child
        tool_calls:
          - name: spawn_child_process
            arguments: {image: base:v0, goal: "wait for ana"}
      - tool_calls:
          - name: wait_child_process
            arguments: {child_pid: "${last.pid}"}
      - tool_calls:
          - name: process_exit
            arguments: {payload: "${last}"}
  - image: base:v0
    turns:
      - text: waiting for ana
        tool_calls:
          - name: receive_process_messages
            arguments: {sender: "human:ana"}
      - tool_calls:
          - name: process_exit
            arguments: {payload: {got: "${last.messages.0.body}"}}
`

// The tree of a replay-driven run updates live; a process page shows its
// transcript; a Human message posted from the page lets the run finish.
func TestBrowserTreeTranscriptAndMessage(t *testing.T) {
	chromiumPath(t)
	f := newFixture(t, treeScript)
	f.runLive()
	ctx := tab(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(f.ts.URL+"/")); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the stream connects; without a token there is no log out", `document.getElementById("conn").textContent === "live" &&
		document.querySelector("form.logout").hidden`)
	f.must(http.StatusCreated, "POST", "/processes", map[string]any{"image": "base:v0", "goal": "delegate and report",
		"grants": []string{"process:spawn=write"}}, nil)
	until(t, ctx, "pid 1 appears and waits on its child", rowStatus(1, "waiting"))
	until(t, ctx, "pid 2 appears under pid 1 and waits", rowStatus(2, "waiting")+
		` && document.querySelector('.row[data-pid="1"]').parentElement.querySelector('.row[data-pid="2"]') !== null`)
	until(t, ctx, "pid 1's row names the child it waits on", `document.querySelector('.row[data-pid="1"] .wait').textContent === "on child 2"`)
	saveScreenshot(t, ctx, "#tree", "console-tree.png")

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`.row[data-pid="2"]`))); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the transcript of pid 2", `document.getElementById("process-title").textContent.startsWith("pid 2") &&
		document.getElementById("transcript").textContent.includes("waiting for ana") &&
		document.getElementById("transcript").textContent.includes("receive_process_messages")`)
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#msg-body"), "the answer is 42"),
		chromedp.SendKeys(chromedp.CSS("#msg-from"), "ana"),
		chromedp.Click(chromedp.CSS("#msg-send")),
	); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the message is sent", `document.getElementById("msg-result").textContent.startsWith("sent msg_")`)
	until(t, ctx, "pid 2 exits", rowStatus(2, "exited"))
	until(t, ctx, "pid 1 exits", rowStatus(1, "exited"))
	until(t, ctx, "the page shows the result", `document.getElementById("proc-result").textContent.includes("the answer is 42")`)
	d, _ := f.rt.Inspect(1)
	if d.Status != "exited" || !strings.Contains(string(d.Result), "the answer is 42") {
		t.Fatalf("pid 1: %s %s", d.Status, d.Result)
	}
}

// A call held for approval shows in the console; Approve, naming the call
// and the hold it showed in the body, lets the process finish.
func TestBrowserApproval(t *testing.T) {
	chromiumPath(t)
	f := newFixture(t, approvalScript)
	// The decisions the console sends, on their way to the server.
	var mu sync.Mutex
	var decisions []string
	console := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" && strings.HasPrefix(r.URL.Path, APIPrefix+"/approvals") {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			mu.Lock()
			decisions = append(decisions, string(b))
			mu.Unlock()
		}
		f.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(console.Close)
	f.runLive()
	ctx := tab(t)
	f.must(http.StatusCreated, "POST", "/processes", askSpawn, nil)
	if err := chromedp.Do(ctx, chromedp.Navigate(console.URL+"/#/p/1")); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the held call is listed", `document.querySelector('#approvals li[data-pid="1"] button.approve') !== null`)
	until(t, ctx, "pid 1 waits on approval", rowStatus(1, "waiting")+` && document.querySelector('.row[data-pid="1"] .wait').textContent === "on approval"`)
	held, err := f.rt.Approvals()
	if err != nil || len(held) != 1 {
		t.Fatalf("approvals %+v %v", held, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#approvals li[data-pid="1"] button.approve`))); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "pid 2 runs and pid 1 exits", rowStatus(2, "exited")+" && "+rowStatus(1, "exited"))
	until(t, ctx, "no approval is left", `document.getElementById("approval-count").textContent === "0"`)
	mu.Lock()
	defer mu.Unlock()
	want := fmt.Sprintf(`{"pid":1,"call_id":%q,"approval_id":%q,"decision":"approve"}`, held[0].CallID, held[0].ID)
	if len(decisions) != 1 || decisions[0] != want {
		t.Fatalf("the console sent %q, want %s", decisions, want)
	}
}

// With a token the console asks for it once, and then works on the cookie.
func TestBrowserLogin(t *testing.T) {
	chromiumPath(t)
	f := newFixture(t, clockScript, func(o *Options) { o.Token = "s3cret" })
	ctx := tab(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(f.ts.URL+"/")); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the login form", `location.pathname === "/login"`)
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), "s3cret"),
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)),
	); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the console, live, with a way to log out", `location.pathname === "/" && document.getElementById("conn").textContent === "live" &&
		!document.querySelector("form.logout").hidden`)
	// The cookie is HttpOnly: the page's scripts cannot read it.
	cookie, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`))
	if err != nil || strings.Contains(cookie, SessionCookie) {
		t.Fatalf("document.cookie %q %v", cookie, err)
	}
}

// The console stays usable with 1,000 processes: the tree renders once, and
// live changes repaint only their rows.
func TestBrowserThousandProcesses(t *testing.T) {
	chromiumPath(t)
	f := newFixture(t, messageScript)
	const n = 1000
	for i := 0; i < n; i++ {
		if _, err := f.rt.Spawn(f.mustSpec(map[string]any{"image": "base:v0", "goal": "wait for ana"})); err != nil {
			t.Fatal(err)
		}
	}
	f.run()
	f.runLive()
	ctx := tab(t)
	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(f.ts.URL+"/")); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the tree of 1,000", fmt.Sprintf(`document.querySelectorAll("#tree .row").length === %d && document.getElementById("conn").textContent === "live"`, n))
	t.Logf("1,000 processes rendered and live in %v", time.Since(start))
	// Count the rows the next changes rebuild: none should be replaced.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](`window.__rows = new Set(document.querySelectorAll("#tree .row")); true`)); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	for pid := 1; pid <= 50; pid++ {
		f.must(http.StatusCreated, "POST", fmt.Sprintf("/processes/%d/messages", pid), map[string]any{"body": "go", "from": "ana"}, nil)
	}
	until(t, ctx, "50 processes exit", `Array.from({length: 50}, (_, i) => i + 1).every(pid =>
		(document.querySelector('.row[data-pid="' + pid + '"] .status') || {}).textContent === "exited")`)
	t.Logf("50 exits shown in %v", time.Since(start))
	kept, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`Array.from(document.querySelectorAll("#tree .row")).every(r => window.__rows.has(r))`))
	if err != nil || !kept {
		t.Fatalf("live changes rebuilt tree rows (kept %v, %v)", kept, err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#filter"), "exited")); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the filter keeps the 50 exited", `document.querySelectorAll("#tree li:not(.nomatch)").length === 50`)
	saveScreenshot(t, ctx, "#tree", "console-tree-1000.png")
}

// mustSpec builds the spawn spec the API would for req.
func (f *fixture) mustSpec(req map[string]any) kernel.SpawnSpec {
	f.t.Helper()
	spec, e := f.srv.spawnSpec(SpawnRequest{Image: req["image"].(string), Goal: req["goal"].(string)})
	if e != nil {
		f.t.Fatal(e)
	}
	return spec
}

// saveScreenshot saves a screenshot of sel as a test artifact in
// $LIBOS_ARTIFACTS (default: the system's temporary folder).
func saveScreenshot(t *testing.T, ctx context.Context, sel, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("LIBOS_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "libos-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of %s: %s", sel, path)
}

// The console link serve prints carries the token in its fragment: the
// console logs in with it and takes it out of the address bar, and no
// request carries it in a URL or a Referer. A wrong one ends at the login
// form.
func TestBrowserTokenLink(t *testing.T) {
	chromiumPath(t)
	const token = "link-t0ken_0123456789"
	f := newFixture(t, clockScript, func(o *Options) { o.Token = token })
	var mu sync.Mutex
	var seen []string
	console := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.String()+" referer "+r.Header.Get("Referer"))
		mu.Unlock()
		f.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(console.Close)
	ctx := tab(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(console.URL+"/#token="+token)); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the console, live, logged in, the token out of the address bar", `location.pathname === "/" && location.hash === "" &&
		document.getElementById("conn").textContent === "live" && !document.querySelector("form.logout").hidden`)
	if href, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + " " + document.referrer`)); err != nil || strings.Contains(href, token) {
		t.Fatalf("the page still shows the token: %q %v", href, err)
	}
	mu.Lock()
	for _, r := range seen {
		if strings.Contains(r, token) {
			t.Errorf("a request carried the token in its URL or Referer: %s", r)
		}
	}
	mu.Unlock()

	wrong := tab(t)
	if err := chromedp.Do(wrong, chromedp.Navigate(console.URL+"/#token=wrong")); err != nil {
		t.Fatal(err)
	}
	until(t, wrong, "the login form says the token is wrong", `location.pathname === "/login" && location.search === "?failed=1" &&
		location.hash === "" && !document.getElementById("failed").hidden`)
}

// A decision the server refuses (a deny reason over the bound) says why
// beside the hold, and neither the message nor the reason typed is lost
// when the list is drawn again for another approval.
func TestBrowserRefusedDecisionStays(t *testing.T) {
	chromiumPath(t)
	f := newFixture(t, approvalScript)
	f.runLive()
	ctx := tab(t, APIPrefix+"/approvals")
	f.must(http.StatusCreated, "POST", "/processes", askSpawn, nil)
	if err := chromedp.Do(ctx, chromedp.Navigate(f.ts.URL+"/")); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "the held call is listed", `document.querySelector('#approvals li[data-pid="1"] button.deny') !== null`)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](fmt.Sprintf(
		`document.querySelector('#approvals li[data-pid="1"] input.reason').value = "é".repeat(%d); true`, kernel.MaxDenyReasonChars+1))); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#approvals li[data-pid="1"] button.deny`))); err != nil {
		t.Fatal(err)
	}
	says := fmt.Sprintf("reason: must be at most %d characters", kernel.MaxDenyReasonChars)
	until(t, ctx, "the refusal is shown", fmt.Sprintf(`((document.querySelector('#approvals li[data-pid="1"] .err') || {}).textContent || "").includes(%q)`, says))
	// Another hold draws the list again.
	f.must(http.StatusCreated, "POST", "/processes", askSpawn, nil)
	until(t, ctx, "the second hold is listed", `document.querySelector('#approvals li[data-pid="2"] button.deny') !== null`)
	until(t, ctx, "the refusal and the reason are still there", fmt.Sprintf(`((document.querySelector('#approvals li[data-pid="1"] .err') || {}).textContent || "").includes(%q) &&
		document.querySelector('#approvals li[data-pid="1"] input.reason').value.length === %d`, says, kernel.MaxDenyReasonChars+1))
	if held, _ := f.rt.Approvals(); len(held) != 2 {
		t.Fatalf("the refused deny decided a call: %+v", held)
	}
}
