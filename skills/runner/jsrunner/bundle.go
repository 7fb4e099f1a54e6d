package jsrunner

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/evanw/esbuild/pkg/api"
)

// bundleNamespace is the esbuild namespace of package files: esbuild never
// reads them from disk itself, every byte comes through the package root.
const bundleNamespace = "libos-package"

// bundleFormatVersion is mixed into every graph hash so that a change of the
// bundling options invalidates what workers have compiled.
const bundleFormatVersion = "libos-jsrunner-bundle-v3"

// hostBundleCache bounds the entry modules whose bundles the host keeps.
const hostBundleCache = 256

// bundle is an entry module's graph compiled into one script.
type bundle struct {
	// hash is the content hash of the module graph: the entry, every file's
	// path and bytes, and the bundling options.
	hash string
	code []byte
	// files lists the graph with each file's SHA-256, to tell whether a
	// cached bundle still matches the package on disk.
	files []graphFile
}

type graphFile struct {
	rel    string
	digest [sha256.Size]byte
	// stamp was taken before the content was read, so a later write always
	// shows as a different (or racy) stamp.
	stamp fileStamp
}

type bundleKey struct {
	dir    string // the package folder as an absolute path
	module string
}

// bundleCache holds bundles keyed by entry module. A hit is served only
// while every file of its graph still has the content it was built from:
// either no change has been reported for the graph since a full check (see
// graphWatch), or the full check (graphUnchanged) passes again. It is safe
// for concurrent use.
type bundleCache struct {
	mu      sync.Mutex
	entries map[bundleKey]*list.Element
	lru     *list.List // of *bundleCacheEntry
	watch   *graphWatch
}

type bundleCacheEntry struct {
	key  bundleKey
	b    *bundle
	deps *watchDeps // nil: not trusted without a full check
}

func newBundleCache() *bundleCache {
	return &bundleCache{entries: make(map[bundleKey]*list.Element), lru: list.New(), watch: newGraphWatch()}
}

func (c *bundleCache) close() { c.watch.close() }

// get returns the bundle of dir/module, building it when the cache has no
// current one. warm reports a cache hit.
func (c *bundleCache) get(dir, module string) (b *bundle, warm bool, fail *Failure) {
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return nil, false, failf(CodeInvalidRequest, "spec.Dir: %v", err)
	}
	key := bundleKey{dir: absDir, module: module}
	c.mu.Lock()
	var (
		cached *bundle
		deps   *watchDeps
	)
	if el, ok := c.entries[key]; ok {
		c.lru.MoveToFront(el)
		e := el.Value.(*bundleCacheEntry)
		cached, deps = e.b, e.deps
	}
	c.mu.Unlock()
	if cached != nil {
		if c.watch.trusted(deps) {
			return cached, true, nil
		}
		if b, deps := c.check(absDir, cached); b != nil {
			c.store(key, b, deps)
			return b, true, nil
		}
	}

	b, fail = bundleFromDir(absDir, module)
	if fail != nil {
		return nil, false, fail
	}
	if checked, deps := c.check(absDir, b); checked != nil {
		c.store(key, checked, deps)
		return checked, false, nil
	}
	// Changed while it was being built: serve what was read, trust nothing.
	c.store(key, b, nil)
	return b, false, nil
}

// check runs the full check of b's graph, arming the watch first so that a
// change after the check cannot go unreported. It returns the bundle to
// serve (b, or b with fresher stamps) and what it may be trusted on, or nil
// when the graph changed.
func (c *bundleCache) check(absDir string, b *bundle) (*bundle, *watchDeps) {
	deps := c.watch.arm(absDir, b.files)
	ok, refreshed := graphUnchanged(absDir, b)
	if !ok {
		return nil, nil
	}
	if refreshed != nil {
		b = refreshed
	}
	return b, deps
}

// CheckModule builds the module graph of module in the package folder dir
// exactly as Run does before its first call (the same spec rules, resolver
// and bundler), without starting a worker or running any code. It returns
// nil when Run would accept the graph, and otherwise the Failure Run would
// report: module_rejected, naming the import, for a graph that leaves the
// package. Admission uses it so that a package is refused on the same terms
// as a run.
func CheckModule(dir, module string) *Failure {
	vs, fail := validateSpec(Spec{Dir: dir, Module: module})
	if fail != nil {
		return fail
	}
	absDir, err := filepath.Abs(vs.Dir)
	if err != nil {
		return failf(CodeInvalidRequest, "spec.Dir: %v", err)
	}
	_, fail = bundleFromDir(absDir, vs.module)
	return fail
}

