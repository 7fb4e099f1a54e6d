package jsrunner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/libos/libos/skills/skillpkg"
)

// inputMember is one top-level member of the inputs object, in order.
type inputMember struct {
	key string
	raw json.RawMessage
}

func splitInputs(in []byte) ([]inputMember, *Failure) {
	dec := json.NewDecoder(bytes.NewReader(in))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, failf(CodeInvalidRequest, "inputs: must be a JSON object")
	}
	var members []inputMember
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, failf(CodeInvalidRequest, "inputs: %v", err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, failf(CodeInvalidRequest, "inputs.%s: %v", key, err)
		}
		if seen[key] {
			return nil, failf(CodeInvalidRequest, "inputs.%s: the name appears more than once", key)
		}
		seen[key] = true
		members = append(members, inputMember{key: key, raw: raw})
	}
	return members, nil
}

// pagedInputs separates the artifact path inputs from the rest and returns
// the invocation's inputs prefix: "{" plus the remaining members and a
// trailing comma when there are any.
func pagedInputs(in []byte, ps *PagesSpec) (prefix []byte, pathVal, scopeVal string, f *Failure) {
	members, f := splitInputs(in)
	if f != nil {
		return nil, "", "", f
	}
	var havePath, haveScope bool
	prefix = append(prefix, '{')
	for _, m := range members {
		switch m.key {
		case ps.PathFrom:
			if err := json.Unmarshal(m.raw, &pathVal); err != nil || pathVal == "" {
				return nil, "", "", failf(CodeInvalidRequest, "inputs.%s: must be a non-empty string path (pages.path_from)", m.key)
			}
			havePath = true
			continue
		case ps.PathScopeFrom:
			if ps.PathScopeFrom == "" {
				break
			}
			if err := json.Unmarshal(m.raw, &scopeVal); err != nil || scopeVal == "" {
				return nil, "", "", failf(CodeInvalidRequest, "inputs.%s: must be %q or %q (pages.path_scope_from)", m.key, ScopeSkill, ScopeWorkspace)
			}
			haveScope = true
			continue
		case "runx_page":
			return nil, "", "", failf(CodeInvalidRequest, "inputs.runx_page: the name is reserved for the page the runtime supplies")
		}
		key, _ := json.Marshal(m.key)
		prefix = append(prefix, key...)
		prefix = append(prefix, ':')
		prefix = append(prefix, m.raw...)
		prefix = append(prefix, ',')
	}
	if !havePath {
		return nil, "", "", failf(CodeInvalidRequest, "inputs.%s: the artifact path named by pages.path_from is missing", ps.PathFrom)
	}
	// An absent scope input means the workspace, runx's default scope.
	_ = haveScope
	return prefix, pathVal, scopeVal, nil
}

// relativeInside turns p into a path relative to the directory dir, refusing
// absolute paths outside it. Relative paths are returned as they are: the
// os.Root they are opened in refuses every escape, through ".." or a
// symbolic link.
func relativeInside(p, dir, field string) (string, *Failure) {
	if strings.ContainsRune(p, 0) {
		return "", failf(CodeInvalidRequest, "inputs.%s: the path contains a NUL byte", field)
	}
	if !filepath.IsAbs(p) {
		return p, nil
	}
	candidates := []string{dir}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		candidates = append(candidates, real)
	}
	for _, base := range candidates {
		rel, err := filepath.Rel(base, p)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return rel, nil
		}
	}
	return "", failf(CodeInvalidRequest, "inputs.%s: %q is outside %s", field, p, dir)
}

// The scopes path_scope_from may name, as runx defines them: the artifact
// path resolves inside the skill's package folder or inside the workspace.
const (
	ScopeSkill     = "skill"
	ScopeWorkspace = "workspace"
)

