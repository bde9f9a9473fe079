package scale

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// churn: a share of the nodes (never the bootstrap peers) leaves without
// a word; as many join. After the liveness timeout and the coordinators'
// checks, every subnet delegated before must be held by a live node (the
// orphans of the departed re-delegated when asked), and none by two.
// later's subnets are delegated afresh and todo's held ones asked for
// again; churn sets res's churn figures.
func (s *sim) churn(res *Result, todo, later []world.Site) error {
	held := map[subnet.Range]bool{}
	for _, n := range s.nodes {
		for _, d := range n.o.Owned() {
			if !d.Own {
				held[d.Subnet] = true
			}
		}
	}
	s.evs.armed.Store(true)
	churnAt := time.Now()
	for _, i := range s.rng.Perm(s.cfg.Nodes - s.cfg.Boot)[:s.extra] {
		n := s.nodes[s.cfg.Boot+i]
		n.gone = true
		s.net.Cut(n.addr)
	}
	res.Left = s.extra
	fresh := make([]*simNode, s.extra)
	var err error
	for i := range fresh {
		if fresh[i], err = s.start(s.addrs[s.cfg.Nodes+i]); err != nil {
			return err
		}
	}
	if err := s.join(fresh, s.boot); err != nil {
		return err
	}
	s.nodes = append(s.nodes, fresh...)
	if s.wait(s.liveness + 2*time.Minute) {
		return ErrStopped
	}
	alive := live(s.nodes)
	if res.FailedAfterChurn, _ = s.delegateAll(later, alive); res.FailedAfterChurn > 0 {
		s.logf("%d of %d delegations after the churn failed", res.FailedAfterChurn, len(later))
	}
	// Every subnet delegated before is asked for again, as a crawler
	// meeting its sites would: a held subnet answers with its node,
	// an orphan is decided afresh.
	var again []world.Site
	for _, site := range todo {
		if held[s.tree.Range(s.tree.SmallestNonUnary(site.Addrs[0]))] {
			again = append(again, site)
		}
	}
	if res.FailedAgain, _ = s.delegateAll(again, alive); res.FailedAgain > 0 {
		s.logf("%d of %d subnets asked for again after the churn failed", res.FailedAgain, len(again))
	}
	if s.wait(2 * s.heartbeat) { // heartbeats settle who holds what
		return ErrStopped
	}
	s.account(res, held, alive, churnAt)
	return nil
}

// account counts, of the subnets held before the churn, those no live
// node holds (lost) and those two hold (doubled), into res, and logs what
// the shard of the first ten lost says of them.
func (s *sim) account(res *Result, held map[subnet.Range]bool, alive []*simNode, churnAt time.Time) {
	holders := map[subnet.Range]int{}
	for _, n := range alive {
		for _, d := range n.o.Owned() {
			holders[d.Subnet]++
		}
	}
	gone := map[peer.ID]bool{}
	for _, n := range s.nodes {
		if n.gone {
			gone[n.o.Host().ID()] = true
		}
	}
	// A part whose node left is orphaned and not decided again (by
	// design): its sites fall back to the delegation around it.
	// It is lost only when no live node holds one.
	fellBack := 0
	covered := func(r subnet.Range) bool {
		for c, h := range holders {
			if h > 0 && c != r && c.ContainsRange(r) {
				return true
			}
		}
		return false
	}
	for r := range held {
		switch h := holders[r]; {
		case h == 0 && r != s.tree.Range(s.tree.SmallestNonUnary(r.Start)) && covered(r):
			fellBack++
		case h == 0:
			res.Lost++
			if res.Lost <= 10 { // what the shard says of it
				alive[0].o.Invalidate(r)
				d, ok, err := alive[0].o.Resolve(s.ctx, r.Start)
				at, _ := s.byPeer.Load(d.Node)
				s.logf("lost %s: resolves to %s on %s at %v (departed %v, orphaned %v, found %v, error %v); the churn at %s, its shard since:%s",
					r, d.Subnet, d.Node, at, gone[d.Node], d.Orphaned, ok, err, churnAt.Format("15:04:05.000"), s.evs.about(r.Start))
			}
		case h > 1:
			res.Doubled++
		}
	}
	for r, h := range holders {
		if h > 1 && !held[r] {
			res.Doubled++
		}
	}
	var adopted int64 // subnets taken up from heartbeat acks (lost ASSIGNs), over the whole run
	for _, n := range alive {
		adopted += n.o.Stats().Adopted
	}
	s.logf("churn: %d left, %d joined; %d subnets held before, %d lost, %d doubled; %d parts fell back to the range around them; %d taken up from heartbeat acks in the run",
		s.extra, s.extra, len(held), res.Lost, res.Doubled, fellBack, adopted)
}
