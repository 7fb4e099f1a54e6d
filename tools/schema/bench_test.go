package schema

import (
	"encoding/json"
	"strings"
	"testing"
)

// benchArgs are arguments of the shape tool calls carry: a few scalars, and
// a nested payload for the larger case.
func benchArgs() (small, large json.RawMessage) {
	small = json.RawMessage(`{"recipient_pid": 1, "body": "the build passed; 3 warnings", "kind": "normal", "channel": "ci"}`)
	var b strings.Builder
	b.WriteString(`{"recipient_pid": 1, "body": "report", "payload": {"runs": [`)
	for i := range 200 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"id": 12345, "name": "step \"compile\"", "ok": true, "ms": 1.25, "tags": ["a", "b"], "env": {"GOOS": "linux", "GOARCH": "amd64"}}`)
	}
	b.WriteString(`]}}`)
	return small, json.RawMessage(b.String())
}

func benchSchema() *Schema {
	return Object(map[string]*Schema{
		"recipient_pid": {Type: "integer", Minimum: Ptr(1.0)},
		"body":          {Type: "string", MaxLength: Ptr(32000)},
		"payload":       {},
		"kind":          {Type: "string", Enum: []any{"normal", "interrupt"}, Default: "normal"},
		"channel":       {Type: "string", MinLength: Ptr(1), MaxLength: Ptr(256), Default: "default"},
	}, "recipient_pid", "body")
}

func BenchmarkNormalize(b *testing.B) {
	small, large := benchArgs()
	for _, c := range []struct {
		name string
		raw  json.RawMessage
	}{{"small", small}, {"large", large}} {
		b.Run(c.name, func(b *testing.B) {
			s := benchSchema()
			b.SetBytes(int64(len(c.raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Normalize(c.raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
