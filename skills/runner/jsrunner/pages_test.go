package jsrunner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// ledger writes a JSON array of n records {id, amount} with whitespace
// between records, and returns its bytes and the amount total. Records for
// which fail(i) holds carry "fail": true.
func ledger(t testing.TB, path string, n int, fail func(int) bool) ([]byte, int) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("[\n")
	total := 0
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(" ,\n ")
		}
		amount := i % 97
		total += amount
		extra := ""
		if fail != nil && fail(i) {
			extra = `,"fail":true`
		}
		fmt.Fprintf(&b, `{"id":%d,"amount":%d,"note":"entry %d é"%s}`, i, amount, i, extra)
	}
	b.WriteString("\n]\n")
	writeFile(t, path, b.String())
	return b.Bytes(), total
}

func pagedSpec(t testing.TB, export string, pageBytes int) Spec {
	return Spec{
		Dir:    fixture(t, "pages"),
		Module: "ledger.mjs",
		Export: export,
		Pages: &PagesSpec{
			PathFrom:      "ledger_file",
			PathScopeFrom: "ledger_base",
			MediaType:     "application/json",
			Framing:       "json_array",
			PageBytes:     pageBytes,
		},
	}
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

type pageReport struct {
	ArtifactRef   string   `json:"artifact_ref"`
	MediaType     string   `json:"media_type"`
	WholeDigest   string   `json:"whole_digest"`
	ArtifactBytes int64    `json:"artifact_bytes"`
	PageIndex     int      `json:"page_index"`
	Offset        int64    `json:"offset"`
	Length        int64    `json:"length"`
	NextOffset    int64    `json:"next_offset"`
	EOF           bool     `json:"eof"`
	RangeDigest   string   `json:"range_digest"`
	RecordCount   int      `json:"record_count"`
	InputKeys     []string `json:"input_keys"`
}

func describe(t testing.TB, p *Pool, ws string, pageBytes int) []pageReport {
	t.Helper()
	r := p.Run(context.Background(), pagedSpec(t, "describePages", pageBytes),
		json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace","label":"x"}`), ws)
	if r.Err != nil {
		t.Fatalf("describePages: %s: %s", r.Err.Code, r.Err.Message)
	}
	var out struct {
		Pages []pageReport `json:"pages"`
	}
	if err := json.Unmarshal(r.Output, &out); err != nil {
		t.Fatal(err)
	}
	if r.Pages != len(out.Pages) {
		t.Fatalf("Result.Pages = %d, module saw %d pages", r.Pages, len(out.Pages))
	}
	return out.Pages
}

func TestPagedRunCarriesStateAcrossPages(t *testing.T) {
	p := sharedPool(t)
	ws := t.TempDir()
	data, total := ledger(t, filepath.Join(ws, "data", "ledger.json"), 3000, nil)
	const pageBytes = 40 << 10

	pages := describe(t, p, ws, pageBytes)
	if len(pages) < 3 {
		t.Fatalf("%d pages, want several", len(pages))
	}
	records := 0
	for i, pg := range pages {
		if pg.PageIndex != i || pg.ArtifactBytes != int64(len(data)) || pg.WholeDigest != digestOf(data) || pg.MediaType != "application/json" {
			t.Fatalf("page %d metadata: %+v", i, pg)
		}
		if pg.ArtifactRef != pages[0].ArtifactRef || !strings.HasPrefix(pg.ArtifactRef, "libos-artifact:") {
			t.Fatalf("page %d artifact_ref %q (first %q)", i, pg.ArtifactRef, pages[0].ArtifactRef)
		}
		if pg.Length > pageBytes || pg.Length <= 0 {
			t.Fatalf("page %d length %d, page_bytes %d", i, pg.Length, pageBytes)
		}
		span := data[pg.Offset : pg.Offset+pg.Length]
		if pg.RangeDigest != digestOf(span) {
			t.Fatalf("page %d range_digest does not match bytes [%d,%d)", i, pg.Offset, pg.Offset+pg.Length)
		}
		// The span is whole records: it parses as the records of an array.
		var recs []map[string]any
		if err := json.Unmarshal(append(append([]byte("["), span...), ']'), &recs); err != nil || len(recs) != pg.RecordCount {
			t.Fatalf("page %d span is not %d whole records: %v", i, pg.RecordCount, err)
		}
		if int(recs[0]["id"].(float64)) != records {
			t.Fatalf("page %d starts at record %v, want %d", i, recs[0]["id"], records)
		}
		records += pg.RecordCount
		last := i == len(pages)-1
		if pg.EOF != last {
			t.Fatalf("page %d eof=%v", i, pg.EOF)
		}
		if last {
			if pg.NextOffset != int64(len(data)) {
				t.Fatalf("last page next_offset %d, want %d", pg.NextOffset, len(data))
			}
		} else if pg.NextOffset != pages[i+1].Offset || pg.NextOffset <= pg.Offset+pg.Length {
			t.Fatalf("page %d next_offset %d, next page at %d", i, pg.NextOffset, pages[i+1].Offset)
		}
		if want := []string{"label", "runx_page"}; strings.Join(pg.InputKeys, ",") != strings.Join(want, ",") {
			t.Fatalf("page %d input keys %v, want %v (path inputs removed)", i, pg.InputKeys, want)
		}
	}
	if records != 3000 {
		t.Fatalf("pages carried %d records, want 3000", records)
	}

	r := p.Run(context.Background(), pagedSpec(t, "totalPage", pageBytes),
		json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace","label":"march"}`), ws)
	if r.Err != nil {
		t.Fatalf("totalPage: %+v", r.Err)
	}
	var out struct {
		Count, Total  int
		Pages         []int
		WholeDigest   string `json:"whole_digest"`
		ArtifactBytes int    `json:"artifact_bytes"`
		Label         string
	}
	if err := json.Unmarshal(r.Output, &out); err != nil {
		t.Fatal(err)
	}
	if out.Count != 3000 || out.Total != total || len(out.Pages) != len(pages) || out.WholeDigest != digestOf(data) ||
		out.ArtifactBytes != len(data) || out.Label != "march" || r.Pages != len(pages) {
		t.Fatalf("totalPage output %s (Pages=%d), want count 3000, total %d over %d pages", r.Output, r.Pages, total, len(pages))
	}
	for i, n := range out.Pages {
		if n != pages[i].RecordCount {
			t.Fatalf("state recorded %d records for page %d, want %d", n, i, pages[i].RecordCount)
		}
	}
}

func TestPagedFailureReportsPageAndOffset(t *testing.T) {
	p := sharedPool(t)
	ws := t.TempDir()
	ledger(t, filepath.Join(ws, "data", "ledger.json"), 3000, func(i int) bool { return i == 2500 })
	pages := describe(t, p, ws, 40<<10)
	var failing *pageReport
	seen := 0
	for i := range pages {
		if seen+pages[i].RecordCount > 2500 {
			failing = &pages[i]
			break
		}
		seen += pages[i].RecordCount
	}
	if failing == nil || failing.PageIndex == 0 {
		t.Fatalf("record 2500 should be on a later page: %+v", failing)
	}
	r := p.Run(context.Background(), pagedSpec(t, "totalPage", 40<<10), json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace"}`), ws)
	wantFailure(t, r, CodeExecutionFailed,
		fmt.Sprintf("page %d at byte offset %d:", failing.PageIndex, failing.Offset), "record 2500 asked to fail")
	if r.Pages != failing.PageIndex+1 {
		t.Fatalf("Pages = %d, want %d", r.Pages, failing.PageIndex+1)
	}
}

func TestArtifactRefDiffersAcrossPools(t *testing.T) {
	ws := t.TempDir()
	ledger(t, filepath.Join(ws, "data", "ledger.json"), 1500, nil)
	a := newPool(t, PoolOptions{Workers: 1})
	b := newPool(t, PoolOptions{Workers: 1})
	pa, pb := describe(t, a, ws, 32<<10), describe(t, b, ws, 32<<10)
	if pa[0].ArtifactRef == pb[0].ArtifactRef {
		t.Fatalf("artifact_ref %q is the same in two pools", pa[0].ArtifactRef)
	}
	if pa[0].WholeDigest != pb[0].WholeDigest {
		t.Fatalf("whole_digest differs: %s vs %s", pa[0].WholeDigest, pb[0].WholeDigest)
	}
	// Within one pool the same bytes keep their reference.
	if again := describe(t, a, ws, 32<<10); again[0].ArtifactRef != pa[0].ArtifactRef {
		t.Fatalf("artifact_ref changed within a pool")
	}
	in := json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace"}`)
	ra := a.Run(context.Background(), pagedSpec(t, "totalPage", 32<<10), in, ws)
	rb := b.Run(context.Background(), pagedSpec(t, "totalPage", 32<<10), in, ws)
	if ra.Err != nil || rb.Err != nil || !bytes.Equal(ra.Output, rb.Output) {
		t.Fatalf("final outputs differ across pools:\n%s %+v\n%s %+v", ra.Output, ra.Err, rb.Output, rb.Err)
	}
}

func TestPagedDoneEndsEarly(t *testing.T) {
	p := sharedPool(t)
	ws := t.TempDir()
	ledger(t, filepath.Join(ws, "data", "ledger.json"), 3000, nil)
	pages := describe(t, p, ws, 40<<10)
	r := p.Run(context.Background(), pagedSpec(t, "totalPage", 40<<10),
		json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace","stop_after_pages":2}`), ws)
	want := fmt.Sprintf(`{"stopped":true,"count":%d,"total":%d}`, pages[0].RecordCount+pages[1].RecordCount, -1)
	var out struct {
		Stopped bool
		Count   int
	}
	if r.Err != nil || json.Unmarshal(r.Output, &out) != nil || !out.Stopped || out.Count != pages[0].RecordCount+pages[1].RecordCount || r.Pages != 2 {
		t.Fatalf("early stop: %s %+v pages=%d, want about %s", r.Output, r.Err, r.Pages, want)
	}
	if strings.Contains(string(r.Output), "runx_page") {
		t.Fatalf("final output keeps runx_page: %s", r.Output)
	}
}

func TestPagedResultRules(t *testing.T) {
	p := sharedPool(t)
	ws := t.TempDir()
	ledger(t, filepath.Join(ws, "data", "ledger.json"), 3000, nil)
	in := json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace"}`)
	wantFailure(t, p.Run(context.Background(), pagedSpec(t, "leaksDomainOutput", 40<<10), in, ws),
		CodeOutputRejected, "page 0 at byte offset 2:", "only {runx_page")
	wantFailure(t, p.Run(context.Background(), pagedSpec(t, "hugeState", 40<<10), in, ws),
		CodeResourceLimit, "page 0 at byte offset 2:", "continuation state", "2 MiB")
}

func TestPagedArtifactShapes(t *testing.T) {
	p := sharedPool(t)
	cases := []struct {
		name    string
		content string
		code    string
		parts   []string
		want    string
	}{
		{"empty array", " [ ] \n", "", nil, `{"count":0,"total":0,"pages":[0]}`},
		{"one record", `[{"id":1,"amount":5}]`, "", nil, `{"count":1,"total":5,"pages":[1]}`},
		{"not an array", `{"id":1}`, CodeInvalidRequest, []string{"does not start with a JSON array"}, ""},
		{"empty file", "", CodeInvalidRequest, []string{"empty"}, ""},
		{"trailing comma", `[{"id":1,"amount":1},]`, CodeInvalidRequest, []string{"trailing comma"}, ""},
		{"double comma", `[{"id":1,"amount":1},,{"id":2,"amount":1}]`, CodeInvalidRequest, []string{"missing"}, ""},
		{"unterminated", `[{"id":1,"amount":1}`, CodeInvalidRequest, []string{"not terminated"}, ""},
		{"data after the array", `[{"id":1,"amount":1}] x`, CodeInvalidRequest, []string{"after the JSON array"}, ""},
		{"invalid record", `[{"id":1,"amount":1}, {"id":2,"amount":}, 3]`, CodeInvalidRequest, []string{"record at byte offset 22 is not valid JSON"}, ""},
		{"invalid UTF-8", "[{\"id\":1,\"amount\":1,\"n\":\"\xff\"}]", CodeInvalidRequest, []string{"UTF-8"}, ""},
		{"brackets in strings", `[{"id":1,"amount":2,"s":"],[{\"x"}]`, "", nil, `{"count":1,"total":2,"pages":[1]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			writeFile(t, filepath.Join(ws, "data", "ledger.json"), tc.content)
			r := p.Run(context.Background(), pagedSpec(t, "totalPage", 0), json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace"}`), ws)
			if tc.code != "" {
				wantFailure(t, r, tc.code, tc.parts...)
				return
			}
			if r.Err != nil {
				t.Fatalf("%+v", r.Err)
			}
			var got map[string]any
			json.Unmarshal(r.Output, &got)
			delete(got, "whole_digest")
			delete(got, "artifact_bytes")
			delete(got, "label")
			g, _ := json.Marshal(got)
			var w map[string]any
			json.Unmarshal([]byte(tc.want), &w)
			e, _ := json.Marshal(w)
			if string(g) != string(e) {
				t.Fatalf("output %s, want %s", g, e)
			}
		})
	}
}

func TestPagedRecordTooLarge(t *testing.T) {
	p := sharedPool(t)
	ws := t.TempDir()
	big := strings.Repeat("z", 5000)
	writeFile(t, filepath.Join(ws, "data", "ledger.json"),
		`[{"id":0,"amount":1}, {"id":1,"amount":1,"big":"`+big+`"}, {"id":2,"amount":1}]`)
	r := p.Run(context.Background(), pagedSpec(t, "totalPage", 4096), json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace"}`), ws)
	wantFailure(t, r, CodeInvalidRequest, "page 1 at byte offset 22", "record at byte offset 22 is larger than a page (4096 bytes)")
	if r.Pages != 1 {
		t.Fatalf("Pages = %d, want 1 (the first page ran)", r.Pages)
	}
}

// TestPagedInputCeilingFramesFewerBytes checks that large inputs shrink the
// pages so that every call stays within the 4 MiB input limit, and that a
// record crowded out by inputs and state is reported as a resource limit.
func TestPagedInputCeilingFramesFewerBytes(t *testing.T) {
	// Megabytes of state and filler per call: a race-instrumented worker maps
	// shadow memory for every heap arena, which can exhaust the default
	// address-space headroom although the heap stays well under its limit.
	// This test is about page framing, so it gives the worker room.
	p := newPool(t, PoolOptions{Workers: 1, AddressSpace: 2 << 30})
	ws := t.TempDir()
	var b bytes.Buffer
	b.WriteString("[")
	for i := 0; i < 8; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%d,"amount":1,"pad":"%s"}`, i, strings.Repeat("p", 600<<10))
	}
	b.WriteString("]")
	writeFile(t, filepath.Join(ws, "data", "ledger.json"), b.String())
	pad := strings.Repeat("q", 5<<19)
	in := json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace","filler":"` + pad + `"}`)

	r := p.Run(context.Background(), pagedSpec(t, "totalPage", MaxPageBytes), in, ws)
	if r.Err != nil {
		t.Fatalf("%+v", r.Err)
	}
	var out struct {
		Count int
		Pages []int
	}
	json.Unmarshal(r.Output, &out)
	// 4 MiB minus 2.5 MiB of filler leaves room for two 600 KiB records per
	// call, encoded as strings (each '"' escaped), not for three.
	if out.Count != 8 || fmt.Sprint(out.Pages) != "[2 2 2 2]" {
		t.Fatalf("output %s: want 8 records on 4 pages of 2", r.Output)
	}

	spec := pagedSpec(t, "paddedState", MaxPageBytes)
	in = json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace","state_bytes":2090000,"filler":"` + strings.Repeat("q", 1500<<10) + `"}`)
	wantFailure(t, p.Run(context.Background(), spec, in, ws), CodeResourceLimit, "page 1 at byte offset", "fits page_bytes but not the 4194304-byte per-call input limit")
}

// TestPagedStrayCloserNamesPageAndOffset: a '}' where an element ends fails
// the run as invalid_request, naming the page and the byte, whatever the
// page size.
func TestPagedStrayCloserNamesPageAndOffset(t *testing.T) {
	p := sharedPool(t)
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "data", "ledger.json"), `[{"id":0,"amount":1},{"id":1,"amount":1}}{"id":2,"amount":1}]`)
	for _, tc := range []struct {
		pageBytes int
		page      string
	}{{24, "page 1 at byte offset 21"}, {1 << 20, "page 0 at byte offset 0"}} {
		r := p.Run(context.Background(), pagedSpec(t, "totalPage", tc.pageBytes), json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace"}`), ws)
		wantFailure(t, r, CodeInvalidRequest, tc.page, "at byte offset 40", "'}' after an array element")
	}
}

