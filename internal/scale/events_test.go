package scale

import (
	"net/netip"
	"strings"
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

// TestEventsAbout: the account of a lost subnet holds the ownership records
// of its shard and the orphaning of a subnet that contains it (logged with
// the subnet, not the shard), nothing about other shards, and nothing
// before the events are armed.
func TestEventsAbout(t *testing.T) {
	var e events
	lg := e.logger(netip.MustParseAddr("127.9.0.1"))
	lg.Info("shard claimed", "shard", "range:127.1.0.0/16", "epoch", 1) // not armed yet
	e.armed.Store(true)
	lg.Info("shard claimed", "shard", "range:127.1.0.0/16", "epoch", 2)
	lg.Info("shard claimed", "shard", "range:127.2.0.0/16", "epoch", 3)
	lg.Info("subnet orphaned", "subnet", "127.1.5.0/28", "reason", "orphaned")
	lg.Info("subnet orphaned", "subnet", "127.1.6.0/28", "reason", "orphaned")
	lg.Info("heartbeat failed", "shard", "range:127.1.0.0/16") // not an ownership record
	got := e.about(netip.MustParseAddr("127.1.5.3"))
	for _, want := range []string{"epoch=2", "subnet orphaned subnet=127.1.5.0/28"} {
		if !strings.Contains(got, want) {
			t.Errorf("about 127.1.5.3: %q, want it to hold %q", got, want)
		}
	}
	for _, not := range []string{"epoch=1", "epoch=3", "127.1.6.0/28", "heartbeat"} {
		if strings.Contains(got, not) {
			t.Errorf("about 127.1.5.3: %q, holds %q", got, not)
		}
	}
}
