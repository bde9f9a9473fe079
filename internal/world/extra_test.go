package world_test

import (
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
)

// TestSetExtraRTT checks the hook that changes a node's latency while the
// world runs: requests from the node's address take at least the added RTT
// (twice on a fresh connection), the others do not see it, and it can be
// removed. Only lower bounds are checked: the server never answers early.
func TestSetExtraRTT(t *testing.T) {
	const scale = 0.1
	const extra = 800 * time.Millisecond
	run := worldtest.Start(t, worldtest.Params(3, 20, 4), world.TimeScale(scale))
	w := run.World()
	site := w.Sites()[0]
	node := w.NodeAddrs()[0]
	head := func(from netip.Addr) time.Duration {
		d, err := run.Dialer(from)
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodHead, run.URL(site), nil)
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return time.Since(start)
	}
	if run.ExtraRTT(node) != 0 {
		t.Fatal("extra RTT before any was set")
	}
	run.SetExtraRTT(node, extra)
	if got := run.ExtraRTT(node); got != extra {
		t.Fatalf("ExtraRTT = %v, want %v", got, extra)
	}
	if d := head(node); d < 2*run.Scaled(extra) {
		t.Errorf("HEAD from the slowed node took %v, at least %v expected", d, 2*run.Scaled(extra))
	}
	if run.ExtraRTT(w.NodeAddrs()[1]) != 0 {
		t.Error("another node was slowed too")
	}
	run.SetExtraRTT(node, 0)
	if run.ExtraRTT(node) != 0 {
		t.Error("extra RTT not removed")
	}
}