// TestPagedCallsStayWithinTheInputLimit: records that grow most when
// encoded as strings ("" becomes "\"\"", with its comma 7 bytes from 3)
// still leave every call within the 4 MiB input limit.
func TestPagedCallsStayWithinTheInputLimit(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1, AddressSpace: 2 << 30})
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "data", "ledger.json"), "["+strings.Repeat(`"",`, 200_000)+`""]`)
	in := json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace","filler":"` + strings.Repeat("q", 3<<20) + `"}`)
	r := p.Run(context.Background(), pagedSpec(t, "largestInput", MaxPageBytes), in, ws)
	if r.Err != nil {
		t.Fatalf("%+v", r.Err)
	}
	var out struct{ Largest, Pages int }
	if err := json.Unmarshal(r.Output, &out); err != nil {
		t.Fatal(err)
	}
	if out.Largest > MaxInputBytes || out.Pages < 2 {
		t.Fatalf("output %s: the largest call input is %d bytes over %d pages, want at most %d", r.Output, out.Largest, out.Pages, MaxInputBytes)
	}
}

// TestPagedOutputKeysKeepUnpairedSurrogates: the last page's output is
// written with its keys as the module made them.
func TestPagedOutputKeysKeepUnpairedSurrogates(t *testing.T) {
	p := sharedPool(t)
	ws := t.TempDir()
	ledger(t, filepath.Join(ws, "data", "ledger.json"), 50, nil)
	r := p.Run(context.Background(), pagedSpec(t, "surrogateKey", 1024), json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace"}`), ws)
	if r.Err != nil {
		t.Fatalf("%+v", r.Err)
	}
	if want := fmt.Sprintf("{\"\\ud800\":%d,\"\ufffd\":true}", r.Pages-1); r.Pages < 2 || string(r.Output) != want {
		t.Fatalf("output %s over %d pages, want %s", r.Output, r.Pages, want)
	}
}

func TestPagedPageLimit(t *testing.T) {
	p := sharedPool(t)
	ws := t.TempDir()
	var b bytes.Buffer
	b.WriteString("[")
	for i := 0; i <= MaxPages; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("1")
	}
	b.WriteString("]")
	writeFile(t, filepath.Join(ws, "data", "ledger.json"), b.String())
	spec := pagedSpec(t, "countOnly", 1)
	r := p.Run(context.Background(), spec, json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace"}`), ws)
	wantFailure(t, r, CodeResourceLimit, fmt.Sprintf("page %d at byte offset %d", MaxPages, 1+2*MaxPages), "more than 4096 pages")
	if r.Pages != MaxPages {
		t.Fatalf("Pages = %d, want %d", r.Pages, MaxPages)
	}
}

func TestPagedArtifactContainment(t *testing.T) {
	p := sharedPool(t)
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	ledger(t, filepath.Join(ws, "data", "ledger.json"), 10, nil)
	ledger(t, filepath.Join(ws, "other.json"), 10, nil)
	ledger(t, filepath.Join(base, "outside.json"), 10, nil)
	if err := os.Symlink(filepath.Join(base, "outside.json"), filepath.Join(ws, "data", "link.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(base, filepath.Join(ws, "escape_dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ledger.json", filepath.Join(ws, "data", "inside_link.json")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(ws, "data", "fifo.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := pagedSpec(t, "totalPage", 0)
	unscoped := pagedSpec(t, "totalPage", 0)
	unscoped.Pages.PathScopeFrom = ""
	cases := []struct {
		name   string
		spec   Spec
		inputs string
		ws     string
		parts  []string
	}{
		{"dot-dot out of the scope", spec, `{"ledger_file":"../other.json","ledger_base":"workspace"}`, ws, []string{"inputs.ledger_file", "../other.json"}},
		{"symbolic link out of the workspace", spec, `{"ledger_file":"data/link.json","ledger_base":"workspace"}`, ws, []string{"inputs.ledger_file", "link.json"}},
		{"absolute path outside the scope", spec, fmt.Sprintf(`{"ledger_file":%q,"ledger_base":"workspace"}`, filepath.Join(base, "outside.json")), ws, []string{"inputs.ledger_file", "outside"}},
		{"scope that is a folder, not runx's skill or workspace", spec, `{"ledger_file":"outside.json","ledger_base":".."}`, ws, []string{"inputs.ledger_base", `must be "skill" or "workspace"`}},
		{"path through a symbolic link out of the workspace", spec, `{"ledger_file":"escape_dir/outside.json","ledger_base":"workspace"}`, ws, []string{"inputs.ledger_file"}},
		{"missing path input", spec, `{"ledger_base":"data"}`, ws, []string{"inputs.ledger_file", "missing"}},
		{"missing scope input means the workspace", spec, `{"ledger_file":"ledger.json"}`, ws, []string{"inputs.ledger_file", "does not exist"}},
		{"path not a string", spec, `{"ledger_file":7,"ledger_base":"data"}`, ws, []string{"inputs.ledger_file", "string"}},
		{"missing file", spec, `{"ledger_file":"data/nope.json","ledger_base":"workspace"}`, ws, []string{"inputs.ledger_file", "does not exist"}},
		{"directory", spec, `{"ledger_file":"data","ledger_base":"workspace"}`, ws, []string{"not a regular file"}},
		{"fifo", spec, `{"ledger_file":"data/fifo.json","ledger_base":"workspace"}`, ws, []string{"not a regular file"}},
		{"reserved runx_page input", spec, `{"ledger_file":"data/ledger.json","ledger_base":"workspace","runx_page":1}`, ws, []string{"inputs.runx_page", "reserved"}},
		{"no workspace", spec, `{"ledger_file":"data/ledger.json","ledger_base":"workspace"}`, "", []string{"workspace"}},
		{"unscoped escape", unscoped, `{"ledger_file":"../outside.json"}`, ws, []string{"inputs.ledger_file"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantFailure(t, p.Run(context.Background(), tc.spec, json.RawMessage(tc.inputs), tc.ws), CodeInvalidRequest, tc.parts...)
		})
	}
	// Allowed forms: a link inside the scope, an absolute path inside the
	// scope, and an unscoped path resolved against the workspace.
	for _, in := range []struct {
		spec   Spec
		inputs string
	}{
		{spec, `{"ledger_file":"data/inside_link.json","ledger_base":"workspace"}`},
		{spec, fmt.Sprintf(`{"ledger_file":%q,"ledger_base":"workspace"}`, filepath.Join(ws, "data", "ledger.json"))},
		{unscoped, `{"ledger_file":"data/ledger.json"}`},
	} {
		r := p.Run(context.Background(), in.spec, json.RawMessage(in.inputs), ws)
		if r.Err != nil || !strings.Contains(string(r.Output), `"count":10`) {
			t.Fatalf("%s: %s %+v", in.inputs, r.Output, r.Err)
		}
	}
}

// TestSnapshotIsImmutable admits a file, rewrites the original, and reads
// the admitted bytes back.
func TestSnapshotIsImmutable(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.json")
	original := []byte(`[1,2,3]`)
	writeFile(t, path, string(original))
	src, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	snap, f := admitSnapshot(src, t.TempDir(), "f")
	src.Close()
	if f != nil {
		t.Fatal(f)
	}
	defer snap.file.Close()
	writeFile(t, path, `[9,9,9,9,9]`)
	got := make([]byte, snap.size)
	if _, err := snap.file.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, original) || snap.digest != digestOf(original) {
		t.Fatalf("snapshot = %q (%s), want %q", got, snap.digest, original)
	}
	entries, err := os.ReadDir(filepath.Dir(snap.file.Name()))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("the snapshot left %d files behind", len(entries))
	}
}

// TestPagedRecordThatFitsIsNotRefused: a record is measured as it is
// encoded, not by the worst case of its size, so a 1.8 MB record whose call
// input is far below 4 MiB runs on a 4 MiB page.
func TestPagedRecordThatFitsIsNotRefused(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1, AddressSpace: 2 << 30})
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "data", "ledger.json"), `["`+strings.Repeat("x", 1_797_500)+`"]`)
	r := p.Run(context.Background(), pagedSpec(t, "countOnly", MaxPageBytes), json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace"}`), ws)
	if r.Err != nil {
		t.Fatalf("%s: %s", r.Err.Code, r.Err.Message)
	}
	if string(r.Output) != `{"count":1}` || r.Pages != 1 {
		t.Fatalf("output %s over %d pages, want {\"count\":1} on one page", r.Output, r.Pages)
	}
}

