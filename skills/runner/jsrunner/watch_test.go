package jsrunner

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// trustedEntry reports whether the cache would serve dir/module without a
// stat (always false off Linux, where every hit is checked fully).
func trustedEntry(t *testing.T, p *Pool, dir, module string) bool {
	t.Helper()
	p.bundles.mu.Lock()
	el, ok := p.bundles.entries[bundleKey{dir: dir, module: module}]
	p.bundles.mu.Unlock()
	if !ok {
		t.Fatalf("%s/%s is not cached", dir, module)
	}
	return p.bundles.watch.trusted(el.Value.(*bundleCacheEntry).deps)
}

// A cached bundle is served without re-stat'ing its files, yet every kind of
// change made between two calls, with no pause, runs the new code in the
// second: an in-place write of the same size, an atomic rename over the
// module, an edit of an imported file, a write through a hard link outside
// the package, a replaced directory, and a package symlink pointed elsewhere.
func TestEditsBetweenCallsRunTheNewCode(t *testing.T) {
	p := newPool(t, PoolOptions{Workers: 1})
	root := t.TempDir()
	pkg := filepath.Join(root, "pkg")
	writeFile(t, filepath.Join(pkg, "main.mjs"), `import { v } from "./lib/v.mjs"; export default () => ({ main: 1, v });`)
	writeFile(t, filepath.Join(pkg, "lib", "v.mjs"), `export const v = 1;`)
	spec := Spec{Dir: pkg, Module: "main.mjs"}
	call := func(want string) {
		t.Helper()
		wantOutput(t, run(t, p, spec, `{}`), want)
	}
	call(`{"main":1,"v":1}`)
	call(`{"main":1,"v":1}`)
	if runtime.GOOS == "linux" && !trustedEntry(t, p, pkg, "main.mjs") {
		t.Fatal("an unchanged graph on a local file system is not trusted without stats")
	}

	writeFile(t, filepath.Join(pkg, "main.mjs"), `import { v } from "./lib/v.mjs"; export default () => ({ main: 2, v });`)
	call(`{"main":2,"v":1}`)

	tmp := filepath.Join(pkg, "main.mjs.tmp")
	writeFile(t, tmp, `import { v } from "./lib/v.mjs"; export default () => ({ main: 3, v });`)
	if err := os.Rename(tmp, filepath.Join(pkg, "main.mjs")); err != nil {
		t.Fatal(err)
	}
	call(`{"main":3,"v":1}`)

	writeFile(t, filepath.Join(pkg, "lib", "v.mjs"), `export const v = 2;`)
	call(`{"main":3,"v":2}`)

	link := filepath.Join(root, "outside-link.mjs")
	if err := os.Link(filepath.Join(pkg, "lib", "v.mjs"), link); err != nil {
		t.Fatal(err)
	}
	call(`{"main":3,"v":2}`)
	f, err := os.OpenFile(link, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("3"), int64(len("export const v = "))); err != nil {
		t.Fatal(err)
	}
	f.Close()
	call(`{"main":3,"v":3}`)

	lib2 := filepath.Join(pkg, "lib2")
	writeFile(t, filepath.Join(lib2, "v.mjs"), `export const v = 4;`)
	if err := os.Rename(filepath.Join(pkg, "lib"), filepath.Join(pkg, "lib-old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(lib2, filepath.Join(pkg, "lib")); err != nil {
		t.Fatal(err)
	}
	call(`{"main":3,"v":4}`)

	// The package named through a symbolic link that is re-pointed.
	for i, body := range []string{"first", "second"} {
		dir := filepath.Join(root, fmt.Sprintf("v%d", i))
		writeFile(t, filepath.Join(dir, "main.mjs"), fmt.Sprintf(`export default () => ({ version: %q });`, body))
	}
	current := filepath.Join(root, "current")
	if err := os.Symlink("v0", current); err != nil {
		t.Fatal(err)
	}
	linked := Spec{Dir: current, Module: "main.mjs"}
	wantOutput(t, run(t, p, linked, `{}`), `{"version":"first"}`)
	wantOutput(t, run(t, p, linked, `{}`), `{"version":"first"}`)
	if err := os.Symlink("v1", current+".new"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(current+".new", current); err != nil {
		t.Fatal(err)
	}
	wantOutput(t, run(t, p, linked, `{}`), `{"version":"second"}`)

	// A whole ancestor directory renamed away and replaced.
	if err := os.Rename(root, root+"-old"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root + "-old") })
	writeFile(t, filepath.Join(pkg, "main.mjs"), `export default () => ({ replaced: true });`)
	wantOutput(t, run(t, p, spec, `{}`), `{"replaced":true}`)
}
