package check

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// Set stores v in *dst when err is nil and returns err: an option's check
// and assignment in one statement, as in
//
//	return func(c *config) error { return check.Set(&c.workers, n, check.Range("workers", n, 1, 64)) }
func Set[T any](dst *T, v T, err error) error {
	if err == nil {
		*dst = v
	}
	return err
}

// Apply runs the options on cfg in order and then each final check (a
// config's own validation across options), and returns the first error:
// the constructor's "defaults, options, validate" in one call, as in
//
//	cfg := defaults()
//	if err := check.Apply(cfg, opts, cfg.validate); err != nil {
func Apply[C any, O ~func(*C) error](cfg *C, opts []O, final ...func() error) error {
	for _, o := range opts {
		if err := o(cfg); err != nil {
			return err
		}
	}
	for _, f := range final {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// NotNil returns the error "nil <name>" when v is nil: an untyped nil or a
// nil pointer, func, interface, map, slice or channel.
func NotNil(name string, v any) error {
	if isNil(v) {
		return errors.New("nil " + name)
	}
	return nil
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Interface, reflect.Map, reflect.Slice, reflect.Chan, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// Range returns an error "<name> must be <lo> to <hi>, got <v>" unless
// lo ≤ v ≤ hi. Like AtLeast and Positive, it refuses a NaN.
func Range[T cmp.Ordered](name string, v, lo, hi T) error {
	if v != v || v < lo || v > hi {
		return fmt.Errorf("%s must be %s to %s, got %s", name, show(lo), show(hi), show(v))
	}
	return nil
}

// AtLeast returns an error "<name> must be at least <lo>, got <v>" unless
// v ≥ lo.
func AtLeast[T cmp.Ordered](name string, v, lo T) error {
	if v != v || v < lo {
		return fmt.Errorf("%s must be at least %s, got %s", name, show(lo), show(v))
	}
	return nil
}

// Positive returns an error "<name> must be positive, got <v>" unless v > 0.
func Positive[T cmp.Ordered](name string, v T) error {
	var zero T
	if v != v || v <= zero {
		return fmt.Errorf("%s must be positive, got %s", name, show(v))
	}
	return nil
}

// Backoff returns an error "<name> must satisfy 0 < min ≤ max, got <min>
// and <max>" unless it holds: the bounds of a wait that starts at min and
// grows up to max.
func Backoff(name string, min, max time.Duration) error {
	if min <= 0 || max < min {
		return fmt.Errorf("%s must satisfy 0 < min ≤ max, got %s and %s", name, show(min), show(max))
	}
	return nil
}

// show formats v for an error: a duration as time.Duration does without
// its trailing zero units (1m, not 1m0s), anything else with %v.
func show(v any) string {
	d, ok := v.(time.Duration)
	if !ok {
		return fmt.Sprint(v)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