// TestPagedInputFillsTheLimitExactly: a page whose call input is exactly
// 4 MiB runs; one byte more and its record is refused as a resource limit.
func TestPagedInputFillsTheLimitExactly(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1, AddressSpace: 2 << 30})
	in := json.RawMessage(`{"ledger_file":"data/ledger.json","ledger_base":"workspace"}`)
	// The artifact ["x…x"] (n x's) is one record of n+2 bytes at offset 1,
	// ending the array; the call's input is
	// {<meta>"\"x…x\""],"state":null}}: the path inputs are removed.
	ref := "libos-artifact:" + strings.Repeat("0", 32)
	digest := digestOf(nil)
	inputLen := func(n int) int {
		size := int64(n + 4)
		meta := pageMeta(nil, ref, "application/json", digest, size, 0, 1, size-2, size, true, digest)
		return len("{") + len(meta) + (n + 6) + len(`],"state":null}}`)
	}
	n := MaxInputBytes - inputLen(0)
	n -= inputLen(n) - MaxInputBytes
	if inputLen(n) != MaxInputBytes {
		t.Fatalf("inputLen(%d) = %d, want %d", n, inputLen(n), MaxInputBytes)
	}
	ws := t.TempDir()
	artifact := filepath.Join(ws, "data", "ledger.json")
	writeFile(t, artifact, `["`+strings.Repeat("x", n)+`"]`)
	r := p.Run(context.Background(), pagedSpec(t, "countOnly", MaxPageBytes), in, ws)
	if r.Err != nil {
		t.Fatalf("a %d-byte call input: %s: %s", MaxInputBytes, r.Err.Code, r.Err.Message)
	}
	if string(r.Output) != `{"count":1}` {
		t.Fatalf("output %s", r.Output)
	}
	writeFile(t, artifact, `["`+strings.Repeat("x", n+1)+`"]`)
	r = p.Run(context.Background(), pagedSpec(t, "countOnly", MaxPageBytes), in, ws)
	wantFailure(t, r, CodeResourceLimit, "page 0 at byte offset 0", "record at byte offset 1 fits page_bytes but not the 4194304-byte per-call input limit", fmt.Sprintf("encoded, the record is %d bytes", n+7))
}

