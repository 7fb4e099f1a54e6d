// Command jsonschema links only github.com/santhosh-tekuri/jsonschema/v6,
// whose package init compiles every draft's meta-schema: its start-up shows
// the share of libos's start-up that this one dependency sets.
package main

import (
	"fmt"

	_ "github.com/santhosh-tekuri/jsonschema/v6"
)

func main() { fmt.Println("jsonschema") }
