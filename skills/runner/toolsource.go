package runner

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/libos/libos/skills/skillpkg"
)

// maxToolSourceBytes bounds one JavaScript file read to follow a bundled
// tool's imports. It is far above a hand-written script, and still leaves
// room for a bundled build of one.
const maxToolSourceBytes = 32 << 20

// localSourceExts are the extensions that make a bare argument ("run.mjs",
// "main.py") name a package file, as runx reads a tool's argv.
var localSourceExts = []string{".js", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts", ".py", ".rb", ".sh", ".wasm"}

// toolSources binds the static local source closure of a bundled cli-tool,
// as runx's admission does: a relative command path, and every argument
// that names a package file ("./x", "../x", or a source file name), must
// exist in the package, resolved from the tool's folder; the JavaScript
// files among them are followed through their relative import, export-from
// and require specifiers, each of which must resolve to a package file,
// or else name a Node built-in (a bare package name, an absolute path or a
// URL is refused: its code would run unbound); and a tool run by node may
// not reach uncompiled TypeScript. It returns the closure's
// package-relative paths. A refusal is a *skillpkg.AdmissionError naming
// the tool, its manifest, the file and the specifier.
func toolSources(root *os.Root, t *skillpkg.Tool) ([]string, error) {
	r := t.Runner
	manifest := t.Dir + "/" + skillpkg.ToolManifestFile
	refuse := func(field, format string, args ...any) error {
		return &skillpkg.AdmissionError{File: manifest, Field: t.RunnerField + "." + field,
			Rule: fmt.Sprintf("bundled tool %s: ", t.Name) + fmt.Sprintf(format, args...)}
	}
	node := isNodeCommand(r.Command)
	var files, queue []string
	seen := map[string]bool{}
	add := func(rel string) {
		if !seen[rel] {
			seen[rel] = true
			files = append(files, rel)
			if isJavaScriptSource(rel) {
				queue = append(queue, rel)
			}
		}
	}

	type entry struct{ field, value string }
	var entries []entry
	// A command without a slash is looked up in PATH; with one it is a path
	// the runner resolves from the tool's folder.
	if strings.Contains(r.Command, "/") && !path.IsAbs(r.Command) {
		entries = append(entries, entry{"command", r.Command})
	}
	for i, a := range r.Args {
		if namesLocalFile(a) {
			entries = append(entries, entry{fmt.Sprintf("args[%d]", i), a})
		}
	}
	for _, e := range entries {
		rel := path.Join(r.Base, e.value)
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return nil, refuse(e.field, "%s resolves outside the package", e.value)
		}
		if node && isTypeScriptSource(rel) {
			return nil, refuse(e.field, "%s is uncompiled TypeScript, which node does not run; declare its compiled .js or .mjs entrypoint", rel)
		}
		switch kind, err := statFile(root, rel); {
		case err != nil:
			return nil, refuse(e.field, "%s names %s, which cannot be read inside the package: %v", e.value, rel, err)
		case kind == fileMissing:
			return nil, refuse(e.field, "%s names %s, which does not exist in the package", e.value, rel)
		case kind == fileOther:
			return nil, refuse(e.field, "%s names %s, which is not a regular file", e.value, rel)
		}
		add(rel)
	}

	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]
		src, err := readToolSource(root, file)
		if err != nil {
			return nil, &skillpkg.AdmissionError{File: file, Rule: fmt.Sprintf("a source of bundled tool %s %v", t.Name, err)}
		}
		imports, err := scanImports(src)
		if err != nil {
			return nil, &skillpkg.AdmissionError{File: file, Rule: fmt.Sprintf("a source of bundled tool %s cannot be read for its imports: %v", t.Name, err)}
		}
		for _, imp := range imports {
			fail := func(format string, args ...any) error {
				return &skillpkg.AdmissionError{File: file, Line: imp.line,
					Rule: fmt.Sprintf("%s %q of bundled tool %s (%s) ", imp.kind, imp.spec, t.Name, manifest) + fmt.Sprintf(format, args...)}
			}
			if imp.escaped {
				return nil, fail("uses a string escape; write the path plainly so that admission can follow it")
			}
			// As runx binds the closure: only Node built-ins and package
			// files, so that what admission binds is all the tool runs.
			switch {
			case strings.HasPrefix(imp.spec, "./"), strings.HasPrefix(imp.spec, "../"):
			case isNodeBuiltin(imp.spec):
				continue
			case imp.spec == ".", imp.spec == "..":
				return nil, fail("names a folder, which admission does not resolve; %s", toolImportRule)
			case strings.HasPrefix(imp.spec, "/"), strings.Contains(imp.spec, ":"):
				return nil, fail("is an absolute path or URL, outside the package's source closure; %s", toolImportRule)
			default:
				return nil, fail("is a bare specifier, which Node resolves from installed packages (node_modules) or package.json, outside the package's source closure; %s", toolImportRule)
			}
			if strings.ContainsAny(imp.spec, "?#") {
				// An ES module import reads them as a URL's query or
				// fragment, so Node would load another file than the one
				// bound; runx refuses them too.
				return nil, fail("holds ? or #, which Node may read as a URL query or fragment; write the plain relative path of the file")
			}
			rel := path.Join(path.Dir(file), imp.spec)
			if rel == ".." || strings.HasPrefix(rel, "../") {
				return nil, fail("resolves outside the package")
			}
			found, err := resolveImport(root, rel, imp.kind == "require")
			if err != nil {
				return nil, fail("resolves to %s, which cannot be read inside the package: %v", rel, err)
			}
			if found == "" {
				return nil, fail("resolves to %s, which does not exist in the package", rel)
			}
			if node && isTypeScriptSource(found) {
				return nil, fail("resolves to uncompiled TypeScript (%s), which node does not run; import its compiled .js or .mjs file", found)
			}
			add(found)
		}
	}
	return files, nil
}

