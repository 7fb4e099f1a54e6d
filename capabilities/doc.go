// Package capabilities decides what an AgentProcess may do.
//
// It is a pure core: every function takes its inputs explicitly, returns new
// values instead of mutating its arguments, and does no I/O. The kernel keeps
// grants and budget accounts in its process records and calls these functions
// before any effect; persisting the results is the caller's job.
//
// A grant list is a value: nothing here edits a list, a grant or what a grant
// points to once it is built, and every change (Reserve, Restore, Attenuate)
// returns a new list. Holders may therefore share one list between copies of
// a record, and must replace it to change it, never edit it in place.
//
// Authority is deny by default. A Grant gives (or, with EffectDeny, takes away)
// Rights on a resource: an exact resource name such as "clock:now", or a prefix
// pattern whose only '*' is its last character, such as "object_namespace:proj-*".
// Rights do not imply each other: "admin" does not include "read".
//
// One-shot grants carry UsesRemaining. A caller reserves a use before the effect
// (Reserve) and gives it back (Restore) only when the effect certainly did not
// start, so a crash or an unknown outcome never refunds authority.
//
// Budgets are limits on tool calls, LLM calls, LLM tokens, children and wall
// seconds. Charge applies a usage delta to a process and all its ancestors at
// once, or to none of them.
package capabilities
