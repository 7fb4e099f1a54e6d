package quantum

import "time"

// Prompt is the size, in estimated tokens, of what a provider call sends and
// may receive.
type Prompt struct {
	Context, System, Goal int
	// Tools is the tool table the request carries (names, descriptions,
	// schemas): often as large as a young context.
	Tools int
	// MaxOutput is the most the reply may hold.
	MaxOutput int
}

// Reservation is what a call reserves of the token budget up the ancestor
// chain before it starts: the whole prompt plus the most the reply may hold.
// A crash after the reservation leaves it charged, never an uncharged call.
func (p Prompt) Reservation() int64 {
	return int64(p.Context + p.System + p.Goal + p.Tools + p.MaxOutput)
}

// Pressure is what context maintenance is asked to judge: the projected size
// of the next call against the window it must fit.
type Pressure struct {
	Projected, Window int
}

// Pressure projects the call against window. When the server refused the
// last prompt as over its window (serverRefused), its word beats the
// image's: the window is taken to be what the context holds now, and the
// projection is at least that, so maintenance aims well under it.
func (p Prompt) Pressure(window int, serverRefused bool) Pressure {
	projected := p.Context + p.System + p.Goal + p.Tools + p.MaxOutput
	if serverRefused {
		window = min(window, max(p.Context, 1))
		projected = max(projected, window)
	}
	return Pressure{Projected: projected, Window: window}
}

// WallCharge is the wall time to charge at a provider call, in whole seconds
// since mark (the process's creation when nothing was charged yet), and the
// mark after the charge. The remainder is charged at a later call.
func WallCharge(mark, created, now time.Time) (seconds int64, next time.Time) {
	if mark.IsZero() {
		mark = created
	}
	seconds = int64(now.Sub(mark) / time.Second)
	return seconds, mark.Add(time.Duration(seconds) * time.Second)
}

// Settlement is the change to the usage of a call's chain once its outcome
// is known; it may be negative.
type Settlement struct {
	Calls, Tokens int64
}

// SettleReply settles a completed call at its reported usage: going over the
// budget is found here, and the call is charged in full because it happened.
func SettleReply(reserved, used int64) Settlement {
	return Settlement{Tokens: used - reserved}
}

// SettleFailure settles a failed call. A call that never reached the model,
// or that the server refused before any output, gives its reservation back;
// any other failure may have been served, so it stays charged.
func SettleFailure(reserved int64, reachedModel bool) Settlement {
	if reachedModel {
		return Settlement{}
	}
	return Settlement{Calls: -1, Tokens: -reserved}
}

// TextOnlyFails reports whether a reply without a tool call, the inARow-th
// in a row, fails the process under the image's limit.
func TextOnlyFails(inARow, limit int) bool { return inARow >= limit }
