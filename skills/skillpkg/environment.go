package skillpkg

import (
	"errors"
	"fmt"
)

// ErrMissingEnvironment is matched by the error ResolveEnvironment returns
// when a required variable is not set.
var ErrMissingEnvironment = errors.New("required environment variable missing")

// ResolveEnvironment reads the declared names through lookup (os.LookupEnv or
// a stand-in). A required name that is not set is an error naming it; an
// optional name that is not set is omitted. A variable set to the empty
// string counts as set. Undeclared names are never read, and neither is a
// credential-like name (IsCredentialName), even if admission was bypassed: the
// error then matches ErrCredentialEnvironment and nothing has been read.
func ResolveEnvironment(env Environment, lookup func(string) (string, bool)) (map[string]string, error) {
	for _, name := range env.Names() {
		if err := CheckEnvironmentName(name); err != nil {
			return nil, err
		}
	}
	out := make(map[string]string, len(env.Required)+len(env.Optional))
	for _, name := range env.Required {
		v, ok := lookup(name)
		if !ok {
			return nil, fmt.Errorf("%w: %s is declared in environment.required and is not set", ErrMissingEnvironment, name)
		}
		out[name] = v
	}
	for _, name := range env.Optional {
		if v, ok := lookup(name); ok {
			out[name] = v
		}
	}
	return out, nil
}