// ModuleGraph returns the package-relative paths of every file in the
// module graph of module (the entry included), built as CheckModule builds
// it, or the Failure a run would report.
func ModuleGraph(dir, module string) ([]string, *Failure) {
	vs, fail := validateSpec(Spec{Dir: dir, Module: module})
	if fail != nil {
		return nil, fail
	}
	absDir, err := filepath.Abs(vs.Dir)
	if err != nil {
		return nil, failf(CodeInvalidRequest, "spec.Dir: %v", err)
	}
	b, fail := bundleFromDir(absDir, vs.module)
	if fail != nil {
		return nil, fail
	}
	out := make([]string, len(b.files))
	for i, f := range b.files {
		out[i] = path.Clean(f.rel)
	}
	return out, nil
}

// bundleFromDir bundles module from the package folder absDir, reading every
// file through an os.Root of the folder with symlinks resolved.
func bundleFromDir(absDir, module string) (*bundle, *Failure) {
	realDir, err := filepath.EvalSymlinks(absDir)
	if err != nil {
		return nil, failf(CodeInvalidRequest, "spec.Dir: %v", err)
	}
	root, err := os.OpenRoot(realDir)
	if err != nil {
		return nil, failf(CodeInvalidRequest, "spec.Dir: the package folder cannot be opened: %v", err)
	}
	defer root.Close()
	return buildBundle(root, absDir, realDir, module)
}

func (c *bundleCache) store(key bundleKey, b *bundle, deps *watchDeps) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		e := el.Value.(*bundleCacheEntry)
		e.b, e.deps = b, deps
		c.lru.MoveToFront(el)
		return
	}
	c.entries[key] = c.lru.PushFront(&bundleCacheEntry{key: key, b: b, deps: deps})
	for c.lru.Len() > hostBundleCache {
		last := c.lru.Back()
		c.lru.Remove(last)
		delete(c.entries, last.Value.(*bundleCacheEntry).key)
	}
}

// graphUnchanged tells whether every file of b's graph still has the
// content b was built from. A file whose stamp is unchanged and was taken
// well after its last change is trusted without reading it; otherwise its
// content is re-hashed through the package root (which also refuses a file
// that became a link out of the package). When re-hashing found the same
// content, refreshed carries fresh stamps so later calls skip the read.
func graphUnchanged(absDir string, b *bundle) (ok bool, refreshed *bundle) {
	var root *os.Root
	defer func() {
		if root != nil {
			root.Close()
		}
	}()
	var files []graphFile
	for i, f := range b.files {
		now, found := stampOf(filepath.Join(absDir, filepath.FromSlash(f.rel)))
		if !found || !now.sameFile(f.stamp) {
			return false, nil
		}
		if !f.stamp.racy() {
			continue
		}
		if root == nil {
			real, err := filepath.EvalSymlinks(absDir)
			if err != nil {
				return false, nil
			}
			if root, err = os.OpenRoot(real); err != nil {
				return false, nil
			}
		}
		data, err := root.ReadFile(f.rel)
		if err != nil || sha256.Sum256(data) != f.digest {
			return false, nil
		}
		if files == nil {
			files = slices.Clone(b.files)
		}
		// The stamp was taken before this read, so it can only under-claim.
		files[i].stamp = now
	}
	if files == nil {
		return true, nil
	}
	nb := *b
	nb.files = files
	return true, &nb
}