// TestPageMetaLenAndEncodedStringLen: the sizes the framer budgets with are
// the sizes of what runPaged writes.
func TestPageMetaLenAndEncodedStringLen(t *testing.T) {
	ref, digest := "libos-artifact:"+strings.Repeat("a", 32), digestOf([]byte("x"))
	base := len(pageMeta(nil, ref, "text/x-\"q\"", digest, 7, 0, 0, 0, 0, true, digest))
	for _, tc := range []struct {
		index                int
		offset, length, next int64
		eof                  bool
	}{{0, 0, 0, 0, true}, {9, 10, 99, 100, false}, {4095, 123456789, 4 << 20, 536870912, false}, {10, 1, 0, 1, true}} {
		want := len(pageMeta(nil, ref, "text/x-\"q\"", digest, 7, tc.index, tc.offset, tc.length, tc.next, tc.eof, digest))
		if got := pageMetaLen(base, tc.index, tc.offset, tc.length, tc.next, tc.eof); got != want {
			t.Fatalf("pageMetaLen%+v = %d, want %d", tc, got, want)
		}
	}
	for _, rec := range []string{`1`, `""`, `"a\"b\\c"`, "{\n\t\"k\" :\r\n [1, \"é\"]}", `"\u0000"`} {
		if got, want := encodedStringLen([]byte(rec)), len(appendJSONString(nil, []byte(rec))); got != int64(want) {
			t.Fatalf("encodedStringLen(%q) = %d, want %d", rec, got, want)
		}
	}
}

