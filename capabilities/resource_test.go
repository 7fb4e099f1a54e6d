package capabilities

import "testing"

// A scope is an opaque string: its resource name encodes what a resource
// may not hold, one-to-one, so no grant names two scopes.
func TestScopeResourceEncodesOneToOne(t *testing.T) {
	for scope, want := range map[string]string{
		"repo.read":                     "scope:repo.read",
		"opaque capability with spaces": "scope:opaque%20capability%20with%20spaces",
		"100%":                          "scope:100%25",
		"a%20b":                         "scope:a%2520b",
		"tab\there":                     "scope:tab%09here",
		"non\u00a0breaking":             "scope:non%C2%A0breaking",
	} {
		got := ScopeResource(scope)
		if got != want {
			t.Errorf("ScopeResource(%q) = %q, want %q", scope, got, want)
		}
		if err := ValidateResource(got); err != nil {
			t.Errorf("ScopeResource(%q): %v", scope, err)
		}
	}
}
