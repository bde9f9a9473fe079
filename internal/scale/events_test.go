package scale

import (
	"net/netip"
	"testing"

	"github.com/micra-net/micra/subnet"
)

// TestAnchorContains reads range anchors as subnet.Range prints them, a
// prefix or a start and end.
func TestAnchorContains(t *testing.T) {
	r := subnet.Range{Start: netip.MustParseAddr("127.0.0.5"), End: netip.MustParseAddr("127.0.0.9")}
	for _, c := range []struct {
		anchor, addr string
		want         bool
	}{
		{"127.1.0.0/16", "127.1.9.7", true},
		{"127.1.0.0/16", "127.2.0.1", false},
		{r.String(), "127.0.0.7", true},
		{r.String(), "127.0.0.9", true},
		{r.String(), "127.0.0.10", false},
		{"invalid range", "127.0.0.7", false},
	} {
		if got := anchorContains(c.anchor, netip.MustParseAddr(c.addr)); got != c.want {
			t.Errorf("anchorContains(%q, %s) = %v, want %v", c.anchor, c.addr, got, c.want)
		}
	}
}
