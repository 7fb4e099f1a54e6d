package main

import (
	"flag"
	"io"
	"reflect"
	"testing"
)

func TestParseInterspersed(t *testing.T) {
	cases := []struct {
		args    []string
		wantPos []string
		wantDir string
		wantV   bool
	}{
		{[]string{"img", "--dir", "d"}, []string{"img"}, "d", false},
		{[]string{"--dir", "d", "img", "-v"}, []string{"img"}, "d", true},
		{[]string{"a", "-v", "b"}, []string{"a", "b"}, "", true},
		{[]string{"a", "--", "-v", "--dir"}, []string{"a", "-v", "--dir"}, "", false},
		{nil, nil, "", false},
	}
	for _, c := range cases {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		dir := fs.String("dir", "", "")
		v := fs.Bool("v", false, "")
		pos, err := parseInterspersed(fs, c.args)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if !reflect.DeepEqual(pos, c.wantPos) || *dir != c.wantDir || *v != c.wantV {
			t.Errorf("%v: got pos=%v dir=%q v=%v", c.args, pos, *dir, *v)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := parseInterspersed(fs, []string{"a", "--nope"}); err == nil {
		t.Fatal("unknown flag after a positional must be an error")
	}
}
