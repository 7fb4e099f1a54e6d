package quantum

import (
	"testing"
	"time"
)

func TestPromptArithmetic(t *testing.T) {
	p := Prompt{Context: 1000, System: 200, Goal: 50, MaxOutput: 500}
	if got := p.Reservation(); got != 1750 {
		t.Errorf("reservation = %d, want 1750", got)
	}
	if got := p.Pressure(8000, false); got != (Pressure{Projected: 1750, Window: 8000}) {
		t.Errorf("pressure = %+v", got)
	}
	// The server refused the prompt: the window is what the context holds,
	// and the projection is at least that, so maintenance must run.
	if got := p.Pressure(8000, true); got != (Pressure{Projected: 1750, Window: 1000}) {
		t.Errorf("pressure after a refusal = %+v", got)
	}
	big := Prompt{Context: 9000}
	if got := big.Pressure(8000, true); got != (Pressure{Projected: 9000, Window: 8000}) {
		t.Errorf("pressure of an oversized context after a refusal = %+v", got)
	}
	if got := (Prompt{}).Pressure(8000, true); got.Window != 1 || got.Projected != 1 {
		t.Errorf("pressure of an empty context after a refusal = %+v", got)
	}
	// The tool table a request carries is reserved and counts against
	// the window.
	tooled := Prompt{Context: 1000, System: 200, Goal: 50, Tools: 3900, MaxOutput: 500}
	if got := tooled.Reservation(); got != 5650 {
		t.Errorf("reservation with a tool table = %d, want 5650", got)
	}
	if got := tooled.Pressure(8000, false); got.Projected != 5650 {
		t.Errorf("pressure with a tool table = %+v", got)
	}
}

func TestWallCharge(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	secs, mark := WallCharge(time.Time{}, created, created.Add(2500*time.Millisecond))
	if secs != 2 || !mark.Equal(created.Add(2*time.Second)) {
		t.Fatalf("first charge = %d, mark %v", secs, mark)
	}
	// The half second left over is charged with the next whole second.
	secs, mark = WallCharge(mark, created, created.Add(3100*time.Millisecond))
	if secs != 1 || !mark.Equal(created.Add(3*time.Second)) {
		t.Fatalf("second charge = %d, mark %v", secs, mark)
	}
	if secs, _ = WallCharge(mark, created, created.Add(3900*time.Millisecond)); secs != 0 {
		t.Fatalf("under a second charged %d", secs)
	}
}

func TestSettlement(t *testing.T) {
	if got := SettleReply(1000, 1200); got != (Settlement{Tokens: 200}) {
		t.Errorf("over the reservation: %+v", got)
	}
	if got := SettleReply(1000, 300); got != (Settlement{Tokens: -700}) {
		t.Errorf("under the reservation: %+v", got)
	}
	if got := SettleFailure(1000, true); got != (Settlement{}) {
		t.Errorf("a failure that may have been served gave back %+v", got)
	}
	if got := SettleFailure(1000, false); got != (Settlement{Calls: -1, Tokens: -1000}) {
		t.Errorf("a call that never reached the model: %+v", got)
	}
	if TextOnlyFails(2, 3) || !TextOnlyFails(3, 3) {
		t.Error("text-only limit")
	}
}
