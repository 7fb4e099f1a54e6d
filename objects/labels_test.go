package objects

import (
	"fmt"
	"strings"
	"testing"
)

// The store bounds labels itself, for creates and writes alike: their
// count and each value's bytes (keys are identifiers). Labels are kept in
// durable metadata whatever the payload's tier and repeated by every
// listing, so the payload's bound does not cover them.
func TestLabelsAreBounded(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	defer closeTest(t, s)
	many := func(n, valueBytes int) map[string]string {
		m := map[string]string{}
		for i := 0; i < n; i++ {
			m[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", valueBytes)
		}
		return m
	}
	m := create(t, s, CreateSpec{Namespace: "ns", Name: "full", Kind: "k", Labels: many(MaxLabels, MaxLabelValueLen)})
	cases := []struct {
		name   string
		labels map[string]string
		rule   string
	}{
		{"too many", many(MaxLabels+1, 1), "labels: must have at most 64 labels, got 65"},
		{"long value", map[string]string{"big": strings.Repeat("<", 3<<20)}, `labels["big"]: value must be at most 1024 bytes, got 3145728`},
		{"long key", map[string]string{strings.Repeat("k", MaxIdentLen+1): "v"}, "labels key: must be at most 256 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := s.Update(func(tx *Txn) error {
				_, err := tx.Create(CreateSpec{Namespace: "ns", Name: "n", Kind: "k", Labels: c.labels})
				return err
			})
			wantErr(t, err, ErrInvalid)
			if !strings.Contains(err.Error(), c.rule) {
				t.Fatalf("create: %q does not contain %q", err, c.rule)
			}
			err = s.Update(func(tx *Txn) error {
				_, err := tx.Write(m.OID, m.Version, WriteSpec{KeepPayload: true, Labels: c.labels})
				return err
			})
			wantErr(t, err, ErrInvalid)
			if !strings.Contains(err.Error(), c.rule) {
				t.Fatalf("write: %q does not contain %q", err, c.rule)
			}
		})
	}
	if events, _ := s.Events(0, 0); len(events) != 1 {
		t.Fatalf("refused label changes left events: %d", len(events))
	}
}
