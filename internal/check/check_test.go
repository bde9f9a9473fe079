package check

import (
	"errors"
	"log/slog"
	"math"
	"testing"
	"time"
)

func TestChecks(t *testing.T) {
	var nilLog *slog.Logger
	var nilFunc func()
	for _, tc := range []struct {
		name string
		err  error
		want string // "" for nil
	}{
		{"nil untyped", NotNil("logger", nil), "nil logger"},
		{"nil pointer", NotNil("logger", nilLog), "nil logger"},
		{"nil func", NotNil("clock", nilFunc), "nil clock"},
		{"func", NotNil("clock", time.Now), ""},
		{"pointer", NotNil("logger", slog.Default()), ""},
		{"value", NotNil("number", 0), ""},
		{"in range", Range("workers", 1, 1, 64), ""},
		{"top of range", Range("workers", 64, 1, 64), ""},
		{"below range", Range("workers", 0, 1, 64), "workers must be 1 to 64, got 0"},
		{"above range", Range("ack delay", 2*time.Minute, 0, time.Minute), "ack delay must be 0s to 1m, got 2m"},
		{"at least", AtLeast("replay window", time.Minute, time.Minute), ""},
		{"not at least", AtLeast("replay window", 30*time.Second, time.Minute), "replay window must be at least 1m, got 30s"},
		{"hours", AtLeast("flag duration", time.Hour, 2*time.Hour), "flag duration must be at least 2h, got 1h"},
		{"mixed", AtLeast("d", 90*time.Minute, 2*time.Hour), "d must be at least 2h, got 1h30m"},
		{"NaN", Range("audit share", math.NaN(), 0, 1), "audit share must be 0 to 1, got NaN"},
		{"NaN at least", AtLeast("share", math.NaN(), 0), "share must be at least 0, got NaN"},
		{"positive", Positive("dial timeout", time.Nanosecond), ""},
		{"zero", Positive("dial timeout", time.Duration(0)), "dial timeout must be positive, got 0s"},
		{"negative", Positive("max probes", -1), "max probes must be positive, got -1"},
		{"backoff", Backoff("backoff", time.Second, time.Second), ""},
		{"backoff zero", Backoff("backoff", 0, time.Second), "backoff must satisfy 0 < min ≤ max, got 0s and 1s"},
		{"backoff inverted", Backoff("backoff", 2*time.Second, time.Second), "backoff must satisfy 0 < min ≤ max, got 2s and 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.want == "" && tc.err != nil:
				t.Errorf("error %q, want none", tc.err)
			case tc.want != "" && (tc.err == nil || tc.err.Error() != tc.want):
				t.Errorf("error %v, want %q", tc.err, tc.want)
			}
		})
	}
}

func TestSet(t *testing.T) {
	n := 5
	if err := Set(&n, 0, Range("n", 0, 1, 9)); err == nil || n != 5 {
		t.Errorf("out of range: error %v, n = %d; want an error and n unchanged", err, n)
	}
	if err := Set(&n, 7, Range("n", 7, 1, 9)); err != nil || n != 7 {
		t.Errorf("in range: error %v, n = %d; want none and 7", err, n)
	}
}

func TestApply(t *testing.T) {
	type config struct{ a, b int }
	type option func(*config) error
	set := func(n int) option { return func(c *config) error { return Set(&c.a, n, Range("a", n, 1, 9)) } }
	double := option(func(c *config) error { c.b = 2 * c.a; return nil })

	c := config{a: 1}
	var checked int
	final := func() error { checked = c.b; return nil }
	if err := Apply(&c, []option{set(3), double}, final); err != nil || c.a != 3 || c.b != 6 || checked != 6 {
		t.Errorf("in order: error %v, config %+v, final saw b = %d; want none, {3 6}, 6", err, c, checked)
	}
	ran := false
	err := Apply(&c, []option{set(0), double}, func() error { ran = true; return nil })
	if err == nil || c.b != 6 || ran {
		t.Errorf("bad option: error %v, config %+v, final ran %v; want the error, the later option and final not run", err, c, ran)
	}
	if err := Apply(&c, []option(nil), func() error { return errors.New("cross-check") }); err == nil || err.Error() != "cross-check" {
		t.Errorf("final check: error %v, want cross-check", err)
	}
}
