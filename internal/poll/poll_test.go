package poll

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestUntil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start, n := time.Now(), 0
		Until(t, time.Minute, "the fourth call", func() error {
			if n++; n < 4 {
				return errors.New("early")
			}
			return nil
		})
		if n != 4 || time.Since(start) != 3*Every {
			t.Fatalf("%d calls in %v", n, time.Since(start))
		}
		if err := True(func() bool { return false })(); err == nil {
			t.Fatal("a false condition holds")
		}
	})
}
