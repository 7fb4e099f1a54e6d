package capabilities

import (
	"fmt"
	"testing"
)

// benchGrants builds n grants of which only the last allows read on the target.
func benchGrants(n int) []Grant {
	grants := make([]Grant, 0, n)
	for i := 0; i < n-1; i++ {
		grants = append(grants, Grant{ID: fmt.Sprintf("g%d", i), Resource: fmt.Sprintf("object_namespace:other-%d", i), Rights: []Right{Read, Write}, Effect: Allow})
	}
	return append(grants, Grant{ID: "target", Resource: "object_namespace:proj-*", Rights: []Right{Read}, Effect: Allow, UsesRemaining: Uses(1 << 30)})
}

func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{4, 64} {
		b.Run(fmt.Sprintf("grants=%d", n), func(b *testing.B) {
			grants := benchGrants(n)
			names := ObjectNames("6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab", "proj-a")
			for b.Loop() {
				if !Check(grants, Read, names...).Allowed {
					b.Fatal("not allowed")
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "checks/s")
		})
	}
}

func BenchmarkCheckReserveRestore(b *testing.B) {
	grants := benchGrants(16)
	for b.Loop() {
		d := Check(grants, Read, ObjectNames("6f1c2d3e-4b5a-4c6d-8e7f-0123456789ab", "proj-a")...)
		next, r, err := Reserve(grants, d)
		if err != nil {
			b.Fatal(err)
		}
		grants = Restore(next, r)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}

func BenchmarkAttenuate(b *testing.B) {
	holder := benchGrants(32)
	requested := []Grant{
		{Resource: "object_namespace:proj-a", Rights: []Right{Read}, Effect: Allow, UsesRemaining: Uses(3)},
		{Resource: "object_namespace:other-7", Rights: []Right{Read, Write}, Effect: Allow},
	}
	for b.Loop() {
		if err := Attenuate(holder, requested); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "attenuations/s")
}

func BenchmarkCharge(b *testing.B) {
	chain := make([]Account, 8)
	for i := range chain {
		chain[i] = Account{PID: int64(8 - i), Limits: Budget{ToolCalls: 1 << 62, LLMTokens: 1 << 62}}
	}
	for b.Loop() {
		next, err := Charge(chain, Budget{ToolCalls: 1, LLMTokens: 100})
		if err != nil {
			b.Fatal(err)
		}
		chain = next
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "charges/s")
}
