package kernel

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/libos/libos/images"
	"github.com/libos/libos/process"
	"github.com/libos/libos/tools"
)

func imageWithTools(name, version string, toolNames ...string) *images.Image {
	return &images.Image{Name: name, Version: version, SystemPrompt: "test", Tools: toolNames,
		CompletionGate: images.GateOnePhase, ToolProjection: images.ProjectionAll}
}

// openRefused opens a runtime that must be refused with want, before the
// runtime directory is created.
func openRefused(t *testing.T, opts Options, want string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "rt")
	rt, err := Open(dir, opts)
	if err == nil {
		rt.Close()
		t.Fatalf("Open succeeded; want an error containing %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("Open error = %v; want it to contain %q", err, want)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a refused Open created the runtime directory (stat: %v)", err)
	}
}

// A tool table naming a tool nobody provides is refused at Open: the
// kernel would otherwise drop the name and show the model less than the
// image says.
func TestOpenRefusesImageWithUnknownTool(t *testing.T) {
	im := imageWithTools("typo", "v0", "get_curent_time", "process_exit")
	openRefused(t, Options{Images: map[string]*images.Image{"typo:v0": im}},
		`Options.Images["typo:v0"]: tools[0]: "get_curent_time" does not resolve in the tool catalog`)

	// A skill's tool resolves only when the catalog provides it.
	withSkill := imageWithTools("echo", "v0", images.BuiltinTools, "slow_echo")
	openRefused(t, Options{Images: map[string]*images.Image{"echo:v0": withSkill}},
		`Options.Images["echo:v0"]: tools[1]: "slow_echo" does not resolve`)
	var runs atomic.Int32
	rt, err := Open(t.TempDir(), Options{Images: map[string]*images.Image{"echo:v0": withSkill},
		Skills: testCatalog{tools: []*tools.Tool{effectTool(&runs, nil)}}})
	if err != nil {
		t.Fatalf("an image naming built-in and skill tools: %v", err)
	}
	rt.Close()
}

// An image keyed by another reference than its own would spawn and then
// fail at its first quantum; Open refuses it, naming both references.
func TestOpenRefusesImageKeyedByAnotherRef(t *testing.T) {
	openRefused(t, Options{Images: map[string]*images.Image{"alias:v0": imageWithTools("real", "v1", images.BuiltinTools)}},
		`Options.Images["alias:v0"]: the image is real:v1; an image must be keyed by its own name:version`)
	openRefused(t, Options{Images: map[string]*images.Image{"gone:v0": nil}}, `Options.Images["gone:v0"]: nil image`)
}

// An image a Host builds in Go is checked as an image file is: a window
// that cannot hold an answer and a prompt, a negative budget or a skills
// list naming a skill the catalog lacks is refused at Open, naming the
// field; an image leaving defaults unset runs with them, and the Host's
// value is not changed.
func TestOpenChecksImagesBuiltInGo(t *testing.T) {
	tiny := imageWithTools("tiny", "v0", images.BuiltinTools)
	tiny.Context = images.ContextConfig{Object: true, WindowTokens: 1}
	openRefused(t, Options{Images: map[string]*images.Image{"tiny:v0": tiny}},
		`Options.Images["tiny:v0"]: context.window_tokens: 1 must be at least max_output_tokens (0) plus 1024 tokens for the prompt`)

	spent := imageWithTools("spent", "v0", images.BuiltinTools)
	spent.Budget.ToolCalls = -1
	openRefused(t, Options{Images: map[string]*images.Image{"spent:v0": spent}},
		`Options.Images["spent:v0"]: budget.tool_calls: -1 must be >= 0`)

	skilled := imageWithTools("skilled-typo", "v0", images.BuiltinTools)
	skilled.Skills = []string{"echoer", "echoe"}
	openRefused(t, Options{Images: map[string]*images.Image{"skilled-typo:v0": skilled}, Skills: testCatalog{}},
		`Options.Images["skilled-typo:v0"]: skills[1]: "echoe" is not a skill of the catalog (Options.Skills)`)
	openRefused(t, Options{Images: map[string]*images.Image{"skilled-typo:v0": skilled}},
		`Options.Images["skilled-typo:v0"]: skills[0]: "echoer" is not a skill of the catalog`)

	bare := &images.Image{Name: "bare", Version: "v0", SystemPrompt: "test", Tools: []string{images.BuiltinTools}}
	h := newHarness(t, `
processes:
  - image: bare:v0
    turns:
      - tool_calls:
          - name: process_exit
            arguments: {message: done}
`, func(o *Options) { o.Images = map[string]*images.Image{"bare:v0": bare} })
	pid, err := h.rt.Spawn(SpawnSpec{Image: "bare:v0", Goal: "exit"})
	if err != nil {
		t.Fatal(err)
	}
	h.run()
	if info := h.info(pid); info.Status != process.Exited {
		t.Fatalf("an image with its defaults unset: %s (%s)", info.Status, info.Reason)
	}
	if bare.CompletionGate != "" || bare.Context.WindowTokens != 0 {
		t.Fatalf("Open changed the Host's image: %+v", bare)
	}
}
