package kernel

import (
	"slices"

	"github.com/libos/libos/images"
	"github.com/libos/libos/tools"
)

// skillMetaTools are always shown under the skills projection.
var skillMetaTools = []string{"discover_skills", "activate_skill", "read_skill_resource", "unload_skill", "process_exit"}

// discoverable lists the skills image im may activate: the ones it names,
// or every skill of the catalog when it names none.
func (k *Runtime) discoverable(im *images.Image) []tools.SkillInfo {
	if k.opts.Skills == nil {
		return nil
	}
	all := k.opts.Skills.Skills()
	if len(im.Skills) == 0 {
		return all
	}
	var out []tools.SkillInfo
	for _, s := range all {
		if slices.Contains(im.Skills, s.Name) {
			out = append(out, s)
		}
	}
	return out
}

func (s *syscalls) DiscoverSkills() []tools.SkillInfo {
	im, err := s.k.image(s.r.Image)
	if err != nil {
		return nil
	}
	return s.k.discoverable(im)
}

func (s *syscalls) ActivateSkill(name string) (tools.SkillInfo, error) {
	for _, sk := range s.DiscoverSkills() {
		if sk.Name != name {
			continue
		}
		if !slices.Contains(s.r.ActiveSkills, name) {
			// A new list: copies of the record share the old one (snapshot).
			s.r.ActiveSkills = append(slices.Clip(s.r.ActiveSkills), name)
			if err := saveProc(s.tx, s.r); err != nil {
				return tools.SkillInfo{}, err
			}
		}
		if s.r.ToolTable != nil {
			// An agent-task child's table is fixed: activation gives it the
			// manual and names only the skill's tools that table holds.
			sk.Tools = slices.DeleteFunc(slices.Clone(sk.Tools), func(n string) bool { return !slices.Contains(s.r.ToolTable, n) })
		}
		return sk, nil
	}
	return tools.SkillInfo{}, tools.Errorf(tools.CodeNotFound, "name: no skill %q is available to image %s (see discover_skills)", name, s.r.Image)
}

func (s *syscalls) UnloadSkill(name string) error {
	i := slices.Index(s.r.ActiveSkills, name)
	if i < 0 {
		return tools.Errorf(tools.CodeNotFound, "name: skill %q is not active", name)
	}
	s.r.ActiveSkills = slices.Delete(slices.Clone(s.r.ActiveSkills), i, i+1)
	return saveProc(s.tx, s.r)
}

func (s *syscalls) ActiveSkills() []string { return slices.Clone(s.r.ActiveSkills) }

// buildToolTable builds the set of tools a process is shown and may call:
// its fixed table (an agent-task child), or its image's table (or the skills
// projection) plus the tools of the active skills.
func (k *Runtime) buildToolTable(im *images.Image, skills, fixed []string) map[string]*tools.Tool {
	table := map[string]*tools.Tool{}
	add := func(name string) {
		if t, ok := k.broker.Lookup(name); ok {
			table[name] = t
		}
	}
	if fixed != nil {
		for _, n := range fixed {
			add(n)
		}
		return table
	}
	if im.ToolProjection == images.ProjectionSkills {
		for _, n := range skillMetaTools {
			add(n)
		}
	} else {
		for _, name := range im.Tools {
			if name == images.BuiltinTools {
				for _, n := range k.builtinNames {
					add(n)
				}
				continue
			}
			add(name)
		}
	}
	if len(skills) > 0 {
		for _, sk := range k.discoverable(im) {
			if slices.Contains(skills, sk.Name) {
				for _, n := range sk.Tools {
					add(n)
				}
			}
		}
	}
	return table
}

// checkToolTable refuses an explicit tool table with a name the catalog
// does not resolve, before the process exists.
func (k *Runtime) checkToolTable(names []string) error {
	for i, n := range names {
		if _, ok := k.broker.Lookup(n); !ok {
			return tools.Errorf(tools.CodeInvalidArguments, "allowed_tools[%d]: %q does not resolve in the tool catalog", i, n)
		}
	}
	return nil
}

// scopeRefusal says why a tool that owns scopes may not run for r.
func scopeRefusal(t *tools.Tool, r *procRecord) error {
	if r.Scopes == nil {
		return nil
	}
	for _, sc := range t.Scopes {
		if !slices.Contains(r.Scopes, sc) {
			return tools.Errorf(tools.CodeDenied, "tool %s owns scope %q, which the runner of this process did not declare", t.Name, sc)
		}
	}
	return nil
}
