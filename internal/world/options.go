package world

import (
	"fmt"
	"log/slog"
	"time"
)

// Option configures a running world (see World.Start).
type Option func(*config) error

type config struct {
	port     int // -1: Params.Port
	scale    float64
	hostile  bool
	clock    func() time.Time
	logger   *slog.Logger
	maxDrip  time.Duration
	hugeSize int64
}

func defaultConfig() config {
	return config{
		port:     -1,
		scale:    1,
		logger:   slog.Default().With("subsystem", "world"),
		maxDrip:  10 * time.Minute,
		hugeSize: 1 << 30,
	}
}

// Port overrides the world's port for this run: every site's TCP port and
// the DNS server's TCP and UDP port. 0 picks a free port (the same for
// all), retrying when another process holds it on one of the world's
// addresses; Running.Port reports it.
func Port(p int) Option {
	return func(c *config) error {
		if p < 0 || p > 65535 {
			return fmt.Errorf("%w: port %d", ErrParams, p)
		}
		c.port = p
		return nil
	}
}

// TimeScale multiplies every delay the world injects (RTTs, body pacing,
// slow drips) by f, so that 0.1 runs ten times faster than real. 0
// injects no delay at all. The world clock (Running.Now) runs 1/f times
// faster than the wall clock so that pages change at the same rate
// relative to the delays; with f = 0 it is the wall clock. RTTs and
// thresholds reported by the World stay unscaled.
func TimeScale(f float64) Option {
	return func(c *config) error {
		if !(f >= 0 && f <= 100) {
			return fmt.Errorf("%w: time scale %v, want 0 to 100", ErrParams, f)
		}
		c.scale = f
		return nil
	}
}

// Hostile sets the initial hostile mode (default off); see
// Running.SetHostile.
func Hostile(on bool) Option {
	return func(c *config) error { c.hostile = on; return nil }
}

// Clock sets the world clock: the time pages are rendered at, which
// drives page changes, Last-Modified and the Date header. The default
// starts at the wall time of Start and runs at 1/TimeScale speed.
func Clock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrParams)
		}
		c.clock = now
		return nil
	}
}

// Logger sets the logger (default slog.Default with subsystem=world).
func Logger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrParams)
		}
		c.logger = l
		return nil
	}
}

// HostileLimits bounds the hostile responses: a slow drip lasts at most
// drip (unscaled, default 10 minutes) and a huge body has size bytes
// (default 1 GiB).
func HostileLimits(drip time.Duration, size int64) Option {
	return func(c *config) error {
		if drip <= 0 || size <= 0 {
			return fmt.Errorf("%w: hostile limits must be positive", ErrParams)
		}
		c.maxDrip, c.hugeSize = drip, size
		return nil
	}
}
