package demo

import (
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/micra-net/micra/internal/evaluate"
	"github.com/micra-net/micra/internal/world"
)

// crawlSpeed sums, over the demo's judged sites, the world model's time to
// download what the crawl fetched from each site (its requests and bytes)
// from the node it was delegated to, from a node drawn at random (the
// expectation: the mean over the nodes) and from the nearest node.
type crawlSpeed struct {
	requests      int64
	got, rnd, opt time.Duration
}

func (c *crawlSpeed) add(w *world.World, run *world.Running, s world.Site, node netip.Addr, nodes []netip.Addr) {
	n := run.Counters(s)
	if n.Requests == 0 || len(nodes) == 0 {
		return
	}
	c.requests += n.Requests
	c.got += evaluate.ModelDownload(w, node, s, n.Requests, n.Bytes)
	var sum, best time.Duration
	for i, x := range nodes {
		d := evaluate.ModelDownload(w, x, s, n.Requests, n.Bytes)
		sum += d
		if i == 0 || d < best {
			best = d
		}
	}
	c.rnd += sum / time.Duration(len(nodes))
	c.opt += best
}

// print writes the speed-up line; nothing when no page was fetched.
func (c *crawlSpeed) print(out io.Writer) {
	if c.got <= 0 {
		return
	}
	g := c.got.Seconds()
	fmt.Fprintf(out, "Crawl speed-up (the world's model, on the %d requests to these sites, each on a fresh connection): download time as delegated %.1f s;"+
		" by random assignment %.1f s (%.2f× as long); from the nearest nodes %.1f s (%.2f×).\n",
		c.requests, g, c.rnd.Seconds(), c.rnd.Seconds()/g, c.opt.Seconds(), c.opt.Seconds()/g)
}
