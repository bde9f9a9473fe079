package reliability

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestChurn is RELIABILITY.md scenario 1: 8 node processes (20 with
// MICRA_LONG=1) crawl a world; 20 % of them are killed with SIGKILL at
// once, mid-crawl. Every subnet they held must be re-delegated to a live
// node within the liveness timeout + 30 s. Then half of them start again
// from their data directories and new nodes join; at the end no subnet has
// two owners, every outbox drains, every batch a killed node held is
// stored once restarted, and no batch is stored twice. The long form
// starts every killed node again at the end and waits until every seed is
// indexed.
func TestChurn(t *testing.T) {
	n, added := short(8, 20), short(2, 4)
	liveness := short(20*time.Second, 30*time.Second)
	c := newCluster(t, clusterConfig{sites: short(200, 600), nodes: n + added, seed: 5, scale: 0.5, liveness: liveness, batchWait: time.Second})
	for i := range n {
		c.addNode(i).start()
	}
	c.ix.start()
	seeds := c.seeds()
	for i := range seeds {
		seeds[i].Depth = 2
	}
	if left := c.ix.submit(t.Context(), seeds); len(left) > 0 {
		t.Fatalf("%d of %d seeds could not be submitted, first %s", len(left), len(seeds), left[0].Link)
	}
	if !waitFor(t.Context(), time.Minute, func() bool { return c.ix.stats().Batches >= 10 }) {
		t.Fatalf("the indexer stored only %d batches in a minute", c.ix.stats().Batches)
	}

	// Kill 20 % at once.
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	all := c.all()
	victims := make([]*proc, 0, (n+4)/5)
	for _, i := range rng.Perm(n)[:(n+4)/5] {
		victims = append(victims, all[i])
	}
	held := map[string]string{} // subnet → victim's peer id
	for _, v := range victims {
		for r := range subnetsOf(v.mustStatus()) {
			held[r] = v.peerID()
		}
	}
	killedAt := time.Now()
	for _, v := range victims {
		v.kill()
	}
	must := batchSet{}
	stranded := map[*proc][]uint64{}
	for _, v := range victims {
		seqs, _ := nodeOutbox(t, v.dir)
		stranded[v] = seqs
	}

	// Every orphaned subnet goes to a live node within liveness + 30 s.
	limit := liveness + 30*time.Second
	var orphans []string
	redelegated := waitFor(t.Context(), limit, func() bool {
		owners := c.owners()
		orphans = orphans[:0]
		for r := range held {
			if len(owners[r]) == 0 {
				orphans = append(orphans, r)
			}
		}
		return len(orphans) == 0
	})
	took := time.Since(killedAt)
	if !redelegated {
		slices.Sort(orphans)
		t.Errorf("%d of the %d subnets the killed nodes held are not held by a live node %v after the kill: %v",
			len(orphans), len(held), limit, orphans[:min(len(orphans), 10)])
	}

	// Half the victims come back; new nodes join.
	back := victims[:(len(victims)+1)/2]
	for _, v := range back {
		v.start()
		must.add(v.peerID(), stranded[v]...)
		delete(stranded, v)
	}
	for i := n; i < n+added; i++ {
		c.addNode(i).start()
	}
	if long() {
		for v := range stranded {
			v.start()
			must.add(v.peerID(), stranded[v]...)
		}
		clear(stranded)
	}

	// One owner per subnet among the live nodes, once the returning
	// nodes have heard of what changed while they were away.
	var twice []string
	if !waitFor(t.Context(), liveness+30*time.Second, func() bool {
		twice = twice[:0]
		for r, ps := range c.owners() {
			if len(ps) > 1 {
				twice = append(twice, fmt.Sprintf("%s: %v", r, ps))
			}
		}
		return len(twice) == 0
	}) {
		slices.Sort(twice)
		t.Errorf("%d subnets have two owners: %v", len(twice), twice[:min(len(twice), 10)])
	}
	if missing := c.awaitDelivered(must, 2*time.Minute); len(missing) > 0 {
		t.Errorf("%d of %d batches the restarted nodes held at the kill never reached the indexer: %v", len(missing), must.count(), missing[:min(len(missing), 10)])
	}
	if long() {
		if missing := c.awaitIndexed(seeds, 5*time.Minute); len(missing) > 0 {
			t.Errorf("%d of %d seeds never indexed, first %v", len(missing), len(seeds), missing[:min(len(missing), 5)])
		}
	}
	if full := c.awaitDrained(2 * time.Minute); len(full) > 0 {
		t.Errorf("outboxes not drained: %v", full)
	}
	c.checkStoredOnce()
	nStranded := 0
	for _, s := range stranded {
		nStranded += len(s)
	}
	t.Logf("figures: %d nodes, %d killed with SIGKILL at once, %d restarted, %d added; of the %d subnets they held, %d not held by a live node after %v (limit %v); "+
		"%d batches in the restarted nodes' outboxes at the kill (all checked); %d wait in the outbox of the node left dead; %s",
		n, len(victims), len(victims)-len(stranded), added, len(held), len(orphans), took.Round(time.Second), limit,
		must.count(), nStranded, c.figures(fmt.Sprintf("seeds %d", len(seeds))))
}

// owners maps each subnet to the live nodes that list it as theirs.
func (c *cluster) owners() map[string][]string {
	out := map[string][]string{}
	for _, p := range c.live() {
		st, err := p.status(c.t.Context())
		if err != nil {
			continue
		}
		for r := range subnetsOf(st) {
			out[r] = append(out[r], fmt.Sprintf("node %d", p.i))
		}
	}
	for r := range maps.Keys(out) {
		slices.Sort(out[r])
	}
	return out
}
