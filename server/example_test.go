package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/libos/libos/kernel"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/server"
)

const clockScript = `
processes:
  - image: base:v0
    turns:
      - tool_calls: [{name: get_current_time, arguments: {timezone: UTC}}]
      - tool_calls: [{name: process_exit, arguments: {payload: {zone: "${last.timezone}"}}}]
`

// A Host serves a runtime over HTTP: a client in any language starts a
// process with POST /api/v1/processes and reads it with GET.
func ExampleNew() {
	dir, err := os.MkdirTemp("", "libos-serve-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The notifier wakes the scheduler loop and the event streams at each commit.
	n := server.NewNotifier()
	rt, err := kernel.Open(dir, kernel.Options{OnEvent: n.OnEvent})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	script, err := llm.ParseScript([]byte(clockScript))
	if err != nil {
		log.Fatal(err)
	}
	provider, err := llm.NewReplay(script, rt)
	if err != nil {
		log.Fatal(err)
	}
	rt.SetProvider(provider)
	srv, err := server.New(rt, server.Options{Notifier: n})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	ctx, stop := context.WithCancel(context.Background())
	scheduled := make(chan error, 1)
	go func() { scheduled <- srv.RunScheduler(ctx) }()
	defer func() {
		stop()
		<-scheduled
	}()
	ts := httptest.NewServer(srv) // or http.ListenAndServe("127.0.0.1:7070", srv)
	defer ts.Close()

	resp, err := http.Post(ts.URL+"/api/v1/processes", "application/json",
		strings.NewReader(`{"image": "base:v0", "goal": "read the clock"}`))
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(resp.StatusCode, " ", string(body))

	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get(ts.URL + "/api/v1/processes/1")
		if err != nil {
			log.Fatal(err)
		}
		var p struct {
			Status string          `json:"status"`
			Result json.RawMessage `json:"result"`
		}
		json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if p.Status == "exited" {
			fmt.Println(p.Status, string(p.Result))
			break
		}
	}
	// Output:
	// 201 {"pid":1}
	// exited {"zone":"UTC"}
}
