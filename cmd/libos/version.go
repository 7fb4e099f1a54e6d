package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
)

// buildVersion is libos's version as the build recorded it: the module
// version of a released build, else "devel", with the commit when the build
// recorded one.
type buildVersion struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go,omitempty"`
}

func readBuildVersion() buildVersion {
	v := buildVersion{Version: "devel"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.Go = info.GoVersion
	if mv := info.Main.Version; mv != "" && mv != "(devel)" {
		v.Version = mv
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func (v buildVersion) String() string {
	s := "libos " + v.Version
	if v.Revision != "" {
		rev := v.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if v.Modified {
			rev += ", modified"
		}
		s += " (" + rev + ")"
	}
	return s
}

func versionCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("libos version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	if !parseNoPositional(fs, args, stderr) {
		return exitUsage
	}
	v := readBuildVersion()
	if *asJSON {
		b, _ := json.Marshal(v)
		fmt.Fprintln(stdout, string(b))
		return exitOK
	}
	fmt.Fprintln(stdout, v)
	return exitOK
}
