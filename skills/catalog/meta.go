package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/libos/libos/skills/builtin"
	"github.com/libos/libos/tools"
	"github.com/libos/libos/tools/schema"
)

// MaxResourceBytes bounds a file read_skill_resource returns.
const MaxResourceBytes = 256 << 10

// activationNote reminds the model that seeing a tool is not holding authority.
const activationNote = "Activation shows these tools' schemas and grants nothing: every call is still checked against your capabilities."

// MetaTools is the tools.Family of discover_skills, activate_skill,
// read_skill_resource and unload_skill. They reach skills only through the
// caller's Syscalls (the skills its image may discover and the set it
// activated, with what admission read of each SKILL.md) and read resource
// files from SkillInfo.Dir, so they need no catalog of their own and work
// unchanged without one (nothing is discoverable then).
//
// read_skill_resource reads its file inside the commit that runs it. As an
// outside effect, its refusals (no such file, not text) would be reported
// as effects that started and stay charged, which they are not.
func MetaTools(tools.Config) []*tools.Tool {
	return []*tools.Tool{discoverSkills(), activateSkill(), readSkillResource(), unloadSkill()}
}

var skillNameSchema = &schema.Schema{Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(64),
	Description: "The skill's name, as discover_skills lists it."}

func decodeArgs(tool string, raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: decode arguments: %w", tool, err)
	}
	return nil
}

// skillTool adapts a meta tool, which uses only the caller's skill set, to
// Tool.Invoke.
func skillTool(f func(sys tools.SkillSet, raw json.RawMessage) (tools.Outcome, error)) func(context.Context, tools.Syscalls, json.RawMessage) (tools.Outcome, error) {
	return func(_ context.Context, sys tools.Syscalls, raw json.RawMessage) (tools.Outcome, error) {
		return f(sys, raw)
	}
}