// buildBundle bundles the module graph of module into a script that
// assigns the entry's exports to bundleGlobal. Every import is resolved by
// the package resolver below; nothing outside the package is ever read.
func buildBundle(root *os.Root, absDir, realDir, module string) (*bundle, *Failure) {
	info, err := root.Stat(module)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, failf(CodeModuleRejected, "module %q does not exist in the package", module)
	case err != nil:
		return nil, failf(CodeModuleRejected, "module %q cannot be read inside the package: %v", module, err)
	case !info.Mode().IsRegular():
		return nil, failf(CodeModuleRejected, "module %q is not a regular file", module)
	}

	// The ES module output wrapped in a function that returns an object of
	// getters is the cheapest form to evaluate: esbuild's IIFE output builds
	// the exports object with helpers (__toCommonJS, __copyProps) that make
	// every call's fresh engine create the Object statics and the array
	// iterator machinery, several times the cost of a small export itself.
	// The IIFE remains for an export list this wrapper does not recognise.
	g := &graphLoader{root: root, dir: absDir}
	result := api.Build(bundleOptions(g, realDir, module, api.FormatESModule))
	if len(result.Errors) > 0 {
		return nil, &Failure{Code: CodeModuleRejected, Message: describeBuildErrors(result.Errors)}
	}
	if len(result.OutputFiles) != 1 {
		return nil, failf(CodeInternalFailure, "bundling %q produced %d outputs, want 1", module, len(result.OutputFiles))
	}
	code, ok := esmAsScript(result.OutputFiles[0].Contents, result.Metafile)
	if !ok {
		g = &graphLoader{root: root, dir: absDir}
		result = api.Build(bundleOptions(g, realDir, module, api.FormatIIFE))
		if len(result.Errors) > 0 {
			return nil, &Failure{Code: CodeModuleRejected, Message: describeBuildErrors(result.Errors)}
		}
		if len(result.OutputFiles) != 1 {
			return nil, failf(CodeInternalFailure, "bundling %q produced %d outputs, want 1", module, len(result.OutputFiles))
		}
		code = result.OutputFiles[0].Contents
	}
	files := g.graph()
	h := sha256.New()
	h.Write([]byte(bundleFormatVersion))
	h.Write([]byte{0})
	h.Write([]byte(module))
	h.Write([]byte{0})
	for _, f := range files {
		h.Write([]byte(f.rel))
		h.Write([]byte{0})
		h.Write(f.digest[:])
	}
	return &bundle{
		hash:  hex.EncodeToString(h.Sum(nil)),
		code:  withoutRequireShim(code),
		files: files,
	}, nil
}

func bundleOptions(g *graphLoader, realDir, module string, format api.Format) api.BuildOptions {
	opts := api.BuildOptions{
		EntryPoints: []string{module},
		Bundle:      true,
		Write:       false,
		Format:      format,
		Platform:    api.PlatformNeutral,
		Target:      api.ESNext,
		// Top-level await and import.meta are refused and emptied as the
		// IIFE format does, so both formats accept the same modules.
		Supported:     map[string]bool{"async-generator": false, "for-await": false, "top-level-await": false, "import-meta": false},
		Charset:       api.CharsetUTF8,
		LegalComments: api.LegalCommentsNone,
		// An inline map lets error positions name the author's files and lines.
		Sourcemap:      api.SourceMapInline,
		SourcesContent: api.SourcesContentExclude,
		AbsWorkingDir:  realDir,
		LogLevel:       api.LogLevelSilent,
		LogOverride: map[string]api.LogLevel{
			// A computed import() or require() would escape the resolver
			// below; refuse it at build time instead of failing later.
			"unsupported-dynamic-import": api.LogLevelError,
			"unsupported-require-call":   api.LogLevelError,
		},
		Plugins: []api.Plugin{{Name: "libos-package", Setup: g.setup}},
	}
	if format == api.FormatIIFE {
		opts.GlobalName = bundleGlobal
	} else {
		// The banner is part of the output the source map describes, so
		// positions stay right; the arrow function keeps the module scope
		// private and top-level this is already replaced by esbuild.
		opts.Banner = map[string]string{"js": "var " + bundleGlobal + " = (() => {"}
		opts.Metafile = true
	}
	return opts
}

// exportClause is the export statement esbuild ends an ES module bundle
// with (before the source map comment).
var exportClause = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`\nexport \{\n((?:  [^\n]*\n)*)\};\n`)
})

// exportItem is one entry of the clause: a local binding and, if it differs,
// the exported name as an identifier or a plain double-quoted string.
var exportItem = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^  ([A-Za-z_$][A-Za-z0-9_$]*)(?: as ([A-Za-z_$][A-Za-z0-9_$]*|"[^"\\]*"))?,?$`)
})

