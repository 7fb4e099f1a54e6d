package skillpkg

import (
	"errors"
	"fmt"
	"strings"
)

// ProviderKeyEnv is the variable the Host reads the model provider's API key
// from. A runner may never declare it.
const ProviderKeyEnv = "OPENAI_API_KEY"

// ErrCredentialEnvironment is matched by every refusal of a credential-like
// variable name in a runner's environment: at admission (in addition to
// ErrAdmission), when resolving values (ResolveEnvironment) and by the
// runners themselves.
var ErrCredentialEnvironment = errors.New("credential variable refused")

// credentialWords are names that are credentials on their own, compared in
// upper case.
var credentialWords = map[string]bool{
	"API_KEY": true, "APIKEY": true, "TOKEN": true, "SECRET": true,
	"PASSWORD": true, "PASSWD": true, "CREDENTIAL": true, "CREDENTIALS": true,
}

// CredentialRule is the rule IsCredentialName applies, worded for error
// messages.
const CredentialRule = "credentials never flow through the environment channel: " +
	ProviderKeyEnv + ", API_KEY, TOKEN, SECRET, PASSWORD, CREDENTIALS and names matching " +
	"*_API_KEY, *_TOKEN, *_SECRET*, SECRET_*, *PASSWORD*, *PASSWD*, *_CREDENTIAL or *_CREDENTIALS (any case) are refused"

// MatchCredentialName reports whether name looks like a credential and, if
// so, which part of CredentialRule it matched ("*_TOKEN", "OPENAI_API_KEY",
// ...). Matching ignores case, because the environment channel must not carry
// a credential whatever its spelling.
func MatchCredentialName(name string) (pattern string, ok bool) {
	u := strings.ToUpper(name)
	switch {
	case u == ProviderKeyEnv:
		return ProviderKeyEnv, true
	case credentialWords[u]:
		return u, true
	case strings.Contains(u, "PASSWORD"):
		return "*PASSWORD*", true
	case strings.Contains(u, "PASSWD"):
		return "*PASSWD*", true
	case strings.Contains(u, "_SECRET"):
		return "*_SECRET*", true
	case strings.HasPrefix(u, "SECRET_"):
		return "SECRET_*", true
	}
	for _, suffix := range []string{"_API_KEY", "_APIKEY", "_TOKEN", "_CREDENTIALS", "_CREDENTIAL"} {
		if strings.HasSuffix(u, suffix) {
			return "*" + suffix, true
		}
	}
	return "", false
}

// IsCredentialName reports whether name looks like a credential and so may
// never be declared in, resolved for or passed through a runner's
// environment. It is the one place this rule lives.
func IsCredentialName(name string) bool {
	_, ok := MatchCredentialName(name)
	return ok
}

// CheckEnvironmentName returns nil for an ordinary variable name and, for a
// credential-like one, an error matching ErrCredentialEnvironment that names
// the variable and the pattern it matched. Callers add the runner.
func CheckEnvironmentName(name string) error {
	if pattern, ok := MatchCredentialName(name); ok {
		return fmt.Errorf("%w: %s matches %s; %s", ErrCredentialEnvironment, name, pattern, CredentialRule)
	}
	return nil
}
