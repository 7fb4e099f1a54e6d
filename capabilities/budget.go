package capabilities

import (
	"errors"
	"fmt"
	"math"
)

// Budget counts the resources a process spends. As limits, 0 means unlimited.
type Budget struct {
	ToolCalls   int64 `json:"tool_calls"`
	LLMCalls    int64 `json:"llm_calls"`
	LLMTokens   int64 `json:"llm_tokens"`
	Children    int64 `json:"children"`
	WallSeconds int64 `json:"wall_seconds"`
}

// Budget names, as used in JSON and in errors.
const (
	BudgetToolCalls   = "tool_calls"
	BudgetLLMCalls    = "llm_calls"
	BudgetLLMTokens   = "llm_tokens"
	BudgetChildren    = "children"
	BudgetWallSeconds = "wall_seconds"
)

// budgetField is one named field of a Budget.
type budgetField struct {
	name  string
	index int
}

// get returns the field of b. A static call, not a function value: escape
// analysis then keeps the Budgets it is given on the stack.
func (f budgetField) get(b *Budget) *int64 {
	switch f.index {
	case 0:
		return &b.ToolCalls
	case 1:
		return &b.LLMCalls
	case 2:
		return &b.LLMTokens
	case 3:
		return &b.Children
	default:
		return &b.WallSeconds
	}
}

// budgetFields lists the fields in the order they are checked and reported.
var budgetFields = [...]budgetField{
	{BudgetToolCalls, 0},
	{BudgetLLMCalls, 1},
	{BudgetLLMTokens, 2},
	{BudgetChildren, 3},
	{BudgetWallSeconds, 4},
}

// Sentinel errors for budgets.
var (
	// ErrBudgetExhausted is wrapped by the *BudgetError Charge returns when a
	// limit would be exceeded.
	ErrBudgetExhausted = errors.New("budget exhausted")
	// ErrInvalidBudget is wrapped by errors about malformed budgets or charges
	// (negative numbers, an empty or cyclic chain, overflow).
	ErrInvalidBudget = errors.New("invalid budget")
)

// Validate checks that no field is negative; the error names the field.
func (b Budget) Validate() error {
	for _, f := range budgetFields {
		if v := *f.get(&b); v < 0 {
			return fmt.Errorf("%w: %s: %d must not be negative", ErrInvalidBudget, f.name, v)
		}
	}
	return nil
}

// Min returns the tighter limit per field, treating 0 as unlimited: a child's
// limits are its image's defaults lowered by what the spawn request asks.
func (b Budget) Min(o Budget) Budget {
	out := b
	for _, f := range budgetFields {
		x, y := f.get(&out), *f.get(&o)
		if *x == 0 || (y != 0 && y < *x) {
			*x = y
		}
	}
	return out
}

// Account is one process's budget: its limits and what it has used.
type Account struct {
	PID    int64  `json:"pid"`
	Limits Budget `json:"limits"`
	Used   Budget `json:"used"`
}

// BudgetError says which budget of which process a charge would exceed. It
// wraps ErrBudgetExhausted.
type BudgetError struct {
	Budget    string // "tool_calls", "llm_calls", "llm_tokens", "children" or "wall_seconds"
	PID       int64
	Limit     int64
	Used      int64
	Requested int64
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("%v: %s of process %d: limit %d, used %d, this call needs %d more",
		ErrBudgetExhausted, e.Budget, e.PID, e.Limit, e.Used, e.Requested)
}

// Unwrap returns ErrBudgetExhausted.
func (e *BudgetError) Unwrap() error { return ErrBudgetExhausted }

// Charge adds delta to the Used budget of every account in chain: the process
// first, then each ancestor up to the root; wall seconds, though, only to
// the process, since a descendant's time passes within its ancestors' own,
// which each charges at its own calls. It is all or nothing: if any
// account would go over any of its limits, nothing is charged and the error is
// a *BudgetError for the first such account and budget. The input is not
// mutated; the result is a new slice in the same order.
//
// A negative delta, negative limits or usage, an empty chain or a pid listed
// twice is refused with an error wrapping ErrInvalidBudget.
func Charge(chain []Account, delta Budget) ([]Account, error) {
	if len(chain) == 0 {
		return nil, fmt.Errorf("%w: chain: must list the charged process first, then its ancestors", ErrInvalidBudget)
	}
	if err := delta.Validate(); err != nil {
		return nil, fmt.Errorf("charge: %w", err)
	}
	out := make([]Account, len(chain))
	for i, a := range chain {
		for _, prev := range chain[:i] {
			if prev.PID == a.PID {
				return nil, fmt.Errorf("%w: chain: process %d listed twice", ErrInvalidBudget, a.PID)
			}
		}
		if err := a.Limits.Validate(); err != nil {
			return nil, fmt.Errorf("process %d limits: %w", a.PID, err)
		}
		if err := a.Used.Validate(); err != nil {
			return nil, fmt.Errorf("process %d used: %w", a.PID, err)
		}
		next := a
		for _, f := range budgetFields {
			used, add, limit := *f.get(&a.Used), *f.get(&delta), *f.get(&a.Limits)
			if add == 0 || (i > 0 && f.name == BudgetWallSeconds) {
				continue
			}
			if used > math.MaxInt64-add {
				return nil, fmt.Errorf("%w: %s of process %d: %d + %d overflows", ErrInvalidBudget, f.name, a.PID, used, add)
			}
			if limit != 0 && used+add > limit {
				return nil, &BudgetError{Budget: f.name, PID: a.PID, Limit: limit, Used: used, Requested: add}
			}
			*f.get(&next.Used) = used + add
		}
		out[i] = next
	}
	return out, nil
}
