// Package worldtest starts emulated Internets for tests: one call gives a
// running world on a free port, closed when the test ends. Worlds are
// generated once per process and parameters (a World is immutable), so
// many tests can share the cost of generation.
//
//	func TestCrawl(t *testing.T) {
//		run := worldtest.Start(t, worldtest.Params(1, 50, 4), world.TimeScale(0.05))
//		w := run.World()
//		node := w.Nodes()[0].Addr
//		client, _ := run.Client(node) // bound to the node's address, world DNS
//		site := w.Sites()[0]
//		resp, err := client.Get(run.URL(site))
//		...
//		best, rtt, _ := w.Optimal(site, w.NodeAddrs())
//		c := run.Counters(site) // requests and connections by source
//	}
package worldtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/micra-net/micra/internal/world"
)

// Params returns world.DefaultParams with the given seed, numbers of
// sites and nodes, and port 0 (each run picks a free port).
func Params(seed int64, sites, nodes int) world.Params {
	p := world.DefaultParams()
	p.Seed, p.Sites, p.Nodes, p.Port = seed, sites, nodes, 0
	return p
}

type entry struct {
	once sync.Once
	w    *world.World
	err  error
}

var worlds sync.Map // fmt of Params → *entry

// Generate returns the world p describes, generating it once per process.
func Generate(tb testing.TB, p world.Params) *world.World {
	tb.Helper()
	v, _ := worlds.LoadOrStore(fmt.Sprintf("%#v", p), &entry{})
	e := v.(*entry)
	e.once.Do(func() { e.w, e.err = world.Generate(context.Background(), p) })
	if e.err != nil {
		tb.Fatalf("generating the world: %v", e.err)
	}
	return e.w
}

// Start generates (or reuses) the world p describes and serves it until
// the test ends, on a free port unless opts say otherwise.
func Start(tb testing.TB, p world.Params, opts ...world.Option) *world.Running {
	tb.Helper()
	w := Generate(tb, p)
	opts = append([]world.Option{world.Port(0), world.Logger(slog.New(slog.NewTextHandler(logWriter{tb}, nil)))}, opts...)
	r, err := w.Start(context.Background(), opts...)
	if err != nil {
		tb.Fatalf("starting the world: %v", err)
	}
	tb.Cleanup(func() {
		if err := r.Close(); err != nil {
			tb.Errorf("closing the world: %v", err)
		}
	})
	return r
}

// logWriter sends the world's log lines to the test's log.
type logWriter struct{ tb testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
