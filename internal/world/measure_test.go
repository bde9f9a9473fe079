package world_test

import (
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
)

// TestTimedHEAD checks that probing measures something real: timed HTTP
// HEAD requests from two node addresses to the same site take what the
// latency model says, and differ as it says.
//
// Each probe opens a fresh connection, so its time to the response
// headers is two RTTs (the handshake, then the request). Probes run at
// time scale 0.5, alternating between the sources, five per source; the
// median, turned back into an unscaled RTT (÷ scale ÷ 2), must lie within
// 25% + 10 ms of the model RTT, and the far−near difference within 25% +
// 10 ms of the model's difference, which is at least 80 ms by the choice
// of the sources. The server never answers early (it sleeps until the
// modelled time), so a loaded machine can only lengthen a probe; the
// medians absorb a few slow ones and the 10 ms absorb scheduling. A second
// HEAD on a kept-alive connection must take one RTT, same tolerance.
func TestTimedHEAD(t *testing.T) {
	const (
		scale    = 0.5
		attempts = 5
		relTol   = 0.25
		absTol   = 10 * time.Millisecond
		minDiff  = 80 * time.Millisecond
	)
	p := worldtest.Params(21, 60, 8)
	run := worldtest.Start(t, p, world.TimeScale(scale))
	w := run.World()

	// A plain site and the two nodes nearest and farthest from it.
	var site world.Site
	var near, far netip.Addr
	for _, s := range w.Sites() {
		if s.Kind == world.CDNSite || s.Flaky || s.Hostile != world.NotHostile {
			continue
		}
		nodes := w.NodeAddrs()
		slices.SortFunc(nodes, func(a, b netip.Addr) int { return int(w.RTT(a, s) - w.RTT(b, s)) })
		if w.RTT(nodes[len(nodes)-1], s)-w.RTT(nodes[0], s) >= minDiff {
			site, near, far = s, nodes[0], nodes[len(nodes)-1]
			break
		}
	}
	if site.Name == "" {
		t.Fatal("no site with two nodes far enough apart")
	}
	url := fmt.Sprintf("http://%s/", netip.AddrPortFrom(site.Addrs[0], uint16(run.Port())))
	client := func(from netip.Addr, keepAlive bool) *http.Client {
		d, err := run.Dialer(from)
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: !keepAlive}}
	}
	head := func(c *http.Client) time.Duration {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodHead, url, nil)
		req.Host = site.Name
		start := time.Now()
		resp, err := c.Do(req)
		d := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("HEAD %s: %s", url, resp.Status)
		}
		return d
	}
	unscaled := func(d time.Duration, rtts float64) time.Duration {
		return time.Duration(float64(d) / scale / rtts)
	}
	median := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	within := func(got, want time.Duration) bool {
		return math.Abs(float64(got-want)) <= relTol*float64(want)+float64(absTol)
	}

	cn, cf := client(near, false), client(far, false)
	var dn, df []time.Duration
	for range attempts {
		dn = append(dn, unscaled(head(cn), 2))
		df = append(df, unscaled(head(cf), 2))
	}
	mn, mf := w.RTT(near, site), w.RTT(far, site)
	gn, gf := median(dn), median(df)
	t.Logf("site %s in %s; near %s (%s) model %v measured %v; far %s (%s) model %v measured %v",
		site.Name, site.Loc.City, near, w.Locate(near).City, mn, gn, far, w.Locate(far).City, mf, gf)
	if !within(gn, mn) {
		t.Errorf("near: measured %v (samples %v), model %v", gn, dn, mn)
	}
	if !within(gf, mf) {
		t.Errorf("far: measured %v (samples %v), model %v", gf, df, mf)
	}
	if !within(gf-gn, mf-mn) {
		t.Errorf("difference: measured %v, model %v", gf-gn, mf-mn)
	}

	// On a kept-alive connection, the next request costs one RTT.
	ck := client(far, true)
	var dk []time.Duration
	for range attempts {
		head(ck) // may open a connection
		dk = append(dk, unscaled(head(ck), 1))
	}
	if gk := median(dk); !within(gk, mf) {
		t.Errorf("kept-alive: measured %v (samples %v), model %v", gk, dk, mf)
	}
}
