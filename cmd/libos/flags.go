package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

// defaultDir is the runtime directory a command uses without --dir:
// $LIBOS_DIR, else ./.libos.
func defaultDir() string {
	if d := os.Getenv("LIBOS_DIR"); d != "" {
		return d
	}
	return "./.libos"
}

// dirFlag registers the --dir flag every command that opens a runtime
// directory takes. An empty value (an unset shell variable) is refused: it
// would mean the current directory.
func dirFlag(fs *flag.FlagSet) *string {
	d := dirValue(defaultDir())
	fs.Var(&d, "dir", "runtime `DIR` ($LIBOS_DIR sets the default)")
	return (*string)(&d)
}

// dirValue is a --dir value: any path but an empty one.
type dirValue string

func (d *dirValue) String() string { return string(*d) }
func (d *dirValue) Set(v string) error {
	if v == "" {
		return errors.New("must not be empty (an unset variable?)")
	}
	*d = dirValue(v)
	return nil
}

// parseInterspersed parses fs's flags wherever they appear among args and
// returns the positional arguments in order. The standard flag package stops
// at the first positional argument; every libos subcommand accepts flags before
// or after its positionals. Everything after a literal "--" is positional.
//
// A mistake prints one line naming it and where the help is, not the whole
// flag list; -h or --help prints the command's usage (see printHelp) and
// returns flag.ErrHelp.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	out := fs.Output()
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	defer fs.SetOutput(out)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			fs.SetOutput(out)
			if errors.Is(err, flag.ErrHelp) {
				printHelp(fs)
				return nil, err
			}
			if own := ownSetError(fs); own != nil {
				err = own
			}
			usageError(out, fs.Name(), "%v", err)
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

// selfExplaining is a flag value whose Set errors name the flag, the value
// and the rule already.
type selfExplaining interface {
	setError() error
}

// ownSetError is the error of a selfExplaining value of fs that refused its
// value, if one did: printed as it is, not inside the flag package's
// "invalid value V for flag -F: ...", which would say the value twice.
// Parsing stops at the first refusal, so at most one value has an error.
func ownSetError(fs *flag.FlagSet) error {
	var own error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := f.Value.(selfExplaining); ok && own == nil {
			own = v.setError()
		}
	})
	return own
}

// parseNoPositional parses the flags of a subcommand that takes no
// positional argument, reporting a stray one on stderr.
func parseNoPositional(fs *flag.FlagSet, args []string, stderr io.Writer) bool {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return false
	}
	if len(pos) != 0 {
		usageError(stderr, fs.Name(), "unexpected argument %q", pos[0])
		return false
	}
	return true
}

// usageError prints what is wrong with a command line on one line, and
// where the command's usage is, on w; it returns exitUsage.
func usageError(w io.Writer, command, format string, args ...any) int {
	fmt.Fprintf(w, "%s: %s\nRun '%s --help' for usage.\n", command, fmt.Sprintf(format, args...), command)
	return exitUsage
}

// printHelp prints fs's command usage (its synopsis, with the positional
// arguments, and its flags). When the command runs under run, the text goes
// to stdout and the command's exit status becomes 0: help asked for is not
// an error.
func printHelp(fs *flag.FlagSet) {
	w := fs.Output()
	if s, ok := w.(*stderrStream); ok {
		s.helped = true
		w = s.stdout
	}
	writeHelp(w, fs)
}

func writeHelp(w io.Writer, fs *flag.FlagSet) {
	c := lookupSynopsis(fs.Name())
	fmt.Fprintf(w, "usage: %s\n", c.synopsis)
	if c.summary != "" {
		fmt.Fprintf(w, "\n%s\n", c.summary)
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintf(w, "\nflags:\n")
		out := fs.Output()
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(out)
	}
}

// stderrStream is the stderr run hands to a command. It also carries
// stdout, where help that was asked for goes, and records that it was
// printed.
type stderrStream struct {
	io.Writer
	stdout io.Writer
	helped bool
}
