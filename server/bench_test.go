package server

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/libos/libos/clock"
	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
)

// The load benchmark: a served runtime of 1,000 processes on loopback, 20
// event streams and 200 API requests a second for a bounded time. It
// reports the requests' p50 and p99 latency and the server's memory, and the
// scheduler's quanta a second with the console attached (the streams and
// the requests) and without, as a ratio.
//
//	go test ./server -run '^$' -bench Serve -benchtime 1x
//
// LIBOS_BENCH_SECONDS sets how long the load runs (default 3).

const (
	benchProcesses = 1000
	benchStreams   = 20
	benchRate      = 200 // requests a second
)

// busyScript: every root reads the clock five times, then exits.
const busyScript = `
processes:
  - image: base:v0
    turns:
      - {tool_calls: [{name: get_current_time, arguments: {}}]}
      - {tool_calls: [{name: get_current_time, arguments: {}}]}
      - {tool_calls: [{name: get_current_time, arguments: {}}]}
      - {tool_calls: [{name: get_current_time, arguments: {}}]}
      - {tool_calls: [{name: get_current_time, arguments: {}}]}
      - {tool_calls: [{name: process_exit, arguments: {message: done}}]}
`

// waitScript: every root waits for a message from ana, then exits.
const waitScript = `
processes:
  - image: base:v0
    turns:
      - {tool_calls: [{name: receive_process_messages, arguments: {sender: "human:ana"}}]}
      - {tool_calls: [{name: process_exit, arguments: {message: done}}]}
`

func benchSeconds() time.Duration {
	if v, err := strconv.Atoi(os.Getenv("LIBOS_BENCH_SECONDS")); err == nil && v > 0 {
		return time.Duration(v) * time.Second
	}
	return 3 * time.Second
}

// benchRuntime opens a runtime on dir whose provider plays script, counting
// quanta.
func benchRuntime(b *testing.B, script string, quanta *atomic.Int64) (*kernel.Runtime, *Server) {
	b.Helper()
	s, err := llm.ParseScript([]byte(script))
	if err != nil {
		b.Fatal(err)
	}
	n := NewNotifier()
	rt, err := kernel.Open(b.TempDir(), kernel.Options{Clock: clock.NewFake(epoch, true), OnEvent: func(ev kernel.Event) {
		if ev.Kind == kernel.EventQuantum {
			quanta.Add(1)
		}
		n.OnEvent(ev)
	}})
	if err != nil {
		b.Fatal(err)
	}
	p, err := llm.NewReplay(s, rt)
	if err != nil {
		b.Fatal(err)
	}
	rt.SetProvider(p)
	srv, err := New(rt, Options{Notifier: n})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		srv.Close()
		rt.Close()
	})
	return rt, srv
}

func spawnMany(b *testing.B, srv *Server, n int) {
	b.Helper()
	for i := 0; i < n; i++ {
		spec, e := srv.spawnSpec(SpawnRequest{Image: "base:v0", Goal: "work"})
		if e != nil {
			b.Fatal(e)
		}
		if _, err := srv.rt.Spawn(spec); err != nil {
			b.Fatal(err)
		}
	}
}

// load attaches the console to base: streams that read every event and
// requests at rate until stop; it returns the latencies.
type load struct {
	base    string
	pids    int
	client  *http.Client
	mu      sync.Mutex
	lat     []time.Duration
	errs    atomic.Int64
	bytes   atomic.Int64
	posted  atomic.Int64
	wg      sync.WaitGroup
	stopped chan struct{}
}

