package reliability

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/micra-net/micra/crawl"
)

// batchSet is a set of result batches by node (peer id) and sequence
// number.
type batchSet map[string]map[uint64]bool

func (b batchSet) add(node string, seqs ...uint64) {
	if b[node] == nil {
		b[node] = map[uint64]bool{}
	}
	for _, s := range seqs {
		b[node][s] = true
	}
}

func (b batchSet) count() int { return seenCount(b) }

// missingFrom lists the batches of b that are not in seen.
func (b batchSet) missingFrom(seen map[string]map[uint64]bool) []string {
	var out []string
	for n, m := range b {
		for s := range m {
			if !seen[n][s] {
				out = append(out, fmt.Sprintf("%s/%d", n, s))
			}
		}
	}
	slices.Sort(out)
	return out
}

// awaitDelivered waits up to limit until the indexer stored every batch
// of must; it returns the ones it did not.
func (c *cluster) awaitDelivered(must batchSet, limit time.Duration) []string {
	var missing []string
	waitFor(c.t.Context(), limit, func() bool {
		missing = must.missingFrom(c.ix.seen())
		return len(missing) == 0
	})
	return missing
}

// awaitIndexed waits up to limit until the indexer holds a record of every
// seed; it returns the seeds it does not.
func (c *cluster) awaitIndexed(seeds []crawl.Request, limit time.Duration) []string {
	var missing []string
	waitFor(c.t.Context(), limit, func() bool {
		missing = missing[:0]
		for _, s := range seeds {
			if !c.ix.indexed(c.t.Context(), s.Link) {
				missing = append(missing, s.Link)
			}
		}
		return len(missing) == 0
	})
	for _, u := range missing[:min(len(missing), 10)] {
		c.explainSeed(u)
	}
	return missing
}

// explainSeed logs who holds a seed's subnet, for a failure's diagnosis.
func (c *cluster) explainSeed(u string) {
	for _, s := range c.w.Sites() {
		if c.run.URL(s) != u {
			continue
		}
		if !c.ix.up() {
			return
		}
		d, ok, err := c.ix.o.Resolve(c.t.Context(), s.Addrs[0])
		owner := "nobody"
		for _, p := range c.all() {
			if ok && p.peerID() == d.Node.String() {
				owner = fmt.Sprintf("node %d (running %v)", p.i, p.running())
			}
		}
		c.t.Logf("seed %s (%s, subnet %s): delegated %v to %s %s orphaned %v own %v, err %v", u, s.Addrs[0], s.Subnet, ok, d.Node, owner, d.Orphaned, d.Own, err)
	}
}

// awaitDrained waits up to limit until every running node's outbox is
// empty; it returns the nodes whose outbox is not, with their counts.
func (c *cluster) awaitDrained(limit time.Duration) []string {
	var full []string
	waitFor(c.t.Context(), limit, func() bool {
		full = full[:0]
		for _, p := range c.live() {
			st, err := p.status(c.t.Context())
			if err != nil {
				full = append(full, fmt.Sprintf("node %d: %v", p.i, err))
				continue
			}
			if st.Outbox.Batches > 0 {
				full = append(full, fmt.Sprintf("node %d: %d batches", p.i, st.Outbox.Batches))
			}
		}
		return len(full) == 0
	})
	return full
}

// checkStoredOnce checks the indexer's counters against its replay table:
// every batch it stored is a distinct (node, sequence number), no node
// signed two batches with one number, and nothing valid was refused.
func (c *cluster) checkStoredOnce() {
	c.t.Helper()
	// The nodes are still crawling and the indexer still storing: the
	// counter and the replay table are compared when neither moved between
	// two readings of the table.
	st := c.ix.stats()
	seen := c.ix.seen()
	for range 100 {
		before := seenCount(c.ix.seen())
		st = c.ix.stats()
		seen = c.ix.seen()
		if before == seenCount(seen) && int(st.Batches) == before {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st.Conflicts != 0 {
		c.t.Errorf("indexer: %d conflicting batches (a node reused a sequence number)", st.Conflicts)
	}
	if st.Refused != 0 || st.Rejected != 0 {
		c.t.Errorf("indexer: %d batches refused, %d rejected", st.Refused, st.Rejected)
	}
	if int(st.Batches) != seenCount(seen) {
		c.t.Errorf("indexer stored %d batches but its replay table holds %d distinct ones: some batch was stored twice (or the table lost one)",
			st.Batches, seenCount(seen))
	}
}

// figures is a line for RELIABILITY.md.
func (c *cluster) figures(extra ...string) string {
	st := c.ix.stats()
	tot := c.run.Totals()
	x := c.ix.x.Stats()
	parts := []string{
		fmt.Sprintf("world: %d sites, %d requests served", len(c.w.Sites()), tot.Requests),
		fmt.Sprintf("indexer: %d batches stored (%d distinct), %d records, %d re-sent batches acknowledged again, %d conflicts, %d refused, %d rejected; %d pages searchable",
			st.Batches, seenCount(c.ix.seen()), st.Records, st.Duplicates, st.Conflicts, st.Refused, st.Rejected, x.Docs),
	}
	return strings.Join(append(parts, extra...), "; ")
}
