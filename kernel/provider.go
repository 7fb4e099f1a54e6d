package kernel

import (
	"errors"
	"fmt"
	"time"

	"github.com/libos/libos/authority"
	"github.com/libos/libos/images"
	"github.com/libos/libos/llm"
	"github.com/libos/libos/process"
)

// providerTextPreview bounds the model text a provider event carries.
const providerTextPreview = 200

// providerEvent describes one provider call attempt for the trace: its
// attempt number, outcome, latency and tokens, and the start of the model's
// text.
func providerEvent(pid int64, turn, attempt int, cr callRecord, perr error, resp *llm.Response) Event {
	detail := map[string]any{
		"attempt":    attempt,
		"outcome":    cr.Status,
		"latency_ms": cr.FinishedAt.Sub(cr.StartedAt).Milliseconds(),
	}
	ev := Event{Kind: EventProvider, PID: pid, Turn: turn, Detail: detail}
	if perr != nil {
		detail["settlement"] = cr.Settlement
		detail["disposition"] = string(llm.DispositionOf(perr))
		if stack := panicStack(perr); stack != "" {
			detail["panic_stack"] = stack
		}
		ev.Reason = perr.Error()
		return ev
	}
	detail["prompt_tokens"] = resp.Usage.PromptTokens
	detail["completion_tokens"] = resp.Usage.CompletionTokens
	if resp.Usage.Estimated {
		detail["usage_estimated"] = true
	}
	detail["tool_calls"] = len(resp.ToolCalls)
	if resp.FinishReason != "" {
		detail["finish_reason"] = resp.FinishReason
	}
	ev.Summary = summarize(resp.Text, providerTextPreview)
	if resp.Text != "" {
		detail["text"] = resp.Text // the model's words in full, for the log
	}
	return ev
}

// providerFailed decides what a running process does after a failed
// provider call: back off on a durable provider wait, wait for the Host,
// make its context fit, or fail. Nothing here fails a process for a
// server that is only unavailable.
func (k *Runtime) providerFailed(tx *txn, r *procRecord, im *images.Image, perr error) error {
	policy := k.opts.ProviderRetry.WithDefaults()
	var ce *llm.CallError
	hint := ""
	if errors.As(perr, &ce) {
		hint = ce.Hint
	}
	switch llm.DispositionOf(perr) {
	case llm.DispositionRetry:
		r.ProviderFailures++
		if r.ProviderFailures >= policy.Attempts {
			attempts := "attempts"
			if r.ProviderFailures == 1 {
				attempts = "attempt"
			}
			reason := fmt.Sprintf("provider unavailable after %d %s: %v (libos resume tries again)", r.ProviderFailures, attempts, perr)
			return k.waitForProvider(tx, r, time.Time{}, reason)
		}
		var after time.Duration
		if ce != nil {
			after = ce.RetryAfter
		}
		wait := policy.Backoff(r.ProviderFailures, after, jitter(r.PID, r.Replies, r.ProviderFailures))
		return k.waitForProvider(tx, r, k.now().Add(wait), perr.Error())
	case llm.DispositionWaitHost:
		r.ProviderFailures++
		return k.waitForProvider(tx, r, time.Time{}, fmt.Sprintf("provider unavailable: %s (%v); fix it, then libos resume", hint, perr))
	case llm.DispositionCompact:
		if r.WindowRetried || !im.Context.Object || k.permits(r, authority.ContextMaintenance, authority.Params{}) != nil {
			why := "it lacks execute on context:maintenance"
			switch {
			case r.WindowRetried:
				why = "it was refused again after maintenance"
			case !im.Context.Object:
				why = "its image keeps no context Object to compact"
			}
			return k.failProcess(tx, r, fmt.Sprintf("the context no longer fits the model's window (%v), and %s", perr, why))
		}
		r.WindowRetried, r.ForceMaintenance = true, true
		return k.step(tx, r, process.Input{Kind: process.Yield})
	}
	return k.failProcess(tx, r, "provider: "+perr.Error())
}

// waitForProvider parks r on a provider wait: until a time (a backoff the
// scheduler's timer ends) or, with a zero time, until the Host resumes it.
func (k *Runtime) waitForProvider(tx *txn, r *procRecord, until time.Time, reason string) error {
	w := process.Wait{Kind: process.WaitProvider, Until: until, Reason: reason, Attempt: r.ProviderFailures}
	return k.step(tx, r, process.Input{Kind: process.Block, Wait: &w})
}

// jitter is a draw in [0, 1) fixed by the process, its request and the
// attempt: backoffs stay spread across processes, and a run replays the same.
// Each input goes through a full-avalanche mix (splitmix64's finalizer), so
// every attempt of a process is its own uniform draw; a plain hash of the
// three barely moved its top bits from one attempt to the next.
func jitter(pid int64, replies, attempt int) float64 {
	x := mix64(uint64(pid))
	x = mix64(x ^ uint64(replies))
	x = mix64(x ^ uint64(attempt))
	return float64(x>>11) / (1 << 53)
}

// mix64 is splitmix64's step: an increment and a finalizer in which each
// input bit flips each output bit with probability one half.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
