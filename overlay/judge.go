package overlay

import (
	"cmp"
	"context"
	"hash/fnv"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// The judgment of one audited record: who re-fetches it (the subnet's
// nearest nodes after its author) and what their pages say of the claim.

// urlHash names a prior's URL in a tally's judged list.
func urlHash(u string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(u))
	return h.Sum64()
}

// judge has auditors near subnet id refetch the claimed page: the first
// usable fetch that agrees settles it, a disagreement needs a second from
// another place (place.go). An auditor in the author's place is not asked,
// or, when its place shows only once it is connected, not counted: one
// operator's nodes neither clear nor confirm each other.
func (o *Overlay) judge(ctx context.Context, sh *shard, id subnet.ID, claim Claim) (pb.AuditVerdict_Result, []*pb.Page) {
	var pages []*pb.Page
	author := o.placeOf(claim.Node)
	var first place // the place of the first auditor that disagreed
	disagreed := false
	for _, p := range o.coord.auditors(sh, id, claim) {
		if len(pages) == maxAuditors || ctx.Err() != nil {
			break
		}
		if pl := o.placeOf(p); pl.known() && pl.same(author) {
			continue
		}
		pg, err := o.refetch(ctx, p, claim.URL)
		pl := o.placeOf(p)
		m := pageToPB(pg)
		m.Peer = []byte(p)
		pages = append(pages, m)
		switch {
		case pl.same(author):
			m.Error = "not counted: the author's place (one /24, /48 or AS)"
			continue
		case err != nil:
			m.Error = truncate(err.Error(), 256)
			continue
		case pg.Status < 200 || pg.Status > 299 || pg.Fingerprint == 0:
			continue // gone, moved or no longer parsed since: says nothing
		}
		dist := distance(pg.Fingerprint, claim.Fingerprint)
		m.Distance = int32(dist)
		o.log.Debug("audit refetch", "url", claim.URL, "peer", claim.Node, "auditor", p, "distance", dist)
		agrees := dist <= o.cfg.audit.Tolerance
		switch {
		case agrees && !disagreed:
			return pb.AuditVerdict_AGREE, pages
		case agrees:
			// The auditors differ: one of them, or the page, is not
			// what it seems. Neither side is counted.
			o.log.Info("auditors differ", "url", claim.URL, "peer", claim.Node)
			return pb.AuditVerdict_INCONCLUSIVE, pages
		case disagreed && pl.same(first):
			m.Error = "not counted: the first disagreeing auditor's place (one /24, /48 or AS)"
			continue
		case disagreed:
			return pb.AuditVerdict_DISAGREE, pages
		}
		disagreed, first = true, pl
	}
	return pb.AuditVerdict_INCONCLUSIVE, pages
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func distance(a, b uint64) int {
	n := 0
	for x := a ^ b; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// hostOf returns the lower-case host of a URL, "" when it has none.
// auditors lists the nodes to ask to refetch a page of subnet id, best
// first: the peers that may crawl and refetch, the claim's author left out,
// in the order of their stored probes of the subnet (the author's runners-
// up), then the others in an order that depends on the URL, so that
// audits of one subnet without probes spread over the peers.
func (c *coordinator) auditors(sh *shard, id subnet.ID, claim Claim) []peer.ID {
	e := &env{c: c, sh: sh, subnet: id}
	rtt := map[peer.ID]time.Duration{}
	for _, p := range e.Probes(id) {
		if p.RTT >= 0 {
			if old, ok := rtt[p.Peer]; !ok || p.RTT < old {
				rtt[p.Peer] = p.RTT
			}
		}
	}
	spread := func(p peer.ID) uint64 {
		h := fnv.New64a()
		h.Write([]byte(claim.URL))
		h.Write([]byte(p))
		return h.Sum64()
	}
	var out []peer.ID
	for _, pi := range e.Peers() {
		if pi.ID == claim.Node || (pi.ID == c.self && c.o.cfg.refetcher == nil) {
			continue
		}
		out = append(out, pi.ID)
	}
	slices.SortFunc(out, func(a, b peer.ID) int {
		ra, oka := rtt[a]
		rb, okb := rtt[b]
		switch {
		case oka && okb && ra != rb:
			return int(ra - rb)
		case oka != okb:
			if oka {
				return -1
			}
			return 1
		}
		return cmp.Compare(spread(a), spread(b))
	})
	return out
}
