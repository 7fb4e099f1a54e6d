// Package images defines agent images: the YAML definition of what an
// AgentProcess is (system prompt, tool table, completion gate, declared
// capabilities, default budgets, context window) and the built-in images
// embedded in the binary.
package images

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/libos/libos/capabilities"
)

// BuiltinTools is the tool-table entry that stands for every built-in tool of
// the runtime, so an image keeps up as tools are added.
const BuiltinTools = "builtin"

// Completion gates.
const (
	GateOnePhase         = "one_phase"
	GateCumulativeReview = "cumulative_review"
)

// Tool projections.
const (
	ProjectionAll    = "all"
	ProjectionSkills = "skills"
)

// ErrUnknownImage is returned for an image reference that names no image.
var ErrUnknownImage = errors.New("unknown image")

// Image is an agent image definition.
type Image struct {
	Name           string               `yaml:"name" json:"name"`
	Version        string               `yaml:"version" json:"version"`
	Description    string               `yaml:"description" json:"description,omitempty"`
	SystemPrompt   string               `yaml:"system_prompt" json:"system_prompt"`
	Tools          []string             `yaml:"tools" json:"tools"`
	CompletionGate string               `yaml:"completion_gate" json:"completion_gate"`
	ToolProjection string               `yaml:"tool_projection" json:"tool_projection"`
	Skills         []string             `yaml:"skills" json:"skills,omitempty"`
	Capabilities   []DeclaredCapability `yaml:"capabilities" json:"capabilities,omitempty"`
	Budget         Budget               `yaml:"budget" json:"budget"`
	Context        ContextConfig        `yaml:"context" json:"context"`
	Metadata       map[string]string    `yaml:"metadata" json:"metadata,omitempty"`
	// MaxTurnsWithoutToolCall is how many replies in a row may carry no tool
	// call before the process fails: a model or server without tool calling
	// is found out within a few calls (0 means DefaultMaxTurnsWithoutToolCall).
	MaxTurnsWithoutToolCall int `yaml:"max_turns_without_tool_call" json:"max_turns_without_tool_call,omitempty"`
}

// DefaultMaxTurnsWithoutToolCall is the limit of consecutive replies without
// a tool call when an image sets none.
const DefaultMaxTurnsWithoutToolCall = 3

// TextOnlyTurnLimit is the image's limit of consecutive replies without a
// tool call.
func (im *Image) TextOnlyTurnLimit() int {
	if im.MaxTurnsWithoutToolCall > 0 {
		return im.MaxTurnsWithoutToolCall
	}
	return DefaultMaxTurnsWithoutToolCall
}

// DeclaredCapability is what an image says it needs. It is a declaration
// only: the Host (or a parent, by attenuation) grants.
type DeclaredCapability struct {
	Resource string   `yaml:"resource" json:"resource"`
	Rights   []string `yaml:"rights" json:"rights"`
	Why      string   `yaml:"why" json:"why,omitempty"`
}

// Budget holds an image's default limits; 0 means unlimited.
type Budget struct {
	ToolCalls   int64 `yaml:"tool_calls" json:"tool_calls"`
	LLMCalls    int64 `yaml:"llm_calls" json:"llm_calls"`
	LLMTokens   int64 `yaml:"llm_tokens" json:"llm_tokens"`
	Children    int64 `yaml:"children" json:"children"`
	WallSeconds int64 `yaml:"wall_seconds" json:"wall_seconds"`
}

// MinPromptTokens is the least room a context window must leave for the
// prompt beside max_output_tokens: a window that cannot hold the system
// prompt and one answer cannot run a single call.
const MinPromptTokens = 1024

// DefaultWindowTokens is the context window of an image that sets none.
const DefaultWindowTokens = 128000

// ContextConfig says whether a process keeps its LLM context as an Object and
// how large its model's window is.
type ContextConfig struct {
	Object          bool `yaml:"object" json:"object"`
	WindowTokens    int  `yaml:"window_tokens" json:"window_tokens"`
	MaxOutputTokens int  `yaml:"max_output_tokens" json:"max_output_tokens"`
}

// Ref is the image reference "name:version".
func (im *Image) Ref() string { return im.Name + ":" + im.Version }

// Gated reports whether process_exit goes through the completion review.
func (im *Image) Gated() bool { return im.CompletionGate == GateCumulativeReview }