// esmAsScript turns esbuild's ES module bundle (opened by the banner) into a
// script: the final export clause becomes the return of an object with one
// getter per export, so exports stay live bindings as in a module namespace.
// ok is false when the clause is not exactly the one the metafile lists.
func esmAsScript(code []byte, metafile string) (out []byte, ok bool) {
	var meta struct {
		Outputs map[string]struct {
			Exports []string `json:"exports"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal([]byte(metafile), &meta); err != nil || len(meta.Outputs) != 1 {
		return nil, false
	}
	var exports []string
	for _, o := range meta.Outputs {
		exports = o.Exports
	}
	mapAt := bytes.LastIndex(code, []byte("\n//# sourceMappingURL="))
	if mapAt < 0 {
		return nil, false
	}
	body, tail := code[:mapAt+1], code[mapAt+1:]
	ret := []byte("return {")
	if len(exports) > 0 {
		loc := exportClause().FindSubmatchIndex(body)
		if loc == nil || loc[1] != len(body) {
			return nil, false
		}
		items := strings.Split(strings.TrimSuffix(string(body[loc[2]:loc[3]]), "\n"), "\n")
		if len(items) != len(exports) {
			return nil, false
		}
		for i, item := range items {
			m := exportItem().FindStringSubmatch(item)
			if m == nil {
				return nil, false
			}
			local, name := m[1], m[2]
			if name == "" {
				name = local
			}
			if strings.Trim(name, `"`) != exports[i] {
				return nil, false
			}
			if i > 0 {
				ret = append(ret, ',')
			}
			ret = fmt.Appendf(ret, "\n  get %s() { return %s; }", name, local)
		}
		body = body[:loc[0]+1]
	}
	ret = append(ret, "\n};\n})();\n"...)
	out = make([]byte, 0, len(body)+len(ret)+len(tail))
	return append(append(append(out, body...), ret...), tail...), true
}

// requireShim matches the __require helper esbuild emits when a module
// mentions require (typeof require). Every require() call is refused at
// build, so the helper can serve only to make typeof require read
// "function"; runx's worker has no require, so it is replaced with
// undefined, keeping the line count so that source positions hold.
// Compiled on first use: compiling at package init taxes every libos start.
var requireShim = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?s)var __require = /\* @__PURE__ \*/ \(\(x\) => typeof require !== "undefined".*?is not supported'\);\n\s*\}\);`)
})

func withoutRequireShim(code []byte) []byte {
	return requireShim().ReplaceAllFunc(code, func(m []byte) []byte {
		return append([]byte("var __require = void 0;"), bytes.Repeat([]byte("\n"), bytes.Count(m, []byte("\n")))...)
	})
}

func describeBuildErrors(msgs []api.Message) string {
	parts := make([]string, 0, len(msgs))
	for i, m := range msgs {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(msgs)-i))
			break
		}
		s := m.Text
		if m.Location != nil {
			file := strings.TrimPrefix(m.Location.File, bundleNamespace+":")
			s = fmt.Sprintf("%s:%d:%d: %s", file, m.Location.Line, m.Location.Column+1, m.Text)
		}
		parts = append(parts, s)
	}
	return "module graph refused: " + strings.Join(parts, "; ")
}

// graphLoader resolves and loads package files for esbuild and records
// what it read. esbuild calls the callbacks concurrently.
type graphLoader struct {
	root  *os.Root
	dir   string // the package folder as the caller named it, for stamps
	mu    sync.Mutex
	files map[string]graphFile
}

func (g *graphLoader) graph() []graphFile {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]graphFile, 0, len(g.files))
	for _, f := range g.files {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out
}

func (g *graphLoader) setup(b api.PluginBuild) {
	b.OnResolve(api.OnResolveOptions{Filter: ".*"}, g.resolve)
	b.OnLoad(api.OnLoadOptions{Filter: ".*", Namespace: bundleNamespace}, g.load)
}

func refuseImport(format string, args ...any) (api.OnResolveResult, error) {
	return api.OnResolveResult{Errors: []api.Message{{Text: fmt.Sprintf(format, args...)}}}, nil
}

