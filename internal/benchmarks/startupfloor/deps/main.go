// Command deps links every third-party package libos's packages import and
// does nothing else, so its start-up is the floor that their package
// initialisation alone sets for libos's (libos bench's startup row runs it).
// TestFloorLinksLibosDependencies keeps this list equal to libos's.
package main

import (
	"fmt"

	_ "github.com/cockroachdb/pebble/v2"
	_ "github.com/cockroachdb/pebble/v2/bloom"
	_ "github.com/cockroachdb/pebble/v2/vfs"
	_ "github.com/dop251/goja"
	_ "github.com/dop251/goja/parser"
	_ "github.com/evanw/esbuild/pkg/api"
	_ "github.com/google/uuid"
	_ "github.com/santhosh-tekuri/jsonschema/v6"
	_ "github.com/santhosh-tekuri/jsonschema/v6/kind"
	_ "github.com/sashabaranov/go-openai"
	_ "golang.org/x/sys/unix"
	_ "gopkg.in/yaml.v3"
)

func main() { fmt.Println("deps") }
