package evaluate

import (
	"net/netip"
	"slices"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/subnet"
)

// Structure summarises how a world's sites sit in its hierarchy and on the
// map: what the delegation searches' assumptions rest on (an
// organisation's ranges are in one place, siblings are neighbours,
// allocations next to each other are near each other). Places are the
// locations of the latency data (a site at its own coordinates counts at
// the nearest one); distances are between the sites' own coordinates.
type Structure struct {
	Sites int `json:"sites"`
	// OrgTopShare is, over the organisations with at least five sites, the
	// share of their sites at their most common place (weighted by sites).
	OrgTopShare float64 `json:"org_top_place_share"`
	Orgs        int     `json:"orgs"`
	// OrgFarShare is the share of those organisations with sites more than
	// 3,000 km apart (global organisations: clouds, CDNs, carriers).
	OrgFarShare float64 `json:"org_far_share"`
	// SiblingSamePlace and SiblingSameCountry are, over pairs of sites in
	// different smallest ranges with one parent, the shares at one place
	// and in one country.
	SiblingSamePlace   float64 `json:"sibling_same_place"`
	SiblingSameCountry float64 `json:"sibling_same_country"`
	SiblingPairs       int     `json:"sibling_pairs"`
	// AllocSamePlace is, over pairs of sites in different smallest ranges
	// of one registry allocation, the share at one place.
	AllocSamePlace float64 `json:"alloc_same_place"`
	AllocPairs     int     `json:"alloc_pairs"`
	// ConsecutiveKm is the median distance between sites next to each
	// other in address order but in different allocations, and
	// ConsecutiveFar the share of those more than 1,000 km apart.
	ConsecutiveKm  float64 `json:"consecutive_alloc_km"`
	ConsecutiveFar float64 `json:"consecutive_alloc_far"`
}

// maxPairsPerGroup bounds the pairs a group of sites (one parent, one
// allocation) contributes, so that one huge range does not decide a share.
const maxPairsPerGroup = 100

// Describe computes the Structure of w's sites in tree.
func Describe(w World, tree *subnet.Tree) Structure {
	ss := placedSites(w, tree)
	out := Structure{Sites: len(ss)}
	if len(ss) == 0 {
		return out
	}
	out.Orgs, out.OrgTopShare, out.OrgFarShare = orgShares(ss)
	// Pairs within groups: siblings (one parent) and one allocation.
	out.SiblingSamePlace, out.SiblingSameCountry, out.SiblingPairs = pairShares(ss, func(s placedSite) (subnet.ID, bool) {
		p := tree.Parent(s.id)
		return p, p != subnet.None && tree.Parent(p) != subnet.None
	})
	out.AllocSamePlace, _, out.AllocPairs = pairShares(ss, func(s placedSite) (subnet.ID, bool) { return s.alloc, s.alloc != subnet.None })
	out.ConsecutiveKm, out.ConsecutiveFar = consecutiveAllocs(ss)
	return out
}

// placedSite is a site of Describe: where it is and what holds it.
type placedSite struct {
	addr     netip.Addr
	id       subnet.ID // smallest non-unary range
	place    int       // location ID
	country  string
	lat, lon float64
	alloc    subnet.ID
	org      string
}

// placedSites returns w's sites that are not hostile and lie in a range
// of tree, at their own coordinates when they have them.
func placedSites(w World, tree *subnet.Tree) []placedSite {
	var ss []placedSite
	for _, s := range w.Sites() {
		if len(s.Addrs) == 0 || s.Hostile != world.NotHostile {
			continue
		}
		id := tree.SmallestNonUnary(s.Addrs[0])
		if id == subnet.None {
			continue
		}
		x := placedSite{addr: s.Addrs[0], id: id, place: s.Loc.ID, country: s.Loc.Country, lat: s.Loc.Lat, lon: s.Loc.Lon, alloc: allocOf(tree, id), org: world.OrgOf(tree, id)}
		if s.Place != (world.Place{}) {
			x.lat, x.lon = s.Place.Lat, s.Place.Lon
			if s.Place.Country != "" {
				x.country = s.Place.Country
			}
		}
		ss = append(ss, x)
	}
	return ss
}

