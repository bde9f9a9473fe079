package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/check"
)

// Dialer connects to a peer. host.Host implements it.
type Dialer interface {
	Connect(ctx context.Context, pi peer.AddrInfo) error
}

// Option configures Join.
type Option func(*config) error

type config struct {
	attempts    int
	minBackoff  time.Duration
	maxBackoff  time.Duration
	dialTimeout time.Duration
	enough      int
	parallel    int
	log         *slog.Logger
}

func defaultConfig() config {
	return config{
		attempts:    5,                      // 1 + 4 retries: 0.5+1+2+4 s of backoff before giving up on a peer
		minBackoff:  500 * time.Millisecond, // first wait after a failed dial
		maxBackoff:  8 * time.Second,        // the wait doubles up to this
		dialTimeout: 15 * time.Second,       // one dial attempt, all of a peer's addresses together
		enough:      3,                      // a DHT needs one live peer to start; three survive one going away
		parallel:    8,                      // dials in flight at once
		log:         slog.Default().With("subsystem", "bootstrap"),
	}
}

// Attempts sets how many times each peer is dialled before it is given up
// (default 5).
func Attempts(n int) Option {
	return func(c *config) error { return check.Set(&c.attempts, n, check.AtLeast("attempts", n, 1)) }
}

// Backoff sets the wait after a peer's first failed dial and its cap; the
// wait doubles after each failure, with up to 25 % random jitter (defaults
// 500 ms and 8 s).
func Backoff(min, max time.Duration) Option {
	return func(c *config) error {
		if err := check.Backoff("backoff", min, max); err != nil {
			return err
		}
		c.minBackoff, c.maxBackoff = min, max
		return nil
	}
}

// DialTimeout bounds one dial attempt (default 15 s).
func DialTimeout(d time.Duration) Option {
	return func(c *config) error { return check.Set(&c.dialTimeout, d, check.Positive("dial timeout", d)) }
}

// Enough sets how many connected bootstrap peers end Join early; the other
// dials are then abandoned (default 3).
func Enough(n int) Option {
	return func(c *config) error { return check.Set(&c.enough, n, check.AtLeast("enough", n, 1)) }
}

// Logger sets the logger (default slog.Default with subsystem=bootstrap).
func Logger(l *slog.Logger) Option {
	return func(c *config) error { return check.Set(&c.log, l, check.NotNil("logger", l)) }
}

// Join dials the bootstrap peers, several at once, retrying each with
// exponential backoff, and returns the peers it connected to, in the order
// they answered. It returns once Enough peers are connected or every peer has
// been tried Attempts times. It fails with ErrNoPeers when peers is empty and
// with an error wrapping ErrNoneAnswered, listing each peer's last error,
// when none could be reached. Peers equal to self are skipped, so a
// bootstrap node may be given a list that names itself.
func Join(ctx context.Context, d Dialer, self peer.ID, peers []peer.AddrInfo, opts ...Option) ([]peer.ID, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	peers = Merge(peers)
	var todo []peer.AddrInfo
	for _, p := range peers {
		if p.ID != self {
			todo = append(todo, p)
		}
	}
	if len(todo) == 0 {
		return nil, ErrNoPeers
	}
	enough := min(cfg.enough, len(todo))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		id  peer.ID
		err error
	}
	results := make(chan result, len(todo))
	sem := make(chan struct{}, cfg.parallel)
	for _, p := range todo {
		go func() {
			results <- result{p.ID, dialWithBackoff(ctx, d, p, &cfg, sem)}
		}()
	}
	var connected []peer.ID
	var failed []string
	for range todo {
		r := <-results
		if r.err == nil {
			connected = append(connected, r.id)
			cfg.log.Debug("bootstrap peer connected", "peer", r.id)
			if len(connected) >= enough {
				cancel()
			}
			continue
		}
		if len(connected) < enough {
			failed = append(failed, fmt.Sprintf("%s: %v", r.id, r.err))
		}
	}
	if len(connected) > 0 {
		return connected, nil
	}
	if err := ctx.Err(); err != nil && len(failed) == 0 {
		return nil, err
	}
	const maxListed = 8
	extra := ""
	if len(failed) > maxListed {
		extra = fmt.Sprintf("; and %d more", len(failed)-maxListed)
		failed = failed[:maxListed]
	}
	return nil, fmt.Errorf("%w (%d tried, %d attempts each): %s%s", ErrNoneAnswered, len(todo), cfg.attempts, strings.Join(failed, "; "), extra)
}

// dialWithBackoff dials p up to cfg.attempts times and returns nil on the
// first success or the last error.
func dialWithBackoff(ctx context.Context, d Dialer, p peer.AddrInfo, cfg *config, sem chan struct{}) error {
	wait := cfg.minBackoff
	var err error
	for attempt := 1; attempt <= cfg.attempts; attempt++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		}
		dctx, cancel := context.WithTimeout(ctx, cfg.dialTimeout)
		if attempt > 1 {
			// Join keeps its own backoff; the swarm's per-address dial
			// backoff (5 s and up) would fail the retry without dialling.
			dctx = network.WithForceDirectDial(dctx, "bootstrap retry")
		}
		err = d.Connect(dctx, p)
		cancel()
		<-sem
		if err == nil {
			return nil
		}
		cfg.log.Debug("bootstrap dial failed", "peer", p.ID, "attempt", attempt, "error", err)
		if attempt == cfg.attempts {
			break
		}
		jittered := wait + time.Duration(rand.Int64N(int64(wait)/4+1))
		t := time.NewTimer(jittered)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		}
		wait = min(2*wait, cfg.maxBackoff)
	}
	return err
}
