package poll_test

import (
	"errors"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/internal/poll"
)

func TestUntil(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		start, n := time.Now(), 0
		poll.Until(t, time.Minute, "the fourth call", func() error {
			if n++; n < 4 {
				return errors.New("early")
			}
			return nil
		})
		if n != 4 || time.Since(start) != 3*poll.Every {
			t.Fatalf("%d calls in %v", n, time.Since(start))
		}
		if err := poll.True(func() bool { return false })(); err == nil {
			t.Fatal("a false condition holds")
		}
	})
}
