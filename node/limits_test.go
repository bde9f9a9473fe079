package node_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
	"github.com/micra-net/micra/node"
)

// TestDiskCapPausesCrawling: a node whose data directory is over its
// disk_cap keeps the seeds submitted to it and fetches none, and its
// status says why.
func TestDiskCapPausesCrawling(t *testing.T) {
	run := worldtest.Start(t, worldtest.Params(23, 12, 3), world.TimeScale(0.05))
	n := testNodeWith(t, run, 0, t.TempDir(), nil, func(c *node.Config) { c.DiskCap = "4KiB" })
	defer n.Close()
	if err := n.Join(t.Context()); err != nil {
		t.Fatal(err)
	}
	var seeds []crawl.Request
	for _, s := range run.World().Sites()[:5] {
		seeds = append(seeds, crawl.Request{Link: run.URL(s)})
	}
	if _, err := n.Submit(t.Context(), seeds...); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "crawling paused", func() error {
		st := getStatus(t, n)
		if !strings.Contains(st.Crawl.Paused, "disk cap reached") || !slices.ContainsFunc(st.Warnings, func(w string) bool { return strings.HasPrefix(w, "crawling paused: disk cap reached") }) {
			return fmt.Errorf("paused %q, warnings %q", st.Crawl.Paused, st.Warnings)
		}
		return nil
	})
	if st := n.CrawlStats(); st.Fetched != 0 || st.Queued+st.Outgoing == 0 {
		t.Errorf("at the disk cap: %d fetched, %d queued, %d outgoing", st.Fetched, st.Queued, st.Outgoing)
	}
}
