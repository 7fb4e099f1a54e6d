package jsrunner

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestWorkerPipesStayOutOfThePoller checks that no epoll set of this process
// watches a worker's pipes, so a frame written to either wakes only the
// reader blocked on it.
func TestWorkerPipesStayOutOfThePoller(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1, MemoryLimit: testMemoryLimit})
	if r := p.Run(context.Background(), Spec{Dir: fixture(t, "pure"), Module: "sum.mjs", Export: "add"}, json.RawMessage(`{"a":1,"b":2}`), ""); r.Err != nil {
		t.Fatalf("call: %+v", r.Err)
	}
	p.mu.Lock()
	var pipes []int
	for wp := range p.procs {
		pipes = append(pipes, int(wp.stdin.Fd()), int(wp.outF.Fd()))
	}
	p.mu.Unlock()
	if len(pipes) == 0 {
		t.Fatal("the pool has no worker after a call")
	}
	watched := epollTargets(t)
	for _, fd := range pipes {
		if watched[fd] {
			t.Errorf("fd %d, a worker pipe, is in an epoll set of this process", fd)
		}
	}
}

// epollTargets lists the descriptors every epoll set of this process
// watches, from /proc/self/fdinfo.
func epollTargets(t *testing.T) map[int]bool {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	targets := map[int]bool{}
	sets := 0
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || link != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", e.Name()))
		if err != nil {
			continue
		}
		sets++
		for _, line := range strings.Split(string(info), "\n") {
			fields := strings.Fields(line)
			if len(fields) >= 2 && fields[0] == "tfd:" {
				if fd, err := strconv.Atoi(fields[1]); err == nil {
					targets[fd] = true
				}
			}
		}
	}
	if sets == 0 {
		t.Fatal("no epoll set found: the check would prove nothing")
	}
	return targets
}
