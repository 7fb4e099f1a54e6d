package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/libos/libos/llm"
)

// endpointSettings are the retry and request settings of a real endpoint,
// recorded with the run so that resume uses them again.
type endpointSettings struct {
	RetryAttempts   int           `json:"retry_attempts,omitempty"`
	RetryMaxBackoff time.Duration `json:"retry_max_backoff,omitempty"`
	MaxTokens       int           `json:"max_tokens,omitempty"`
	MaxTokensField  string        `json:"max_tokens_field,omitempty"`
	Temperature     *float32      `json:"temperature,omitempty"`
	RequestTimeout  time.Duration `json:"request_timeout,omitempty"`
}

// retryPolicy is the kernel's retry policy for these settings.
func (e endpointSettings) retryPolicy() llm.RetryPolicy {
	return llm.RetryPolicy{Attempts: e.RetryAttempts, MaxBackoff: e.RetryMaxBackoff}
}

// configure applies the request settings to an adapter configuration.
func (e endpointSettings) configure(cfg *llm.OpenAIConfig) {
	cfg.MaxTokens, cfg.MaxTokensField, cfg.Temperature, cfg.Timeout = e.MaxTokens, e.MaxTokensField, e.Temperature, e.RequestTimeout
}

// endpointFlags are the command-line form of endpointSettings; each is kept
// as given until apply checks it, so an error names the flag and the rule.
type endpointFlags struct {
	retryAttempts, retryMaxBackoff, maxTokens, maxTokensField, temperature, requestTimeout string
}

func (f *endpointFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.retryAttempts, "retry-attempts", "", "attempts of one provider call before the process waits for resume (1..1000, default 8)")
	fs.StringVar(&f.retryMaxBackoff, "retry-max-backoff", "", "longest wait between attempts: seconds or a duration such as 30s or 2m (default 60s, at most 24h)")
	fs.StringVar(&f.maxTokens, "max-tokens", "", "cap on the completion tokens of each request (1..10000000; default: the image's max_output_tokens, 4096 for base:v0, which a larger cap leaves as it is)")
	fs.StringVar(&f.maxTokensField, "max-tokens-field", "", "request field of the token limit: max_tokens or max_completion_tokens (default max_tokens; reasoning models max_completion_tokens)")
	fs.StringVar(&f.temperature, "temperature", "", "sampling temperature (0..2; default: the server's)")
	fs.StringVar(&f.requestTimeout, "request-timeout", "", "timeout of each attempt: seconds or a duration (default 300s, at most 24h)")
}

// apply checks the flags that were given and writes them into s.
func (f *endpointFlags) apply(s *runSettings) error {
	e := &s.Endpoint
	var err error
	if f.retryAttempts != "" {
		if e.RetryAttempts, err = intFlag("retry-attempts", f.retryAttempts, 1, 1000); err != nil {
			return err
		}
	}
	if f.retryMaxBackoff != "" {
		if e.RetryMaxBackoff, err = durationFlag("retry-max-backoff", f.retryMaxBackoff); err != nil {
			return err
		}
	}
	if f.maxTokens != "" {
		if e.MaxTokens, err = intFlag("max-tokens", f.maxTokens, 1, 10_000_000); err != nil {
			return err
		}
	}
	if f.maxTokensField != "" {
		if f.maxTokensField != llm.MaxTokensFieldLegacy && f.maxTokensField != llm.MaxTokensFieldCompletion {
			return fmt.Errorf("--max-tokens-field %q: must be %s or %s", f.maxTokensField, llm.MaxTokensFieldLegacy, llm.MaxTokensFieldCompletion)
		}
		e.MaxTokensField = f.maxTokensField
	}
	if f.temperature != "" {
		t, err := strconv.ParseFloat(f.temperature, 32)
		if err != nil || math.IsNaN(t) || t < 0 || t > 2 {
			return fmt.Errorf("--temperature %q: must be a number from 0 to 2", f.temperature)
		}
		t32 := float32(t)
		e.Temperature = &t32
	}
	if f.requestTimeout != "" {
		if e.RequestTimeout, err = durationFlag("request-timeout", f.requestTimeout); err != nil {
			return err
		}
	}
	return nil
}

// given reports whether any endpoint flag was set.
func (f *endpointFlags) given() bool {
	return f.retryAttempts != "" || f.retryMaxBackoff != "" || f.serverGiven()
}

// serverGiven reports whether a flag of a model server's requests was set:
// the retry flags are the kernel's, for any provider.
func (f *endpointFlags) serverGiven() bool {
	return f.maxTokens != "" || f.maxTokensField != "" || f.temperature != "" || f.requestTimeout != ""
}

func intFlag(name, v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("--%s %q: must be a whole number from %d to %d", name, v, lo, hi)
	}
	return n, nil
}

// durationFlag reads seconds ("90", "1.5") or a Go duration ("2m"), which
// must be positive and at most 24 hours.
func durationFlag(name, v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	d, err := time.ParseDuration(v)
	if secs, ferr := strconv.ParseFloat(v, 64); ferr == nil {
		d, err = time.Duration(secs*float64(time.Second)), nil
	}
	if err == nil && (d <= 0 || d > 24*time.Hour) {
		err = errors.New("out of range")
	}
	if err != nil {
		return 0, fmt.Errorf("--%s %q: must be seconds or a duration such as 30s or 2m, above 0 and at most 24h", name, v)
	}
	return d, nil
}

// resumeSettings are the settings a resume runs with: nil (those the
// directory recorded) when no provider flag was given, else the recorded
// ones corrected by the flags, checked and recorded anew.
func (p *providerFlags) resumeSettings(dir string) (*runSettings, error) {
	if p.provider == "" && p.script == "" && p.model == "" && p.baseURL == "" && !p.endpoint.given() {
		return nil, nil
	}
	s, err := recordedSettings(dir)
	if err != nil {
		return nil, err
	}
	switch {
	case (p.provider != "" && p.provider != s.Provider) || p.script != "":
		// A new provider (or script) replaces the recorded one; its
		// endpoint settings start over from the flags. Restating the
		// recorded provider only corrects what the other flags give.
		fresh, err := p.settings()
		if err != nil {
			return nil, err
		}
		fresh.SkillDirs, fresh.NoFullIO = s.SkillDirs, s.NoFullIO
		return &fresh, nil
	case p.model != "":
		s.Model = p.model
	}
	if p.baseURL != "" {
		if err := s.setBaseURL("--base-url", p.baseURL); err != nil {
			return nil, err
		}
	}
	if s.Provider == "replay" {
		if err := p.onlyOpenAI("the run recorded --provider replay"); err != nil {
			return nil, err
		}
	}
	if err := p.endpoint.apply(&s); err != nil {
		return nil, err
	}
	if err := checkProviderSettings(s); err != nil {
		return nil, err
	}
	return &s, nil
}

// onlyOpenAI refuses the flags of a model server given where no model
// server is used (why says where): they would be dropped without a word.
func (p *providerFlags) onlyOpenAI(why string) error {
	switch {
	case p.model != "":
		return fmt.Errorf("--model: only with --provider openai (%s)", why)
	case p.baseURL != "":
		return fmt.Errorf("--base-url: only with --provider openai (%s)", why)
	case p.endpoint.serverGiven():
		return fmt.Errorf("--max-tokens, --max-tokens-field, --temperature and --request-timeout: only with --provider openai (%s)", why)
	}
	return nil
}