// openArtifact opens the artifact the inputs name, confined to its scope:
// the package folder for scope skill, else the workspace.
func openArtifact(workspace, pkgDir string, ps *PagesSpec, pathVal, scopeVal string) (*os.File, *Failure) {
	base, label := workspace, "workspace"
	switch scopeVal {
	case "", ScopeWorkspace:
		if workspace == "" {
			return nil, failf(CodeInvalidRequest, "workspace: required to resolve the artifact named by inputs.%s", ps.PathFrom)
		}
	case ScopeSkill:
		base, label = pkgDir, "skill package folder"
	default:
		return nil, failf(CodeInvalidRequest, "inputs.%s: must be %q or %q (pages.path_scope_from), got %q", ps.PathScopeFrom, ScopeSkill, ScopeWorkspace, scopeVal)
	}
	dir, err := filepath.Abs(base)
	if err != nil {
		return nil, failf(CodeInvalidRequest, "%s: %v", label, err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, failf(CodeInvalidRequest, "%s: %q cannot be opened: %v", label, base, err)
	}
	defer root.Close()
	rel, f := relativeInside(pathVal, dir, ps.PathFrom)
	if f != nil {
		return nil, f
	}
	file, err := skillpkg.OpenRegular(root.OpenFile, rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, failf(CodeInvalidRequest, "inputs.%s: %q does not exist", ps.PathFrom, pathVal)
	case errors.Is(err, skillpkg.ErrNotRegular):
		return nil, failf(CodeInvalidRequest, "inputs.%s: %q %v", ps.PathFrom, pathVal, err)
	case err != nil:
		return nil, failf(CodeInvalidRequest, "inputs.%s: %q cannot be opened inside its scope: %v", ps.PathFrom, pathVal, err)
	}
	info, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, failf(CodeInvalidRequest, "inputs.%s: stat %q: %v", ps.PathFrom, pathVal, err)
	}
	if info.Size() > MaxArtifactBytes {
		file.Close()
		return nil, failf(CodeInvalidRequest, "inputs.%s: the artifact is %d bytes, more than the %d-byte (512 MiB) admission limit", ps.PathFrom, info.Size(), MaxArtifactBytes)
	}
	return file, nil
}

// snapshot is an admitted artifact: a private, unlinked copy that nothing
// else can change, with the digest of exactly those bytes.
type snapshot struct {
	file   *os.File
	size   int64
	digest string // "sha256:<hex>"
}

func admitSnapshot(src *os.File, dir, field string) (*snapshot, *Failure) {
	tmp, err := os.CreateTemp(dir, "libos-artifact-*")
	if err != nil {
		return nil, failf(CodeInternalFailure, "create the artifact snapshot in %s: %v", dir, err)
	}
	// Unlinked at once: the copy lives only as long as the descriptor.
	_ = os.Remove(tmp.Name())
	h := sha256.New()
	buf := make([]byte, 1<<20)
	n, err := io.CopyBuffer(io.MultiWriter(tmp, h), io.LimitReader(src, MaxArtifactBytes+1), buf)
	if err != nil {
		tmp.Close()
		return nil, failf(CodeInternalFailure, "copy the artifact named by inputs.%s: %v", field, err)
	}
	if n > MaxArtifactBytes {
		tmp.Close()
		return nil, failf(CodeInvalidRequest, "inputs.%s: the artifact grew past the %d-byte (512 MiB) admission limit while it was admitted", field, MaxArtifactBytes)
	}
	return &snapshot{file: tmp, size: n, digest: "sha256:" + hex.EncodeToString(h.Sum(nil))}, nil
}

// pageMeta renders the runx_page members that precede records.
func pageMeta(dst []byte, ref, mediaType, digest string, size int64, index int, offset, length, next int64, eof bool, rangeDigest string) []byte {
	dst = append(dst, `"runx_page":{"artifact_ref":`...)
	dst = strconv.AppendQuote(dst, ref)
	dst = append(dst, `,"media_type":`...)
	mt, _ := json.Marshal(mediaType)
	dst = append(dst, mt...)
	dst = append(dst, `,"whole_digest":`...)
	dst = strconv.AppendQuote(dst, digest)
	dst = append(dst, `,"artifact_bytes":`...)
	dst = strconv.AppendInt(dst, size, 10)
	dst = append(dst, `,"page_index":`...)
	dst = strconv.AppendInt(dst, int64(index), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, offset, 10)
	dst = append(dst, `,"length":`...)
	dst = strconv.AppendInt(dst, length, 10)
	dst = append(dst, `,"next_offset":`...)
	dst = strconv.AppendInt(dst, next, 10)
	dst = append(dst, `,"eof":`...)
	dst = strconv.AppendBool(dst, eof)
	dst = append(dst, `,"range_digest":`...)
	dst = strconv.AppendQuote(dst, rangeDigest)
	dst = append(dst, `,"records":[`...)
	return dst
}