// toolImportRule is what a bundled tool's source may import.
const toolImportRule = `a bundled tool may import only Node built-ins ("node:fs") and package files by a relative path ("./lib.mjs")`

// nodeBuiltins are the modules Node (20) loads by bare name ahead of any
// installed package. Those it loads only as node:<name> (node:test,
// node:sqlite, node:sea) are left out: by bare name Node looks them up
// among installed packages. A list, not a map, costs nothing at start-up.
var nodeBuiltins = []string{
	"_http_agent", "_http_client", "_http_common", "_http_incoming", "_http_outgoing", "_http_server",
	"_stream_duplex", "_stream_passthrough", "_stream_readable", "_stream_transform", "_stream_wrap", "_stream_writable",
	"_tls_common", "_tls_wrap", "assert", "assert/strict", "async_hooks", "buffer", "child_process", "cluster",
	"console", "constants", "crypto", "dgram", "diagnostics_channel", "dns", "dns/promises", "domain", "events",
	"fs", "fs/promises", "http", "http2", "https", "inspector", "inspector/promises", "module", "net", "os",
	"path", "path/posix", "path/win32", "perf_hooks", "process", "punycode", "querystring", "readline",
	"readline/promises", "repl", "stream", "stream/consumers", "stream/promises", "stream/web", "string_decoder",
	"sys", "timers", "timers/promises", "tls", "trace_events", "tty", "url", "util", "util/types", "v8", "vm",
	"wasi", "worker_threads", "zlib",
}

// isNodeBuiltin reports whether an import specifier names a Node built-in:
// any node: specifier (as runx admits them), or a built-in's bare name.
func isNodeBuiltin(spec string) bool {
	return strings.HasPrefix(spec, "node:") || slices.Contains(nodeBuiltins, spec)
}

// namesLocalFile reports whether a cli-tool argument names a package file:
// a relative path, or a bare name with a source extension. Options,
// placeholders, absolute paths and URLs name none.
func namesLocalFile(a string) bool {
	switch {
	case a == "", strings.HasPrefix(a, "-"), strings.Contains(a, "{{"), path.IsAbs(a), strings.Contains(a, "://"):
		return false
	case strings.HasPrefix(a, "./"), strings.HasPrefix(a, "../"):
		return true
	}
	for _, ext := range localSourceExts {
		if strings.HasSuffix(a, ext) && len(a) > len(ext) {
			return true
		}
	}
	return false
}

// isNodeCommand reports whether a command runs Node.js (node or nodejs,
// by name or path).
func isNodeCommand(command string) bool {
	name := strings.ToLower(path.Base(strings.ReplaceAll(command, `\`, "/")))
	name = strings.TrimSuffix(name, ".exe")
	return name == "node" || name == "nodejs"
}

func isJavaScriptSource(p string) bool {
	switch path.Ext(p) {
	case ".js", ".mjs", ".cjs":
		return true
	}
	return false
}

func isTypeScriptSource(p string) bool {
	switch path.Ext(p) {
	case ".ts", ".tsx", ".mts", ".cts":
		return true
	}
	return false
}

type fileKind int

const (
	fileMissing fileKind = iota
	fileRegular
	fileOther
)

// statFile reports what a package-relative path is. The root refuses a
// path that leaves the package, through a symlink too.
func statFile(root *os.Root, rel string) (fileKind, error) {
	info, err := root.Stat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fileMissing, nil
	case err != nil:
		return fileMissing, err
	case info.Mode().IsRegular():
		return fileRegular, nil
	}
	return fileOther, nil
}

// resolveImport finds the package file an import names: exactly that file
// for an ES module import, and for require also Node's CommonJS candidates
// (the extensions .js, .json and .node, then an index file of a folder). It
// returns "" when none exists.
func resolveImport(root *os.Root, rel string, require bool) (string, error) {
	candidates := []string{rel}
	if require {
		candidates = append(candidates, rel+".js", rel+".json", rel+".node", rel+"/index.js", rel+"/index.json", rel+"/index.node")
	}
	for _, c := range candidates {
		kind, err := statFile(root, c)
		if err != nil {
			return "", err
		}
		if kind == fileRegular {
			return c, nil
		}
	}
	return "", nil
}

func readToolSource(root *os.Root, rel string) ([]byte, error) {
	f, err := root.Open(rel)
	if err != nil {
		return nil, fmt.Errorf("cannot be opened inside the package: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxToolSourceBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot be read: %w", err)
	}
	if len(data) > maxToolSourceBytes {
		return nil, fmt.Errorf("is more than %d bytes, too large to follow its imports", maxToolSourceBytes)
	}
	return data, nil
}
