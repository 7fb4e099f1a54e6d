package catalog_test

import (
	"encoding/json"
	"testing"

	"github.com/libos/libos/skills/skillpkg"
	"github.com/libos/libos/tools/schema"
)

// The two JSON Schema validators on a typical tool argument object (the
// shape of compact_process_context's: ranged integers, a boolean, defaults,
// additionalProperties false), to weigh replacing tools/schema with the
// library skill packages use. tools/schema also fills defaults and
// canonicalizes; the library only validates.
func benchSchemas(b *testing.B) (*schema.Schema, *skillpkg.Schema, json.RawMessage) {
	s := schema.Object(map[string]*schema.Schema{
		"target_tokens":           {Type: "integer", Minimum: schema.Ptr(256.0), Maximum: schema.Ptr(1e6), Default: 4000},
		"preserve_recent_entries": {Type: "integer", Minimum: schema.Ptr(0.0), Maximum: schema.Ptr(1000.0), Default: 8},
		"max_chunks":              {Type: "integer", Minimum: schema.Ptr(1.0), Maximum: schema.Ptr(64.0), Default: 8},
		"force":                   {Type: "boolean", Default: false},
		"note":                    {Type: "string", MaxLength: schema.Ptr(200)},
	})
	raw, err := json.Marshal(s)
	if err != nil {
		b.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		b.Fatal(err)
	}
	lib, err := skillpkg.CompileSchema(doc)
	if err != nil {
		b.Fatal(err)
	}
	return s, lib, json.RawMessage(`{"target_tokens":3000,"preserve_recent_entries":4,"force":true,"note":"compact the older half"}`)
}

func BenchmarkToolSchemaHandWritten(b *testing.B) {
	s, _, args := benchSchemas(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Normalize(args); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkToolSchemaLibrary(b *testing.B) {
	_, lib, args := benchSchemas(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := lib.Validate(args); err != nil {
			b.Fatal(err)
		}
	}
}