// identRe is compiled on first use: its {0,63} expands to a large program,
// and start-up of commands that never parse a reference should not pay for it.
var identRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`) })

// ParseRef splits "name:version".
func ParseRef(ref string) (name, version string, err error) {
	name, version, ok := strings.Cut(ref, ":")
	if !ok || !identRe().MatchString(name) || !identRe().MatchString(version) {
		return "", "", fmt.Errorf("image reference %q: must be name:version (lowercase letters, digits, '.', '_', '-')", ref)
	}
	return name, version, nil
}

// Parse decodes and validates one image definition. source names the input
// in errors.
func Parse(source string, data []byte) (*Image, error) {
	var im Image
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&im); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("image %s: the file is empty (an image needs name, version, system_prompt and tools)", source)
		}
		return nil, fmt.Errorf("image %s: %w", source, err)
	}
	// A second document would be ignored, and what it says lost.
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", source, err)
		}
		return nil, fmt.Errorf("image %s: only one YAML document is allowed (a second starts at line %d)", source, extra.Line)
	}
	// The decoder truncates 1.5 into an integer field without a word, so
	// the integer fields are checked on the node tree.
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("image %s: %w", source, err)
	}
	if err := checkWholeNumbers(&root, reflect.TypeFor[Image](), ""); err != nil {
		return nil, fmt.Errorf("image %s: %w", source, err)
	}
	if err := im.Validate(); err != nil {
		return nil, fmt.Errorf("image %s: %w", source, err)
	}
	return &im, nil
}

// checkWholeNumbers walks n beside the Go type t it decodes into and refuses
// a scalar that is not a YAML integer where t has an integer field.
func checkWholeNumbers(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch {
	case n.Kind == yaml.DocumentNode:
		for _, c := range n.Content {
			if err := checkWholeNumbers(c, t, path); err != nil {
				return err
			}
		}
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Struct:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			for j := range t.NumField() {
				f := t.Field(j)
				if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == key {
					field := key
					if path != "" {
						field = path + "." + key
					}
					if err := checkWholeNumbers(n.Content[i+1], f.Type, field); err != nil {
						return err
					}
				}
			}
		}
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		for i, c := range n.Content {
			if err := checkWholeNumbers(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case n.Kind == yaml.ScalarNode && t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		if tag := n.ShortTag(); tag != "!!int" && tag != "!!null" {
			return fmt.Errorf("%s: %s must be a whole number", path, n.Value)
		}
	}
	return nil
}

// Load reads an image definition from a file.
func Load(path string) (*Image, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return Parse(path, data)
}

// Validate checks im's fields as Parse does a file's (all but the whole
// numbers, which a Go value holds already) and fills in the defaults of
// the completion gate, the tool projection and the context window. The
// error names the field and the rule.
func (im *Image) Validate() error {
	if !identRe().MatchString(im.Name) {
		return fmt.Errorf("name: %q must be lowercase letters, digits, '.', '_' or '-' (at most 64)", im.Name)
	}
	if !identRe().MatchString(im.Version) {
		return fmt.Errorf("version: %q must be lowercase letters, digits, '.', '_' or '-' (at most 64)", im.Version)
	}
	if strings.TrimSpace(im.SystemPrompt) == "" {
		return errors.New("system_prompt: required")
	}
	if len(im.Tools) == 0 {
		return fmt.Errorf("tools: required (list tool names, or %q for every built-in tool)", BuiltinTools)
	}
	seen := map[string]bool{}
	for i, t := range im.Tools {
		if t == "" {
			return fmt.Errorf("tools[%d]: empty tool name", i)
		}
		if seen[t] {
			return fmt.Errorf("tools[%d]: %q listed twice", i, t)
		}
		seen[t] = true
	}
	switch im.CompletionGate {
	case "":
		im.CompletionGate = GateOnePhase
	case GateOnePhase, GateCumulativeReview:
	default:
		return fmt.Errorf("completion_gate: %q must be %q or %q", im.CompletionGate, GateOnePhase, GateCumulativeReview)
	}
	switch im.ToolProjection {
	case "":
		im.ToolProjection = ProjectionAll
	case ProjectionAll, ProjectionSkills:
	default:
		return fmt.Errorf("tool_projection: %q must be %q or %q", im.ToolProjection, ProjectionAll, ProjectionSkills)
	}
	for i, c := range im.Capabilities {
		if c.Resource == "" {
			return fmt.Errorf("capabilities[%d].resource: required", i)
		}
		if err := capabilities.ValidateResource(c.Resource); err != nil {
			return fmt.Errorf("capabilities[%d].resource: %w", i, err)
		}
		if len(c.Rights) == 0 {
			return fmt.Errorf("capabilities[%d].rights: required", i)
		}
		for j, r := range c.Rights {
			// One right per element, written exactly: ParseRights alone
			// would take "read,write" or " read".
			parsed, err := capabilities.ParseRights(r)
			if err == nil && (len(parsed) != 1 || string(parsed[0]) != r) {
				err = fmt.Errorf("%w %q: one right per element, without spaces", capabilities.ErrInvalidRight, r)
			}
			if err != nil {
				return fmt.Errorf("capabilities[%d].rights[%d]: %w", i, j, err)
			}
			if slices.Contains(c.Rights[:j], r) {
				return fmt.Errorf("capabilities[%d].rights[%d]: %q listed twice", i, j, r)
			}
		}
	}
	for i, s := range im.Skills {
		if strings.TrimSpace(s) == "" {
			return fmt.Errorf("skills[%d]: empty skill name", i)
		}
		if slices.Contains(im.Skills[:i], s) {
			return fmt.Errorf("skills[%d]: %q listed twice", i, s)
		}
	}
	if im.MaxTurnsWithoutToolCall < 0 {
		return fmt.Errorf("max_turns_without_tool_call: %d must be >= 0 (0 means the default, %d)", im.MaxTurnsWithoutToolCall, DefaultMaxTurnsWithoutToolCall)
	}
	b := im.Budget
	for name, v := range map[string]int64{"tool_calls": b.ToolCalls, "llm_calls": b.LLMCalls, "llm_tokens": b.LLMTokens, "children": b.Children, "wall_seconds": b.WallSeconds} {
		if v < 0 {
			return fmt.Errorf("budget.%s: %d must be >= 0 (0 means unlimited)", name, v)
		}
	}
	cc := &im.Context
	if cc.WindowTokens < 0 {
		return fmt.Errorf("context.window_tokens: %d must be >= 0 (0 means %d)", cc.WindowTokens, DefaultWindowTokens)
	}
	if cc.MaxOutputTokens < 0 {
		return fmt.Errorf("context.max_output_tokens: %d must be >= 0 (0 leaves it to the model)", cc.MaxOutputTokens)
	}
	if cc.WindowTokens == 0 {
		cc.WindowTokens = DefaultWindowTokens
	}
	if cc.MaxOutputTokens >= cc.WindowTokens {
		return fmt.Errorf("context.max_output_tokens: %d must be less than window_tokens (%d)", cc.MaxOutputTokens, cc.WindowTokens)
	}
	if cc.WindowTokens < cc.MaxOutputTokens+MinPromptTokens {
		return fmt.Errorf("context.window_tokens: %d must be at least max_output_tokens (%d) plus %d tokens for the prompt", cc.WindowTokens, cc.MaxOutputTokens, MinPromptTokens)
	}
	return nil
}

//go:embed builtin/*.yaml
var builtinFS embed.FS

// builtins are parsed on first use rather than at package init, which every
// libos command (and every re-executed worker) would otherwise pay for.
var builtins = sync.OnceValue(func() map[string]*Image {
	m := map[string]*Image{}
	entries, err := fs.ReadDir(builtinFS, "builtin")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		data, err := builtinFS.ReadFile("builtin/" + e.Name())
		if err != nil {
			panic(err)
		}
		im, err := Parse("builtin/"+e.Name(), data)
		if err != nil {
			panic(err) // a broken built-in image is a build defect
		}
		m[im.Ref()] = im
	}
	return m
})

// Builtin returns a copy of the built-in image ref ("name:version").
func Builtin(ref string) (*Image, error) {
	im, ok := builtins()[ref]
	if !ok {
		return nil, fmt.Errorf("%w %q (built-in images: %s)", ErrUnknownImage, ref, strings.Join(BuiltinRefs(), ", "))
	}
	c := *im
	return &c, nil
}

// BuiltinRefs lists the built-in image references, sorted.
func BuiltinRefs() []string {
	all := builtins()
	refs := make([]string, 0, len(all))
	for r := range all {
		refs = append(refs, r)
	}
	sort.Strings(refs)
	return refs
}
