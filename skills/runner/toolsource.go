package runner

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
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
// and require specifiers, each of which must resolve to a package file;
// and a tool run by node may not reach uncompiled TypeScript. It returns
// the closure's package-relative paths. A refusal is a
// *skillpkg.AdmissionError naming the tool, the file and the specifier.
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
					Rule: fmt.Sprintf("%s %q of bundled tool %s ", imp.kind, imp.spec, t.Name) + fmt.Sprintf(format, args...)}
			}
			if imp.escaped {
				return nil, fail("uses a string escape; write the path plainly so that admission can follow it")
			}
			if !strings.HasPrefix(imp.spec, "./") && !strings.HasPrefix(imp.spec, "../") {
				continue // a Node built-in or an installed package, not a package file
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
