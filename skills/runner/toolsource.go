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
// as runx's admission does: the command and every argument must read as a
// relative path from the tool's folder (checkToolArgPath); a command path,
// and every argument that names a package file ("./x", "../x", or a source
// file name), must exist in the package; the JavaScript files among them
// are followed through their import, export-from, import() and require
// specifiers, each of which must be one plain string naming exactly a
// package file by a relative path, or a Node built-in (a bare package name,
// an absolute path, a URL or a computed specifier is refused: its code
// would run unbound); and a tool run by node may not reach uncompiled
// TypeScript. It returns the closure's package-relative paths. A refusal is
// a *skillpkg.AdmissionError naming the tool, its manifest, the file and
// the specifier.
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
	// runx reads the command and every argument as a path from the tool's
	// folder before it knows which name package files, so what it cannot
	// read as one is refused whether or not it names a file.
	if err := checkToolArgPath("command", r.Command, r.Base, refuse); err != nil {
		return nil, err
	}
	// A command without a slash is looked up in PATH; with one it is a path
	// the runner resolves from the tool's folder.
	if strings.Contains(r.Command, "/") {
		entries = append(entries, entry{"command", r.Command})
	}
	for i, a := range r.Args {
		field := fmt.Sprintf("args[%d]", i)
		if err := checkToolArgPath(field, a, r.Base, refuse); err != nil {
			return nil, err
		}
		if namesLocalFile(a) {
			entries = append(entries, entry{field, a})
		}
	}
	for _, e := range entries {
		rel := path.Join(r.Base, e.value)
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
			if imp.computed {
				// Whatever it loads was never bound; runx refuses it too.
				return nil, &skillpkg.AdmissionError{File: file, Line: imp.line,
					Rule: fmt.Sprintf("%s of bundled tool %s (%s) is not called with one plain string literal, so admission cannot bind the file it loads; %s", callName(imp.kind), t.Name, manifest, toolCallRule)}
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
			// Exactly the file named, for require too: Node's CommonJS
			// search (./x.js for ./x, then a folder's package.json main
			// ahead of its index.js) could load another file than the one
			// a search of ours would bind.
			switch kind, err := statFile(root, rel); {
			case err != nil:
				return nil, fail("resolves to %s, which cannot be read inside the package: %v", rel, err)
			case kind == fileMissing:
				return nil, fail("resolves to %s, which does not exist in the package%s", rel, exactHint(imp.kind))
			case kind == fileOther:
				return nil, fail("resolves to %s, which is not a regular file%s", rel, exactHint(imp.kind))
			}
			if node && isTypeScriptSource(rel) {
				return nil, fail("resolves to uncompiled TypeScript (%s), which node does not run; import its compiled .js or .mjs file", rel)
			}
			add(rel)
		}
	}
	return files, nil
}

// toolImportRule is what a bundled tool's source may import.
const toolImportRule = `a bundled tool may import only Node built-ins ("node:fs") and package files by a relative path ("./lib.mjs")`

// toolCallRule is how a bundled tool's source may call import() and require.
const toolCallRule = `name the module as one string, as in import("./lib.mjs") or require("./lib.cjs")`

// callName names the call a computed jsImport is.
func callName(kind string) string {
	if kind == "import" {
		return "dynamic import()"
	}
	return "require"
}

// checkToolArgPath refuses a bundled tool's command or argument that runx
// cannot read as a path from the tool's folder (base): empty, padded with
// white space, absolute, holding a backslash, ? or #, or resolving to the
// package folder or outside it. A bare word such as node, python3 or --flag
// reads as a path and passes.
func checkToolArgPath(field, value, base string, refuse func(field, format string, args ...any) error) error {
	const rule = "runx reads each command and argument of a bundled tool as a relative path from the tool's folder and refuses it otherwise"
	var what string
	switch {
	case value == "":
		what = "is empty"
	case strings.TrimSpace(value) != value:
		what = "begins or ends with white space"
	case strings.HasPrefix(value, "/"):
		what = "is an absolute path; name a package file by its relative path, or a command in PATH by its bare name (node)"
	case strings.Contains(value, `\`):
		what = "holds a backslash; write paths with forward slashes"
	case strings.ContainsAny(value, "?#"):
		what = "holds ? or #"
	default:
		switch rel := path.Join(base, value); {
		case rel == ".." || strings.HasPrefix(rel, "../"):
			what = "resolves outside the package"
		case rel == ".":
			what = "resolves to the package folder itself"
		default:
			return nil
		}
	}
	return refuse(field, "%q %s; %s", value, what, rule)
}

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

// exactHint explains, for a require, why its file was not searched for.
func exactHint(kind string) string {
	if kind != "require" {
		return ""
	}
	return `; a bundled tool's require is bound to exactly the file it names (as runx binds it), so name the file itself with its extension ("./lib/index.js", not "./lib")`
}

// readToolSource reads a source file through the package root, refusing,
// without blocking on it, one that is no longer a regular file (a FIFO
// would stall admission until a writer came).
func readToolSource(root *os.Root, rel string) ([]byte, error) {
	f, err := skillpkg.OpenRegular(root.OpenFile, rel)
	if errors.Is(err, skillpkg.ErrNotRegular) {
		return nil, errors.New("is not a regular file")
	} else if err != nil {
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
