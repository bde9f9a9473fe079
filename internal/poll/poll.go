// Package poll is the tests' one way to wait for a condition: call it every
// 50 ms until it holds, within a bound. Inside a synctest bubble the bound
// is virtual time, a bound on the protocol; outside, a bound for loaded
// machines. Neither is a timing assertion.
package poll

import (
	"errors"
	"testing"
	"time"
)

// Every is how often Until calls its condition.
const Every = 50 * time.Millisecond

// Until calls cond every Every until it returns nil, and fails t with what
// and cond's last error once d has passed.
func Until(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v: %v", what, d, err)
		}
		time.Sleep(Every)
	}
}

// True adapts a condition that reports no error.
func True(cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}
}

var errNotYet = errors.New("not yet")
