package capabilities

import "testing"

// A grant list put together from two sources keeps its ids unique: a later
// grant under a taken id takes a suffix, and ValidateGrants accepts it.
func TestWithUniqueIDs(t *testing.T) {
	in := []Grant{
		{ID: "inherited:a", Resource: "clock:now", Rights: []Right{Read}, Effect: Deny},
		{ID: "b", Resource: "clock:now", Rights: []Right{Read}},
		{ID: "inherited:a", Resource: "clock:sleep", Rights: []Right{Read}, Effect: Deny},
	}
	out := WithUniqueIDs(in)
	if out[0].ID != "inherited:a" || out[1].ID != "b" || out[2].ID != "inherited:a~2" || in[2].ID != "inherited:a" {
		t.Fatalf("ids %q %q %q (input %q)", out[0].ID, out[1].ID, out[2].ID, in[2].ID)
	}
	if err := ValidateGrants(out); err != nil {
		t.Fatalf("the list is not valid: %v", err)
	}
	if err := ValidateGrants(in); err == nil {
		t.Fatal("the input list was valid; the test shows nothing")
	}
}
