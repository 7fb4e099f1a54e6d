// Package catalog puts skill packages into the ToolBroker: a Catalog
// admits the built-in skills and the packages of skill folders and turns
// every runner and bundled tool into a catalog tool with an exact schema;
// MetaTools are the built-in tools that let a process discover, activate,
// read and unload runner.
//
// A skill tool is checked like any other tool: before anything runs, the
// calling process must hold execute on scope:<name> for every scope its
// runner declares (capabilities.ScopeResource). A javascript or cli-tool runner then runs as an outside
// effect (after the kernel has recorded that it started, with no lock held);
// an agent-task runner starts a child process (image skill-agent:v0) whose
// tool table is the runner's allowed_tools and process_exit, and the call
// waits durably for that child.
package catalog

import (
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

	"github.com/libos/libos/capabilities"
	"github.com/libos/libos/skills/builtin"
	"github.com/libos/libos/skills/runner"
	"github.com/libos/libos/skills/runner/jsrunner"
	"github.com/libos/libos/skills/skillpkg"
	"github.com/libos/libos/tools"
)

// Errors a caller of LoadCatalog may need to tell apart. Admission errors of
// a package wrap skillpkg.ErrAdmission.
var (
	// ErrNameCollision: two skills share a name, or two tools (or a tool and
	// a reserved built-in name) share a tool name.
	ErrNameCollision = errors.New("name collision")
	// ErrNoPackage: a skills folder holds no skill package.
	ErrNoPackage = errors.New("no skill package")
	// ErrInvalidPackage: a package was admitted but cannot join the catalog
	// (a scope that is not a valid resource name, a runner a built-in skill
	// cannot run).
	ErrInvalidPackage = errors.New("skill package cannot join the catalog")
)

// builtinDirPrefix marks the SkillInfo.Dir of a skill embedded in the binary;
// the rest is its folder in the embedded file system. A package on disk
// always has an absolute Dir, so the two never meet.
const builtinDirPrefix = "builtin:"