// TestPageFramingByEncodedSize: with a fits limit, each page holds the
// records whose encoding fits, the next record opens the next page (its
// offset is the previous next_offset), and no page stops short.
func TestPageFramingByEncodedSize(t *testing.T) {
	data := []byte("[ \"ab\" , 1 ,\"c\\\"d\",{\"k\":[1,\n2]},\t\"\" ,7 ]")
	var all []json.RawMessage
	if err := json.Unmarshal(data, &all); err != nil {
		t.Fatal(err)
	}
	// Encoded, the records are 8, 3, 12, 17, 6 and 3 bytes.
	for limit := int64(17); limit <= 60; limit++ {
		fr := newArrayFramer(bytes.NewReader(data), int64(len(data)))
		fits := func(offset, length, next int64, eof bool, records int64) bool { return records <= limit }
		var got []json.RawMessage
		prevNext := int64(-1)
		for page := 0; ; page++ {
			pg, err := fr.nextPageFitting(MaxPageBytes, fits)
			if err != nil {
				t.Fatalf("limit %d page %d: %v", limit, page, err)
			}
			if prevNext >= 0 && pg.offset != prevNext {
				t.Fatalf("limit %d page %d starts at %d, previous next_offset %d", limit, page, pg.offset, prevNext)
			}
			prevNext = pg.next
			var recs []json.RawMessage
			if err := json.Unmarshal(append(append([]byte("["), pg.span...), ']'), &recs); err != nil {
				t.Fatalf("limit %d page %d: %q: %v", limit, page, pg.span, err)
			}
			enc := int64(len(recs) - 1)
			for _, r := range recs {
				enc += encodedStringLen(r)
			}
			if enc > limit {
				t.Fatalf("limit %d page %d: records encode to %d bytes", limit, page, enc)
			}
			got = append(got, recs...)
			if pg.eof {
				break
			}
			if more := enc + 1 + encodedStringLen(all[len(got)]); more <= limit {
				t.Fatalf("limit %d page %d stops short: the next record would make %d bytes", limit, page, more)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(all) {
			t.Fatalf("limit %d: records %s, want %s", limit, got, all)
		}
	}
	// Below the largest record's encoding (17 bytes for {"k":[1,\n2]}),
	// that record is refused where its page starts.
	fr := newArrayFramer(bytes.NewReader(data), int64(len(data)))
	fits := func(offset, length, next int64, eof bool, records int64) bool { return records <= 16 }
	for {
		_, err := fr.nextPageFitting(MaxPageBytes, fits)
		if err != nil {
			fe, ok := err.(*frameError)
			if !ok || !fe.overInput || fe.offset != 19 || fe.encoded != 17 {
				t.Fatalf("err = %#v, want the record at byte offset 19 refused as 17 bytes", err)
			}
			break
		}
	}
}