// orgShares returns, over the organisations with at least five sites,
// their number, the share of their sites at their most common place, and
// the share of them with sites more than 3,000 km apart (Structure's
// Orgs, OrgTopShare and OrgFarShare).
func orgShares(ss []placedSite) (orgs int, topShare, farShare float64) {
	byOrg := map[string][]int{}
	for i, s := range ss {
		if s.org != "" {
			byOrg[s.org] = append(byOrg[s.org], i)
		}
	}
	top, total, far := 0, 0, 0
	for _, idx := range byOrg {
		if len(idx) < 5 {
			continue
		}
		count := map[int]int{}
		best, isFar := 0, false
		for _, i := range idx {
			count[ss[i].place]++
			best = max(best, count[ss[i].place])
			if !isFar {
				for _, j := range idx {
					if world.DistanceKm(ss[i].lat, ss[i].lon, ss[j].lat, ss[j].lon) > 3000 {
						isFar = true
						break
					}
				}
			}
		}
		orgs++
		top += best
		total += len(idx)
		if isFar {
			far++
		}
	}
	if total > 0 {
		topShare = float64(top) / float64(total)
		farShare = float64(far) / float64(orgs)
	}
	return orgs, topShare, farShare
}

// pairShares groups ss by key (sites key rejects are left out) and
// returns, over pairs of sites in one group but different smallest
// ranges (at most maxPairsPerGroup a group), the shares at one place and
// in one country, and the number of pairs.
func pairShares(ss []placedSite, key func(placedSite) (subnet.ID, bool)) (samePlace, sameCountry float64, n int) {
	groups := map[subnet.ID][]int{}
	for i, s := range ss {
		if k, ok := key(s); ok {
			groups[k] = append(groups[k], i)
		}
	}
	var sp, sc int
	for _, idx := range groups {
		k := 0
		for a := 0; a < len(idx) && k < maxPairsPerGroup; a++ {
			for b := a + 1; b < len(idx) && k < maxPairsPerGroup; b++ {
				x, y := ss[idx[a]], ss[idx[b]]
				if x.id == y.id {
					continue
				}
				k++
				if x.place == y.place {
					sp++
				}
				if x.country == y.country {
					sc++
				}
			}
		}
		n += k
	}
	if n == 0 {
		return 0, 0, 0
	}
	return float64(sp) / float64(n), float64(sc) / float64(n), n
}

// consecutiveAllocs sorts ss by address and returns, over sites next to
// each other in different allocations, the median distance and the share
// more than 1,000 km apart (Structure's ConsecutiveKm and
// ConsecutiveFar).
func consecutiveAllocs(ss []placedSite) (medianKm, farShare float64) {
	slices.SortFunc(ss, func(a, b placedSite) int { return a.addr.Compare(b.addr) })
	var kms []float64
	for i := 1; i < len(ss); i++ {
		a, b := ss[i-1], ss[i]
		if a.alloc == subnet.None || b.alloc == subnet.None || a.alloc == b.alloc {
			continue
		}
		kms = append(kms, world.DistanceKm(a.lat, a.lon, b.lat, b.lon))
	}
	if len(kms) == 0 {
		return 0, 0
	}
	slices.Sort(kms)
	n := 0
	for _, d := range kms {
		if d > 1000 {
			n++
		}
	}
	return kms[len(kms)/2], float64(n) / float64(len(kms))
}

// allocOf returns the registry allocation holding id: its highest
// ancestor (itself included) of the RIR layer below the registry blocks,
// or None.
func allocOf(t *subnet.Tree, id subnet.ID) subnet.ID {
	alloc := subnet.None
	for x := id; x != subnet.None; x = t.Parent(x) {
		if t.Layer(x) == subnet.LayerRIR && t.Depth(x) >= 2 {
			alloc = x
		}
	}
	return alloc
}
