package main

import (
	"flag"
	"fmt"
	"io"
)

// parseInterspersed parses fs's flags wherever they appear among args and
// returns the positional arguments in order. The standard flag package stops
// at the first positional argument; every libos subcommand accepts flags before
// or after its positionals. Everything after a literal "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		// flag.Parse swallows a "--" terminator; what follows it is verbatim.
		if consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		if len(rest) == 0 {
			return positional, nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// parseNoPositional parses the flags of a subcommand that takes no
// positional argument, reporting a stray one on stderr.
func parseNoPositional(fs *flag.FlagSet, args []string, stderr io.Writer) bool {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return false
	}
	if len(pos) != 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), pos[0])
		return false
	}
	return true
}