func startLoad(base string, since uint64, pids int, streams int, requests bool) *load {
	l := &load{base: base, pids: pids, stopped: make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	ctx, cancel := context.WithCancel(context.Background())
	for i := 0; i < streams; i++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", base+APIPrefix+"/events?since="+strconv.FormatUint(since, 10), nil)
			resp, err := l.client.Do(req)
			if err != nil {
				l.errs.Add(1)
				return
			}
			defer resp.Body.Close()
			// A console reads every byte; parsing is its own (another process's) work.
			n, _ := io.Copy(io.Discard, resp.Body)
			l.bytes.Add(n)
		}()
	}
	if !requests {
		go func() {
			<-l.stopped
			cancel()
		}()
		return l
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer cancel()
		tick := time.NewTicker(time.Second / benchRate)
		defer tick.Stop()
		var inflight sync.WaitGroup
		defer inflight.Wait()
		// The rate holds on a busy machine: a late tick sends what is due.
		start, sent := time.Now(), 0
		for {
			select {
			case <-l.stopped:
				return
			case <-tick.C:
			}
			for due := int(time.Since(start).Seconds() * benchRate); sent < due; sent++ {
				inflight.Add(1)
				go func(i int) {
					defer inflight.Done()
					l.request(i)
				}(sent)
			}
		}
	}()
	return l
}

