package world

import (
	"net/netip"
	"strings"

	"github.com/micra-net/micra/subnet"
)

// OrgOf returns the organisation of range id: its own, or its nearest
// ancestor's; "" when none has one.
func OrgOf(t *subnet.Tree, id subnet.ID) string {
	for x := id; x != subnet.None; x = t.Parent(x) {
		if o := t.Org(x); o != "" {
			return o
		}
	}
	return ""
}

// OrgFilter returns a test of whether an address's smallest non-unary
// range belongs (OrgOf) to an organisation whose name contains text, case
// folded: one organisation's prefixes, such as a cloud's. The test caches
// its answer per organisation and is not safe for concurrent use.
func OrgFilter(t *subnet.Tree, text string) func(netip.Addr) bool {
	want := strings.ToLower(text)
	names := map[string]bool{} // organisation key → whether it matches
	return func(a netip.Addr) bool {
		id := t.SmallestNonUnary(a)
		if id == subnet.None {
			return false
		}
		key := OrgOf(t, id)
		ok, seen := names[key]
		if !seen {
			ok = key != "" && strings.Contains(strings.ToLower(t.OrgName(key)), want)
			names[key] = ok
		}
		return ok
	}
}