func discoverSkills() *tools.Tool {
	return &tools.Tool{
		Name: "discover_skills",
		Description: "List the skills this process may activate: name, description, the tools activation would show, and whether it is active. " +
			"Needs no authority and changes nothing.",
		Schema: schema.Object(map[string]*schema.Schema{}),
		Invoke: skillTool(func(sys tools.SkillSet, _ json.RawMessage) (tools.Outcome, error) {
			active := sys.ActiveSkills()
			list := make([]map[string]any, 0)
			for _, s := range sys.DiscoverSkills() {
				list = append(list, map[string]any{
					"name":        s.Name,
					"description": s.Description,
					"tools":       nonNil(s.Tools),
					"active":      slices.Contains(active, s.Name),
					"metadata":    nonNilMap(s.Metadata),
				})
			}
			return tools.Outcome{Result: map[string]any{"skills": list, "count": len(list)}}, nil
		}),
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilMap(m map[string]json.RawMessage) map[string]json.RawMessage {
	if m == nil {
		return map[string]json.RawMessage{}
	}
	return m
}

func activateSkill() *tools.Tool {
	return &tools.Tool{
		Name: "activate_skill",
		Description: "Activate a skill: returns its manual (the Markdown of its SKILL.md) and the names of its tools, whose schemas you are shown " +
			"from the next turn. Grants nothing; each tool call is still checked against your capabilities.",
		Schema: schema.Object(map[string]*schema.Schema{"name": skillNameSchema}, "name"),
		Invoke: skillTool(func(sys tools.SkillSet, raw json.RawMessage) (tools.Outcome, error) {
			var args struct {
				Name string `json:"name"`
			}
			if err := decodeArgs("activate_skill", raw, &args); err != nil {
				return tools.Outcome{}, err
			}
			info, err := sys.ActivateSkill(args.Name)
			if err != nil {
				return tools.Outcome{}, err
			}
			return tools.Outcome{Result: map[string]any{
				"name":        info.Name,
				"description": info.Description,
				"metadata":    nonNilMap(info.Metadata),
				"manual":      info.Manual,
				"tools":       nonNil(info.Tools),
				"note":        activationNote,
			}}, nil
		}),
	}
}

func unloadSkill() *tools.Tool {
	return &tools.Tool{
		Name:        "unload_skill",
		Description: "Deactivate an active skill: its tools are no longer shown from the next turn.",
		Schema:      schema.Object(map[string]*schema.Schema{"name": skillNameSchema}, "name"),
		Invoke: skillTool(func(sys tools.SkillSet, raw json.RawMessage) (tools.Outcome, error) {
			var args struct {
				Name string `json:"name"`
			}
			if err := decodeArgs("unload_skill", raw, &args); err != nil {
				return tools.Outcome{}, err
			}
			if err := sys.UnloadSkill(args.Name); err != nil {
				return tools.Outcome{}, err
			}
			return tools.Outcome{Result: map[string]any{"name": args.Name, "unloaded": true}}, nil
		}),
	}
}

func readSkillResource() *tools.Tool {
	return &tools.Tool{
		Name: "read_skill_resource",
		Description: fmt.Sprintf("Read a UTF-8 text file of a skill's package (one you may discover), such as a document its manual points to. "+
			"path is relative to the package folder, uses '/' and must stay inside it (no '..', no absolute path, no symlink leading out); "+
			"at most %d bytes.", MaxResourceBytes),
		Schema: schema.Object(map[string]*schema.Schema{
			"name": skillNameSchema,
			"path": {Type: "string", MinLength: schema.Ptr(1), MaxLength: schema.Ptr(1024),
				Description: "Package-relative file path such as SKILL.md or docs/guide.md."},
		}, "name", "path"),
		Invoke: skillTool(func(sys tools.SkillSet, raw json.RawMessage) (tools.Outcome, error) {
			var args struct {
				Name string `json:"name"`
				Path string `json:"path"`
			}
			if err := decodeArgs("read_skill_resource", raw, &args); err != nil {
				return tools.Outcome{}, err
			}
			var info *tools.SkillInfo
			for _, s := range sys.DiscoverSkills() {
				if s.Name == args.Name {
					info = &s
					break
				}
			}
			if info == nil {
				return tools.Outcome{}, tools.Errorf(tools.CodeNotFound, "name: no skill %q is available to this process (see discover_skills)", args.Name)
			}
			if rule := resourcePathRule(args.Path); rule != "" {
				return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "path: %q %s", args.Path, rule)
			}
			data, err := readPackageFile(info.Dir, args.Path, MaxResourceBytes)
			if err != nil {
				return tools.Outcome{}, resourceError(args.Path, err)
			}
			if !utf8.Valid(data) {
				return tools.Outcome{}, tools.Errorf(tools.CodeInvalidArguments, "path: %q is not UTF-8 text", args.Path)
			}
			return tools.Outcome{Result: map[string]any{
				"name": info.Name, "path": args.Path, "bytes": len(data), "text": string(data),
			}}, nil
		}),
	}
}

// resourcePathRule returns the rule a resource path breaks, or "".
func resourcePathRule(p string) string {
	switch {
	case strings.ContainsRune(p, 0):
		return "must not contain a NUL byte"
	case strings.Contains(p, `\`):
		return "must use '/' as the separator"
	case path.IsAbs(p) || (len(p) >= 2 && p[1] == ':'):
		return "must be relative to the package folder"
	case p == ".." || strings.HasPrefix(p, "../") || strings.HasSuffix(p, "/..") || strings.Contains(p, "/../"):
		return "must stay inside the package ('..' is not allowed)"
	case !fs.ValidPath(p) || p == ".":
		return "must be a clean relative file path (no empty, '.' or trailing segments)"
	}
	return ""
}

// Errors of readPackageFile that resourceError tells apart.
var (
	errNotRegular = errors.New("is not a regular file")
	errTooLarge   = errors.New("is too large")
)

func resourceError(p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return tools.Errorf(tools.CodeNotFound, "path: %q does not exist in the package", p)
	case errors.Is(err, errNotRegular), errors.Is(err, errTooLarge):
		return tools.Errorf(tools.CodeInvalidArguments, "path: %q %v", p, err)
	}
	// os.Root refuses a path that leads out of the package (through ".." or a
	// symlink) with an error of its own; report it as the path's fault.
	return tools.Errorf(tools.CodeDenied, "path: %q cannot be read inside the package: %v", p, err)
}

// readPackageFile reads the regular file rel (a valid fs path) of the
// package in dir, at most limit bytes. A package on disk is read through an
// os.Root, so neither ".." nor a symlink can lead outside it; a built-in
// package is read from the embedded file system.
func readPackageFile(dir, rel string, limit int64) ([]byte, error) {
	var fsys fs.FS
	if folder, ok := strings.CutPrefix(dir, builtinDirPrefix); ok {
		sub, err := fs.Sub(builtin.FS(), folder)
		if err != nil {
			return nil, err
		}
		fsys = sub
	} else {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return nil, fmt.Errorf("opening the package folder: %w", err)
		}
		defer root.Close()
		fsys = root.FS()
	}
	// Stat before opening: opening a FIFO or device could block or have
	// effects.
	info, err := fs.Stat(fsys, rel)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, errNotRegular
	}
	if info.Size() > limit {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", errTooLarge, info.Size(), limit)
	}
	f, err := fsys.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, errNotRegular
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", errTooLarge, limit)
	}
	return data, nil
}
