package llm

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Defaults of RetryPolicy.
const (
	DefaultRetryAttempts     = 8
	DefaultRetryFirstBackoff = time.Second
	DefaultRetryMaxBackoff   = 60 * time.Second
)

// RetryPolicy is how the kernel rides through a model endpoint's transient
// failures: up to Attempts attempts of one call, waiting between them with
// exponential backoff and full jitter. It is pure data; the kernel keeps the
// attempt count durably, so a reopen continues a backoff instead of
// restarting it.
type RetryPolicy struct {
	// Attempts is the number of attempts of one call before the process
	// waits for the Host (0 means DefaultRetryAttempts).
	Attempts int `json:"attempts,omitempty"`
	// FirstBackoff is the ceiling of the first wait (0 means
	// DefaultRetryFirstBackoff); each further ceiling doubles.
	FirstBackoff time.Duration `json:"first_backoff,omitempty"`
	// MaxBackoff caps every wait, a server's Retry-After included (0 means
	// DefaultRetryMaxBackoff).
	MaxBackoff time.Duration `json:"max_backoff,omitempty"`
}

// WithDefaults fills the zero fields.
func (p RetryPolicy) WithDefaults() RetryPolicy {
	if p.Attempts == 0 {
		p.Attempts = DefaultRetryAttempts
	}
	if p.FirstBackoff == 0 {
		p.FirstBackoff = DefaultRetryFirstBackoff
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = DefaultRetryMaxBackoff
	}
	return p
}

// Validate names the first field out of range.
func (p RetryPolicy) Validate() error {
	switch {
	case p.Attempts < 0 || p.Attempts > 1000:
		return fmt.Errorf("%w: retry attempts: %d must be 1..1000", ErrInvalidConfig, p.Attempts)
	case p.FirstBackoff < 0:
		return fmt.Errorf("%w: retry first backoff: %s must not be negative", ErrInvalidConfig, p.FirstBackoff)
	case p.MaxBackoff < 0 || p.MaxBackoff > 24*time.Hour:
		return fmt.Errorf("%w: retry max backoff: %s must be 0..24h", ErrInvalidConfig, p.MaxBackoff)
	}
	return nil
}

// Backoff is the wait after failed attempts of one call (failed >= 1): a
// uniform draw u in [0, 1) over min(MaxBackoff, FirstBackoff·2^(failed-1))
// ("full jitter"), or the server's Retry-After when it gave one, capped at
// MaxBackoff.
func (p RetryPolicy) Backoff(failed int, retryAfter time.Duration, u float64) time.Duration {
	p = p.WithDefaults()
	if retryAfter > 0 {
		return min(retryAfter, p.MaxBackoff)
	}
	ceiling := p.FirstBackoff
	for i := 1; i < failed && ceiling < p.MaxBackoff; i++ {
		ceiling *= 2
	}
	ceiling = min(ceiling, p.MaxBackoff)
	return time.Duration(u * float64(ceiling))
}

// Disposition is what the kernel does about a failed provider call.
type Disposition string

// The dispositions.
const (
	// DispositionRetry: back off and ask again (while attempts remain).
	DispositionRetry Disposition = "retry"
	// DispositionWaitHost: wait, without a time, until the Host resumes the
	// process with working settings.
	DispositionWaitHost Disposition = "wait_host"
	// DispositionCompact: make the context fit (compaction where the process
	// holds the authority) and ask again once.
	DispositionCompact Disposition = "compact"
	// DispositionFail: the request itself is wrong; the process fails.
	DispositionFail Disposition = "fail"
)

// DispositionOf classifies a provider error. A call whose settlement is
// unknown may be asked again: a model call has no outside effect.
func DispositionOf(err error) Disposition {
	var ce *CallError
	if !errors.As(err, &ce) {
		return DispositionRetry
	}
	switch {
	case ce.ContextTooLong:
		return DispositionCompact
	case ce.NeedsHost:
		return DispositionWaitHost
	case ce.Transient:
		return DispositionRetry
	case ce.Permanent:
		return DispositionFail
	}
	return DispositionRetry
}

// transientStatus reports the HTTP statuses worth a later attempt: "not now" (408, 409,
// 425, 429) and every server-side failure, the overload and gateway statuses of providers and
// proxies (529, 520–524) included, but the two that say the request's kind will never be
// served (501 Not Implemented, 505 HTTP Version Not Supported).
func transientStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported:
		return false
	}
	return code >= 500 && code <= 599
}

// maxRetryAfter caps a server's hint of when to ask again.
const maxRetryAfter = 365 * 24 * time.Hour

// ParseRetryAfter reads a Retry-After header: delay seconds or an HTTP date
// (measured from now). A date in the past is a zero wait.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, int64(maxRetryAfter/time.Second))) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(0, t.Sub(now)), true
}