// toolNamePattern is what a provider accepts as a function name.
// Compiled on first use: compiling at package init taxes every libos start.
var toolNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`) })

// CatalogOptions configure how a Catalog runs skill tools.
type CatalogOptions struct {
	// Workspace is the workspace root a runner sees as RUNX_CWD. "" resolves
	// as the runtime contract says: RUNX_CWD, else INIT_CWD, else the
	// current directory. It is resolved once, by LoadCatalog, and must be an
	// existing folder.
	Workspace string
	// LookupEnv reads the host environment (declared runner variables, the
	// cli-tool baseline, the workspace fallbacks). nil means os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// JavaScript configures the worker pool of javascript runners. The pool
	// is started on the first javascript call and closed by Close; its
	// executable must call jsrunner.MaybeRunWorker first.
	JavaScript jsrunner.PoolOptions
	// TempDir is where cli-tool input folders are created ("" selects the
	// cli-tool runner's default).
	TempDir string
	// ReservedToolNames are tool names already taken (the runtime's
	// built-in tools); a skill tool with one of them is refused here rather
	// than when the broker is built.
	ReservedToolNames []string
}

// Catalog is the set of skills a runtime knows and the tools they add. It is
// immutable after LoadCatalog (apart from the javascript pool it starts on
// demand) and safe for concurrent use. Close releases the pool; tools of a
// closed Catalog fail with internal_failure.
type Catalog struct {
	opts   CatalogOptions
	skills []*skillEntry // sorted by name
	tools  []*tools.Tool // sorted by name

	poolMu sync.Mutex
	pool   *jsrunner.Pool
	closed bool
}

// skillEntry is one admitted skill.
type skillEntry struct {
	pkg  *skillpkg.Package
	info tools.SkillInfo
	// origin names where the skill came from in errors.
	origin string
}

// LoadCatalog admits the built-in skills and every skill package found in
// dirs: a folder holding a SKILL.md is one package; otherwise each of its
// immediate sub-folders holding a SKILL.md is one. A folder with no package
// at all, a package that admission refuses (the error names the package
// folder), two skills with one name or two tools with one name are errors,
// and nothing is loaded.
func LoadCatalog(dirs []string, opts CatalogOptions) (*Catalog, error) {
	if opts.LookupEnv == nil {
		opts.LookupEnv = os.LookupEnv
	}
	ws, err := runner.ResolveWorkspace(opts.Workspace, opts.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("skill catalog: %w", err)
	}
	opts.Workspace = ws
	c := &Catalog{opts: opts}

	var entries []*skillEntry
	for _, folder := range builtin.Folders() {
		e, err := loadBuiltin(folder)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	seenDirs := map[string]bool{}
	for i, dir := range dirs {
		pkgDirs, err := packageFolders(dir)
		if err != nil {
			return nil, fmt.Errorf("skill catalog: dirs[%d]: %w", i, err)
		}
		for _, pd := range pkgDirs {
			pkg, err := runner.Admit(pd)
			if err != nil {
				return nil, fmt.Errorf("skill package %s: %w", pd, err)
			}
			if seenDirs[pkg.Dir] {
				continue // the same package reached through two folders
			}
			seenDirs[pkg.Dir] = true
			entries = append(entries, &skillEntry{pkg: pkg, origin: pkg.Dir})
		}
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].pkg.Skill.Name < entries[j].pkg.Skill.Name })
	for i := 1; i < len(entries); i++ {
		if a, b := entries[i-1], entries[i]; a.pkg.Skill.Name == b.pkg.Skill.Name {
			return nil, fmt.Errorf("skill catalog: %w: skill %q is defined by both %s and %s", ErrNameCollision, a.pkg.Skill.Name, a.origin, b.origin)
		}
	}

	owners := map[string]string{}
	for _, n := range opts.ReservedToolNames {
		owners[n] = "the built-in tool " + n
	}
	claim := func(name, owner string) error {
		if !toolNamePattern().MatchString(name) {
			return fmt.Errorf("skill catalog: %w: tool name %q of %s is not 1 to 64 letters, digits, '_' or '-'", ErrInvalidPackage, name, owner)
		}
		if other, taken := owners[name]; taken {
			return fmt.Errorf("skill catalog: %w: tool name %q of %s is already taken by %s", ErrNameCollision, name, owner, other)
		}
		owners[name] = owner
		return nil
	}
	for _, e := range entries {
		if err := checkPackage(e); err != nil {
			return nil, err
		}
		own, err := c.skillTools(e, claim)
		if err != nil {
			return nil, err
		}
		names := make([]string, 0, len(own)+len(e.pkg.Skill.AllowedTools))
		for _, t := range own {
			names = append(names, t.Name)
			c.tools = append(c.tools, t)
		}
		for _, n := range e.pkg.Skill.AllowedTools {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		e.info = tools.SkillInfo{Name: e.pkg.Skill.Name, Description: e.pkg.Skill.Description, Tools: names, Dir: e.pkg.Dir,
			Manual: e.pkg.Manual, Metadata: e.pkg.Skill.Metadata}
	}
	sort.Slice(c.tools, func(i, j int) bool { return c.tools[i].Name < c.tools[j].Name })
	c.skills = entries
	return c, nil
}

// packageFolders lists the package folders dir stands for.
func packageFolders(dir string) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", dir, err)
	}
	info, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("skills folder %s: %w", abs, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("skills folder %s: not a folder", abs)
	}
	if isPackage(abs) {
		return []string{abs}, nil
	}
	children, err := os.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("skills folder %s: %w", abs, err)
	}
	var out []string
	for _, ch := range children {
		if strings.HasPrefix(ch.Name(), ".") {
			continue
		}
		p := filepath.Join(abs, ch.Name())
		if st, err := os.Stat(p); err == nil && st.IsDir() && isPackage(p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w in %s: neither it nor any folder directly inside it holds a %s", ErrNoPackage, abs, skillpkg.SkillFile)
	}
	return out, nil
}

func isPackage(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, skillpkg.SkillFile))
	return err == nil
}

// loadBuiltin admits an embedded package: its SKILL.md and, when present,
// its skill.yaml. Built-in packages carry no files to run, so only
// agent-task runners (and none at all) are allowed.
func loadBuiltin(folder string) (*skillEntry, error) {
	origin := "built-in skill folder " + folder
	fsys := builtin.FS()
	data, err := fs.ReadFile(fsys, path.Join(folder, skillpkg.SkillFile))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", origin, err)
	}
	skill, manual, err := skillpkg.ParseSkillMarkdown(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", origin, err)
	}
	pkg := &skillpkg.Package{Dir: builtinDirPrefix + folder, Skill: skill, Manual: manual}
	data, err = fs.ReadFile(fsys, path.Join(folder, skillpkg.RunnerFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("%s: %w", origin, err)
	default:
		if pkg.Runners, err = skillpkg.ParseRunnerManifest(data); err != nil {
			return nil, fmt.Errorf("%s: %w", origin, err)
		}
		for _, r := range pkg.Runners {
			if r.Type != skillpkg.TypeAgentTask {
				return nil, fmt.Errorf("%s: %w: runner %s: a built-in skill has no package folder to run a %s runner from", origin, ErrInvalidPackage, r.Name, r.Type)
			}
		}
	}
	return &skillEntry{pkg: pkg, origin: origin}, nil
}

// checkPackage refuses what admission allows but the catalog cannot use.
func checkPackage(e *skillEntry) error {
	check := func(r *skillpkg.Runner, field string) error {
		for i, sc := range r.Scopes {
			if strings.Contains(sc, "*") {
				return fmt.Errorf("skill package %s: %w: %s[%d]: %q must not contain '*' (a scope is an exact name, never a pattern)", e.origin, ErrInvalidPackage, field, i, sc)
			}
			if err := capabilities.ValidateResource(capabilities.ScopeResource(sc)); err != nil {
				return fmt.Errorf("skill package %s: %w: %s[%d]: %w", e.origin, ErrInvalidPackage, field, i, err)
			}
		}
		return nil
	}
	for _, r := range e.pkg.Runners {
		if err := check(r, skillpkg.RunnerFile+": runners."+r.Name+".scopes"); err != nil {
			return err
		}
	}
	for _, t := range e.pkg.Tools {
		// runx's form declares scopes beside source, libos's inside runner.
		field := t.Dir + "/" + skillpkg.ToolManifestFile + ": scopes"
		if t.RunnerField == "runner" {
			field = t.Dir + "/" + skillpkg.ToolManifestFile + ": runner.scopes"
		}
		if err := check(t.Runner, field); err != nil {
			return err
		}
	}
	return nil
}

// uniqueScopes is a runner's scopes with repeats left out: runx keeps a
// scope listed twice, which needs no second grant.
func uniqueScopes(r *skillpkg.Runner) []string {
	out := make([]string, 0, len(r.Scopes))
	for _, sc := range r.Scopes {
		if !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	return out
}

// sanitizeToolName maps a name onto the characters providers accept,
// truncated to 64 bytes; collisions are caught by the caller.
func sanitizeToolName(name string) string {
	b := []byte(name)
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}

// ToolName is the catalog name of a skill's runner: the skill's name for its
// default runner, <skill>_<runner> for another, sanitized.
func ToolName(skill string, r *skillpkg.Runner) string {
	if r.Default {
		return sanitizeToolName(skill)
	}
	return sanitizeToolName(skill + "_" + r.Name)
}

// BundledToolName is the catalog name of a bundled tool: <namespace>_<tool>.
func BundledToolName(t *skillpkg.Tool) string {
	return sanitizeToolName(t.Namespace + "_" + t.Tool)
}

// skillTools builds the tools of one skill, claiming each name.
func (c *Catalog) skillTools(e *skillEntry, claim func(name, owner string) error) ([]*tools.Tool, error) {
	var out []*tools.Tool
	skill := e.pkg.Skill.Name
	for _, r := range e.pkg.Runners {
		if !r.Type.Supported() {
			// A runx runner type libos does not run (graph, mcp, ...) gets no
			// tool: every call would fail. skill check lists it as unsupported.
			continue
		}
		name := ToolName(skill, r)
		if err := claim(name, fmt.Sprintf("skill %s runner %s (%s)", skill, r.Name, e.origin)); err != nil {
			return nil, err
		}
		t, err := c.runnerTool(e.pkg, r, name, runnerDescription(e.pkg, r))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	for _, bt := range e.pkg.Tools {
		name := BundledToolName(bt)
		if err := claim(name, fmt.Sprintf("skill %s bundled tool %s (%s)", skill, bt.Name, e.origin)); err != nil {
			return nil, err
		}
		desc := bt.Description
		if desc == "" {
			desc = fmt.Sprintf("Bundled tool %s of skill %s.", bt.Name, skill)
		}
		t, err := c.runnerTool(e.pkg, bt.Runner, name, desc+scopeNote(bt.Runner))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func runnerDescription(pkg *skillpkg.Package, r *skillpkg.Runner) string {
	var b strings.Builder
	if d := strings.TrimSpace(pkg.Skill.Description); d != "" {
		b.WriteString(d)
		if !strings.HasSuffix(d, ".") {
			b.WriteString(".")
		}
		b.WriteString(" ")
	}
	fmt.Fprintf(&b, "Skill %s, runner %s (%s).", pkg.Skill.Name, r.Name, r.Type)
	if r.Type == skillpkg.TypeAgentTask {
		fmt.Fprintf(&b, " Starts a child agent process (%s) whose tools are exactly %s, waits for it, and returns its status and its result, checked against the runner's outputs. Needs write on %s; call it alone in its turn.",
			SkillAgentImage, strings.Join(agentTools(r), ", "), capabilities.ProcessSpawn)
	}
	b.WriteString(scopeNote(r))
	return b.String()
}

func scopeNote(r *skillpkg.Runner) string {
	scopes := uniqueScopes(r)
	if len(scopes) == 0 {
		return ""
	}
	names := make([]string, len(scopes))
	for i, s := range scopes {
		names[i] = capabilities.ScopeResource(s)
	}
	return " Needs execute on " + strings.Join(names, ", ") + "."
}

// decodeJSON decodes a value keeping numbers exact.
func decodeJSON(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// Skills lists every skill, sorted by name.
func (c *Catalog) Skills() []tools.SkillInfo {
	out := make([]tools.SkillInfo, len(c.skills))
	for i, e := range c.skills {
		out[i] = e.info
		out[i].Tools = slices.Clone(e.info.Tools)
		if e.info.Metadata != nil {
			// Every process is shown the same metadata: a caller gets its own.
			out[i].Metadata = make(map[string]json.RawMessage, len(e.info.Metadata))
			for k, v := range e.info.Metadata {
				out[i].Metadata[k] = slices.Clone(v)
			}
		}
	}
	return out
}

// Tools returns the runner and bundled tools of every skill, sorted by name.
func (c *Catalog) Tools() []*tools.Tool { return slices.Clone(c.tools) }

// Package returns the admitted package of a skill.
func (c *Catalog) Package(name string) (*skillpkg.Package, bool) {
	for _, e := range c.skills {
		if e.pkg.Skill.Name == name {
			return e.pkg, true
		}
	}
	return nil, false
}

// Workspace is the resolved workspace root runners see as RUNX_CWD.
func (c *Catalog) Workspace() string { return c.opts.Workspace }

// jsPool returns the javascript pool, starting it on first use.
func (c *Catalog) jsPool() (*jsrunner.Pool, error) {
	c.poolMu.Lock()
	defer c.poolMu.Unlock()
	if c.closed {
		return nil, errors.New("the skill catalog is closed")
	}
	if c.pool == nil {
		p, err := jsrunner.NewPool(c.opts.JavaScript)
		if err != nil {
			return nil, fmt.Errorf("starting the javascript worker pool: %w", err)
		}
		c.pool = p
	}
	return c.pool, nil
}

// Close stops the javascript worker pool, if it was started. Calls in
// flight end with internal_failure; later calls fail. Close is idempotent.
func (c *Catalog) Close() error {
	c.poolMu.Lock()
	defer c.poolMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.pool != nil {
		if err := c.pool.Close(); err != nil {
			return fmt.Errorf("skill catalog: %w", err)
		}
	}
	return nil
}

// agentTools is the tool table of an agent-task runner's child: its
// allowed_tools, and process_exit when they do not name it. process_exit is
// how the child hands back its answer, which runx's agent does through the
// runtime and not through a catalog tool, so runx packages never list it;
// without it the child could never end.
func agentTools(r *skillpkg.Runner) []string {
	out := slices.Clone(r.AllowedTools)
	if !slices.Contains(out, "process_exit") {
		out = append(out, "process_exit")
	}
	return out
}