// pageControl is the runx_page value a paged call may return.
type pageControl struct {
	State json.RawMessage `json:"state"`
	Done  *bool           `json:"done"`
}

func (p *Pool) artifactRef(digest string) string {
	h := sha256.New()
	h.Write(p.instance[:])
	h.Write([]byte(digest))
	return "libos-artifact:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// runPaged admits the artifact and calls the export once per page,
// carrying the continuation state, until a call says done or the last page
// has been seen. Each call has the spec's wall limit.
func (p *Pool) runPaged(ctx context.Context, vs validatedSpec, c *call, in []byte, workspace string) Result {
	ps := vs.Pages
	prefix, pathVal, scopeVal, f := pagedInputs(in, ps)
	if f != nil {
		return Result{Err: f}
	}
	src, f := openArtifact(workspace, vs.Dir, ps, pathVal, scopeVal)
	if f != nil {
		return Result{Err: f}
	}
	snap, f := admitSnapshot(src, p.opts.SnapshotDir, ps.PathFrom)
	src.Close()
	if f != nil {
		return Result{Err: f}
	}
	defer snap.file.Close()

	ref := p.artifactRef(snap.digest)
	// The metadata of a page whose numbers all have one digit and whose eof
	// is true; pageMetaLen adds what a page's own numbers and eof add.
	metaBase := len(pageMeta(nil, ref, ps.MediaType, snap.digest, snap.size, 0, 0, 0, 0, true, snap.digest))
	framer := newArrayFramer(snap.file, snap.size)
	state := []byte("null")
	c.paged = true
	var buf []byte
	pages := 0
	for index := 0; ; index++ {
		at := framer.next
		if index >= MaxPages {
			return Result{Pages: pages, Err: failf(CodeResourceLimit, "page %d at byte offset %d: the run needs more than %d pages", index, at, MaxPages)}
		}
		// Everything in the call's input but the page's metadata and its
		// records: the inputs, the state and the closing bytes.
		fixed := int64(len(prefix) + len(`],"state":`) + len(state) + len(`}}`))
		if fixed+int64(metaBase) > MaxInputBytes {
			return Result{Pages: pages, Err: failf(CodeResourceLimit, "page %d at byte offset %d: the inputs and the %d-byte continuation state leave no room for records within the %d-byte per-call input limit", index, at, len(state), MaxInputBytes)}
		}
		// A page holds at most page_bytes of the artifact, and fewer only
		// when the call's exact input (records encoded as JSON strings,
		// page metadata with this page's own numbers) would pass the limit.
		fits := func(offset, length, next int64, eof bool, records int64) bool {
			return fixed+int64(pageMetaLen(metaBase, index, offset, length, next, eof))+records <= MaxInputBytes
		}
		page, err := framer.nextPageFitting(int64(vs.pageBytes), fits)
		if err != nil {
			return Result{Pages: pages, Err: p.framingFailure(err, index, at, vs.pageBytes, len(state))}
		}
		if !utf8.Valid(page.span) {
			return Result{Pages: pages, Err: failf(CodeInvalidRequest, "page %d at byte offset %d: the artifact is not valid UTF-8", index, page.offset)}
		}
		sum := sha256.Sum256(page.span)
		buf = append(buf[:0], prefix...)
		buf = pageMeta(buf, ref, ps.MediaType, snap.digest, snap.size, index, page.offset, page.length, page.next, page.eof, "sha256:"+hex.EncodeToString(sum[:]))
		arr := append(append([]byte{'['}, page.span...), ']')
		var records []json.RawMessage
		if !json.Valid(arr) || json.Unmarshal(arr, &records) != nil {
			bad, found := firstInvalidRecord(page.span, page.offset, json.Valid)
			if !found {
				bad = page.offset
			}
			return Result{Pages: pages, Err: failf(CodeInvalidRequest, "page %d at byte offset %d: the record at byte offset %d is not valid JSON", index, page.offset, bad)}
		}
		// Each record is its complete encoded text, as the contract says
		// and runx delivers: modules JSON.parse each one.
		for i, rec := range records {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendJSONString(buf, rec)
		}
		buf = append(buf, ']')
		buf = append(buf, `,"state":`...)
		buf = append(buf, state...)
		buf = append(buf, `}}`...)
		if len(buf) > MaxInputBytes {
			// fits measured every page with records exactly; this is an
			// empty array's page whose own numbers tipped the input over.
			return Result{Pages: pages, Err: failf(CodeResourceLimit, "page %d at byte offset %d: the inputs and the %d-byte continuation state leave no room for the page within the %d-byte per-call input limit (the call's input would be %d bytes)", index, page.offset, len(state), MaxInputBytes, len(buf))}
		}
		c.inputs = buf

		pages++
		r := p.invoke(ctx, c)
		if r.fail != nil {
			return Result{Pages: pages, Err: &Failure{Code: r.fail.Code, Message: fmt.Sprintf("page %d at byte offset %d: %s", index, page.offset, r.fail.Message)}}
		}
		where := fmt.Sprintf("page %d at byte offset %d", index, page.offset)
		if r.notObject {
			return Result{Pages: pages, Err: failf(CodeOutputRejected, "%s: a paged call must return an object", where)}
		}
		var ctl pageControl
		if r.hasControl {
			dec := json.NewDecoder(bytes.NewReader(r.control))
			dec.DisallowUnknownFields()
			if !bytes.HasPrefix(r.control, []byte("{")) || dec.Decode(&ctl) != nil {
				return Result{Pages: pages, Err: failf(CodeOutputRejected, "%s: result.runx_page must be an object with only state and done (a boolean)", where)}
			}
		}
		done := ctl.Done != nil && *ctl.Done
		if page.eof || done {
			return Result{Pages: pages, Output: json.RawMessage(r.output)}
		}
		switch {
		case r.otherKeys > 0:
			return Result{Pages: pages, Err: failf(CodeOutputRejected, "%s: an intermediate result may contain only {runx_page: {state, done}}; domain output belongs to the final call", where)}
		case !r.hasControl || ctl.State == nil:
			return Result{Pages: pages, Err: failf(CodeOutputRejected, "%s: an intermediate result must be {runx_page: {state, done?}} with state set", where)}
		case len(ctl.State) > MaxStateBytes:
			return Result{Pages: pages, Err: failf(CodeResourceLimit, "%s: the continuation state is %d bytes, more than the %d-byte (2 MiB) limit", where, len(ctl.State), MaxStateBytes)}
		}
		state = ctl.State
	}
}

// framingFailure explains why a page could not be framed.
func (p *Pool) framingFailure(err error, index int, at int64, pageBytes, stateLen int) *Failure {
	var fe *frameError
	if !errors.As(err, &fe) {
		return failf(CodeInternalFailure, "page %d at byte offset %d: %v", index, at, err)
	}
	if fe.overInput {
		return failf(CodeResourceLimit, "page %d at byte offset %d: the record at byte offset %d fits page_bytes but not the %d-byte per-call input limit next to the inputs and the %d-byte continuation state (encoded, the record is %d bytes)", index, at, fe.offset, MaxInputBytes, stateLen, fe.encoded)
	}
	if !fe.tooLarge {
		return failf(CodeInvalidRequest, "page %d at byte offset %d: the artifact is not a well-formed JSON array: %v", index, at, fe)
	}
	return failf(CodeInvalidRequest, "page %d at byte offset %d: the record at byte offset %d is larger than a page (%d bytes) and cannot be framed", index, at, fe.offset, pageBytes)
}

// pageMetaLen is len(pageMeta(...)) for a page with these numbers and eof,
// given base, the length with every number one digit long and eof true.
func pageMetaLen(base, index int, offset, length, next int64, eof bool) int {
	n := base + decimalDigits(int64(index)) + decimalDigits(offset) + decimalDigits(length) + decimalDigits(next) - 4
	if !eof {
		n++ // "false" is a byte longer than "true"
	}
	return n
}

func decimalDigits(n int64) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

// encodedStringLen is len(appendJSONString(nil, b)): the size of a record in
// a call's input.
func encodedStringLen(b []byte) int64 {
	n := int64(len(b)) + 2
	for _, c := range b {
		switch c {
		case '"', '\\', '\n', '\r', '\t':
			n++
		}
	}
	return n
}

// appendJSONString appends b as a JSON string literal. b is valid UTF-8
// JSON text, so only '"', '\\' and the control characters JSON text may
// hold between tokens need escaping; encodedStringLen counts the same.
func appendJSONString(dst, b []byte) []byte {
	dst = append(dst, '"')
	for _, c := range b {
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