func (g *graphLoader) resolve(args api.OnResolveArgs) (api.OnResolveResult, error) {
	spec := args.Path
	switch args.Kind {
	case api.ResolveEntryPoint:
		return api.OnResolveResult{Path: spec, Namespace: bundleNamespace}, nil
	case api.ResolveJSImportStatement:
	case api.ResolveJSDynamicImport:
		return refuseImport("dynamic import(%q) is refused: only static imports of package files are allowed", spec)
	case api.ResolveJSRequireCall, api.ResolveJSRequireResolve:
		return refuseImport("require(%q) is refused: modules use static import statements", spec)
	default:
		return refuseImport("import %q of this kind is refused", spec)
	}
	switch {
	case strings.HasPrefix(spec, "node:"):
		return refuseImport("import %q is refused: Node built-in modules are not available", spec)
	case hasURLScheme(spec):
		return refuseImport("import %q is refused: URL imports are not allowed", spec)
	case strings.HasPrefix(spec, "/") || filepath.IsAbs(spec):
		return refuseImport("import %q is refused: absolute paths are not allowed, use a relative path inside the package", spec)
	case !strings.HasPrefix(spec, "./") && !strings.HasPrefix(spec, "../"):
		return refuseImport("import %q is refused: bare specifiers (packages) are not allowed, use a relative path inside the package", spec)
	case strings.ContainsAny(spec, "\\\x00?#"):
		return refuseImport("import %q is refused: the path must be a plain slash-separated file path", spec)
	}
	importerDir := path.Dir(args.Importer)
	if args.Namespace != bundleNamespace {
		return refuseImport("import %q is refused: its importer is not a package file", spec)
	}
	rel := path.Join(importerDir, spec)
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return refuseImport("import %q from %s is refused: it escapes the package folder", spec, args.Importer)
	}
	switch path.Ext(rel) {
	case ".mjs", ".js", ".json":
	default:
		return refuseImport("import %q is refused: a package import must name a .mjs, .js or .json file", spec)
	}
	info, err := g.root.Stat(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return refuseImport("import %q from %s: %s does not exist in the package", spec, args.Importer, rel)
		}
		return refuseImport("import %q from %s is refused: %s cannot be opened inside the package (%v)", spec, args.Importer, rel, err)
	}
	if !info.Mode().IsRegular() {
		return refuseImport("import %q is refused: %s is not a regular file", spec, rel)
	}
	return api.OnResolveResult{Path: rel, Namespace: bundleNamespace}, nil
}

func hasURLScheme(spec string) bool {
	i := strings.IndexByte(spec, ':')
	if i <= 0 {
		return false
	}
	for _, r := range spec[:i] {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

func (g *graphLoader) load(args api.OnLoadArgs) (api.OnLoadResult, error) {
	stamp, _ := stampOf(filepath.Join(g.dir, filepath.FromSlash(args.Path)))
	// os.Root refuses any path, symbolic link included, that leaves the package.
	// Refuse an oversized source before reading it: runx keeps a module
	// over 4 MiB out of the engine.
	if info, err := g.root.Stat(args.Path); err == nil && info.Size() > MaxSourceBytes {
		return api.OnLoadResult{Errors: []api.Message{{Text: fmt.Sprintf("%s is %d bytes, more than the %d-byte (4 MiB) source limit", args.Path, info.Size(), MaxSourceBytes)}}}, nil
	}
	data, err := g.root.ReadFile(args.Path)
	if err != nil {
		return api.OnLoadResult{Errors: []api.Message{{Text: fmt.Sprintf("%s cannot be read inside the package: %v", args.Path, err)}}}, nil
	}
	if len(data) > MaxSourceBytes {
		return api.OnLoadResult{Errors: []api.Message{{Text: fmt.Sprintf("%s is more than the %d-byte (4 MiB) source limit", args.Path, MaxSourceBytes)}}}, nil
	}
	g.mu.Lock()
	if g.files == nil {
		g.files = make(map[string]graphFile)
	}
	g.files[args.Path] = graphFile{rel: args.Path, digest: sha256.Sum256(data), stamp: stamp}
	g.mu.Unlock()
	loader := api.LoaderJS
	if path.Ext(args.Path) == ".json" {
		loader = api.LoaderJSON
	}
	contents := string(data)
	return api.OnLoadResult{Contents: &contents, Loader: loader}, nil
}
