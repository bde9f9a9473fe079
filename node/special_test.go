package node_test

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/egress/egresstest"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/node"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/requests"
)

// intranet is egresstest.Resolve as a crawl.Resolver.
type intranet struct{}

func (intranet) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	a, err := egresstest.Resolve(ctx, host)
	return []netip.Addr{a}, err
}

// TestNodeRefusesSpecial: a volunteer's node (the default
// configuration: allow_private_networks off) refuses seeds (Submit) and
// peers' crawl requests whose host is a special-purpose address, the name
// localhost, or for seeds a name resolving to one, each with an error
// naming the address's registry entry; nothing is delegated or queued,
// and its own subnet, a loopback address here, is not claimed.
func TestNodeRefusesSpecial(t *testing.T) {
	cfg := node.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.SourceAddr = "127.0.5.1"
	cfg.Dashboard = ""
	cfg.MemoryLimit = "0"
	n, err := node.New(cfg, node.Tree(p2ptest.Tree(t)), node.Resolver(intranet{}), node.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := n.Join(ctx); err != nil { // the first node of a network: claims its own subnet
		t.Fatal(err)
	}

	cases := egresstest.Special()
	name := "http://" + egresstest.Intranet + "/"
	classes := map[string]string{name: egresstest.IntranetClass}
	var seeds []crawl.Request
	for _, c := range cases {
		seeds = append(seeds, crawl.Request{Link: c.URL(), Depth: 1})
		classes[c.URL()] = c.Class
	}
	seeds = append(seeds, crawl.Request{Link: name, Depth: 1})
	res, err := n.Submit(ctx, seeds...)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Failed) != len(seeds) {
		t.Errorf("%d of %d seeds refused; sent %v", len(res.Failed), len(seeds), res.Sent)
	}
	for _, f := range res.Failed {
		if !errors.Is(f.Err, egress.ErrSpecialPurpose) || !strings.Contains(f.Err.Error(), classes[f.Link]) {
			t.Errorf("seed %s: %v, want a refusal naming %q", f.Link, f.Err, classes[f.Link])
		}
		if f.Link == "http://169.254.169.254/" && !strings.HasSuffix(f.Err.Error(), "; --allow-private-networks lifts this") {
			t.Errorf("seed %s: %v does not say how to lift it", f.Link, f.Err)
		}
	}

	sk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := overlay.NewHost(sk, overlay.BindAddress(netip.MustParseAddr("127.0.0.1"), 0), overlay.NoRelayService())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ai, err := peer.AddrInfoFromString(n.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Connect(ctx, *ai); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		_, err := requests.SendCrawlReceipts(ctx, h, n.ID(), []crawl.Request{{Link: c.URL(), Depth: 1}})
		if err == nil || !strings.Contains(err.Error(), c.Class) {
			t.Errorf("%s: crawl request = %v, want a refusal naming %q", c.Name, err, c.Class)
		}
	}

	if st := n.CrawlStats(); st.Queued != 0 || st.Outgoing != 0 {
		t.Errorf("%d requests queued, %d links waiting", st.Queued, st.Outgoing)
	}
	if owned := n.Overlay().Owned(); len(owned) != 0 {
		t.Errorf("subnets delegated to the node: %v", owned)
	}
}