// request is one of the mix an operator's tools send: mostly one process's
// page, sometimes the whole listing, and one in twenty a message that wakes
// a process.
func (l *load) request(i int) {
	pid := 1 + rand.IntN(l.pids)
	var req *http.Request
	switch i % 20 {
	case 0:
		req, _ = http.NewRequest("GET", l.base+APIPrefix+"/processes", nil)
	case 1, 2, 3, 4, 5:
		req, _ = http.NewRequest("GET", fmt.Sprintf("%s%s/processes/%d", l.base, APIPrefix, pid), nil)
	case 6, 7, 8:
		req, _ = http.NewRequest("GET", fmt.Sprintf("%s%s/processes/%d/context", l.base, APIPrefix, pid), nil)
	case 9, 10, 11:
		req, _ = http.NewRequest("GET", fmt.Sprintf("%s%s/processes/%d/messages", l.base, APIPrefix, pid), nil)
	case 12, 13:
		req, _ = http.NewRequest("GET", l.base+APIPrefix+"/approvals", nil)
	case 14, 15:
		req, _ = http.NewRequest("GET", fmt.Sprintf("%s%s/processes/%d/goal", l.base, APIPrefix, pid), nil)
	case 16, 17, 18:
		req, _ = http.NewRequest("GET", l.base+APIPrefix+"/checkpoints", nil)
	default:
		// Wake a waiting process: it runs and its entries go to the streams.
		to := l.posted.Add(1)
		req, _ = http.NewRequest("POST", fmt.Sprintf("%s%s/processes/%d/messages", l.base, APIPrefix, 1+(to-1)%int64(l.pids)),
			strings.NewReader(`{"body": "go", "from": "ana"}`))
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := l.client.Do(req)
	if err != nil {
		l.errs.Add(1)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if resp.StatusCode >= 300 {
		l.errs.Add(1)
	}
	l.mu.Lock()
	l.lat = append(l.lat, d)
	l.mu.Unlock()
}

func (l *load) stop() {
	close(l.stopped)
	l.client.CloseIdleConnections()
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func BenchmarkServeLoad(b *testing.B) {
	for range b.N {
		// Latency and memory: 1,000 processes, 20 streams, 200 requests a second.
		var q atomic.Int64
		rt, srv := benchRuntime(b, waitScript, &q)
		spawnMany(b, srv, benchProcesses)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := rt.RunUntilIdle(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		// The scheduler runs what the posted messages wake.
		schedCtx, stopSched := context.WithCancel(context.Background())
		scheduled := make(chan error, 1)
		go func() { scheduled <- srv.RunScheduler(schedCtx) }()
		// The server indexes the log once before the load, as a server
		// started on a directory does in its first seconds.
		for {
			if _, ok := srv.hub.lastSeq(); ok {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		ts := httptest.NewServer(srv)
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		l := startLoad(ts.URL, rt.Store().LastEventSeq(), benchProcesses, benchStreams, true)
		time.Sleep(benchSeconds())
		var during runtime.MemStats
		runtime.ReadMemStats(&during)
		l.stop()
		srv.Close()
		l.wg.Wait()
		ts.Close()
		stopSched()
		if err := <-scheduled; err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(percentile(l.lat, 0.50).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(percentile(l.lat, 0.99).Microseconds())/1000, "p99-ms")
		b.ReportMetric(float64(len(l.lat))/benchSeconds().Seconds(), "req/s")
		b.ReportMetric(float64(during.HeapInuse)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(during.TotalAlloc-before.TotalAlloc)/float64(max(1, len(l.lat)))/1024, "KiB-alloc/req")
		b.Logf("%d requests (%d errors), %d messages posted (each wakes a process), %d quanta run, %.1f MiB of events streamed to %d clients; heap in use %.1f MiB, sys %.1f MiB",
			len(l.lat), l.errs.Load(), l.posted.Load(), q.Load()-benchProcesses, float64(l.bytes.Load())/(1<<20), benchStreams, float64(during.HeapInuse)/(1<<20), float64(during.Sys)/(1<<20))
	}
}

// BenchmarkServeQuanta compares the scheduler's quanta a second without
// the console, with the console attached (20 live event streams, as 20
// open console tabs), and with the streams and 200 API requests a second.
// Quanta per CPU second of the whole process are reported beside them: on a
// machine other work shares, wall-clock rates vary run to run far more than
// the console changes them, and the CPU the process spends does not.
func BenchmarkServeQuanta(b *testing.B) {
	for range b.N {
		var bare, console, loaded, bareCPU, consoleCPU, loadedCPU []float64
		for round := 0; round < 3; round++ {
			w, c := quantaPerSecond(b, 0, false)
			bare, bareCPU = append(bare, w), append(bareCPU, c)
			w, c = quantaPerSecond(b, benchStreams, false)
			console, consoleCPU = append(console, w), append(consoleCPU, c)
			w, c = quantaPerSecond(b, benchStreams, true)
			loaded, loadedCPU = append(loaded, w), append(loadedCPU, c)
		}
		bq, cq, lq := median(bare), median(console), median(loaded)
		bc, cc, lc := median(bareCPU), median(consoleCPU), median(loadedCPU)
		b.ReportMetric(bq, "quanta/s")
		b.ReportMetric(cq, "quanta/s-console")
		b.ReportMetric(cq/bq, "console-ratio")
		b.ReportMetric(lq/bq, "console+requests-ratio")
		b.ReportMetric(cc/bc, "console-cpu-ratio")
		b.ReportMetric(lc/bc, "console+requests-cpu-ratio")
		b.Logf("quanta/s (medians of 3) bare %.0f %v, console %.0f %v (ratio %.3f), console and 200 requests/s %.0f %v (ratio %.3f)",
			bq, round0(bare), cq, round0(console), cq/bq, lq, round0(loaded), lq/bq)
		b.Logf("quanta per CPU second bare %.0f %v, console %.0f %v (ratio %.3f), console and 200 requests/s %.0f %v (ratio %.3f)",
			bc, round0(bareCPU), cc, round0(consoleCPU), cc/bc, lc, round0(loadedCPU), lc/bc)
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func round0(v []float64) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x + 0.5)
	}
	return out
}

// quantaPerSecond runs 300 processes of busyScript (1,800 quanta) to idle,
// with streams event streams following it and, with requests, 200 API
// requests a second.
func quantaPerSecond(b *testing.B, streams int, requests bool) (wall, cpu float64) {
	b.Helper()
	var q atomic.Int64
	rt, srv := benchRuntime(b, busyScript, &q)
	spawnMany(b, srv, 300)
	var l *load
	var ts *httptest.Server
	if streams > 0 {
		ts = httptest.NewServer(srv)
		l = startLoad(ts.URL, rt.Store().LastEventSeq(), 300, streams, requests)
		// The streams are open before the run starts.
		for srv.hub.subscribers() < streams {
			time.Sleep(time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start, cpu0 := time.Now(), cpuTime()
	if err := rt.RunUntilIdle(ctx); err != nil {
		b.Fatal(err)
	}
	elapsed, spent := time.Since(start), cpuTime()-cpu0
	if l != nil {
		l.stop()
		srv.Close()
		l.wg.Wait()
		ts.Close()
	}
	return float64(q.Load()) / elapsed.Seconds(), float64(q.Load()) / spent.Seconds()
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
