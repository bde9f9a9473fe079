package requests

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/egress/egresstest"
	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/overlaytest"
)

// crawlSink records the crawl requests a handler took.
type crawlSink struct {
	mu   sync.Mutex
	reqs []crawl.Request
}

func (s *crawlSink) take(_ context.Context, _ peer.ID, reqs []crawl.Request) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, reqs...)
	return nil
}

func (s *crawlSink) taken() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// TestCrawlRequestsRefuseSpecial: a node refuses a peer's crawl
// request frame holding a request for a special-purpose host, for each
// class, with an error naming the class; nothing of the frame reaches its
// crawler. With private networks allowed the emulated Internet's loopback
// sites are taken.
func TestCrawlRequestsRefuseSpecial(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		hs := hostsJoined(t, p2ptest.NewNet(t), 3)
		sender, strict, open := hs[0], hs[1], hs[2]
		var refused, taken crawlSink
		serveCrawl(t, strict, refused.take)
		serveCrawl(t, open, taken.take, Egress(egress.Policy{AllowPrivate: true}))
		for _, c := range egresstest.Special() {
			reqs := []crawl.Request{{Link: "http://93.184.216.34/", Depth: 1}, {Link: c.URL() + "page", Depth: 1}}
			_, err := SendCrawlReceipts(t.Context(), sender, strict.ID(), reqs)
			if err == nil || !strings.Contains(err.Error(), c.Class) || !strings.Contains(err.Error(), c.URL()) {
				t.Errorf("%s: SendCrawlReceipts = %v, want a refusal naming %s and %q", c.Name, err, c.URL(), c.Class)
			}
		}
		if n := refused.taken(); n != 0 {
			t.Errorf("the refusing node's crawler took %d requests", n)
		}
		if _, err := SendCrawlReceipts(t.Context(), sender, open.ID(), []crawl.Request{{Link: "http://127.0.0.1:8089/", Depth: 1}}); err != nil || taken.taken() != 1 {
			t.Errorf("allowing private networks: SendCrawlReceipts(127.0.0.1) = %v, %d taken", err, taken.taken())
		}
	})
}

// TestSubmitRefusesSpecial: Submit refuses each seed whose host
// is a special-purpose address, the name localhost, or a name that
// resolves to a special-purpose address, naming the class, before any
// delegation: nothing is resolved in the overlay, delegated or queued, and
// localhost and literals are not even looked up. With private networks
// allowed, a seed on the emulated Internet's 127/8 is delegated and queued.
func TestSubmitRefusesSpecial(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		net := p2ptest.NewNet(t)
		strict := overlaytest.NewNode(t, net, 0, overlay.Egress(egress.Policy{}))
		var looked []string
		var mu sync.Mutex
		resolve := Resolve(func(ctx context.Context, host string) (netip.Addr, error) {
			mu.Lock()
			looked = append(looked, host)
			mu.Unlock()
			if host == "site.example" { // a name of the emulated Internet
				return netip.MustParseAddr("127.0.5.5"), nil
			}
			return egresstest.Resolve(ctx, host)
		})
		var queued crawlSink
		var seeds []crawl.Request
		intranet := "http://" + egresstest.Intranet + "/"
		classes := map[string]string{intranet: egresstest.IntranetClass}
		for _, c := range egresstest.Special() {
			seeds = append(seeds, crawl.Request{Link: c.URL(), Depth: 1})
			classes[c.URL()] = c.Class
		}
		seeds = append(seeds, crawl.Request{Link: intranet, Depth: 1})
		res, err := Submit(t.Context(), strict.Overlay, seeds, resolve, LocalCrawl(queued.take), Logger(quiet()))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Failed) != len(seeds) || len(res.Sent) != 0 {
			t.Fatalf("Submit sent %v and failed %d of %d seeds", res.Sent, len(res.Failed), len(seeds))
		}
		for _, f := range res.Failed {
			if !errors.Is(f.Err, egress.ErrSpecialPurpose) || !strings.Contains(f.Err.Error(), classes[f.Link]) {
				t.Errorf("seed %s: %v, want a refusal naming %q", f.Link, f.Err, classes[f.Link])
			}
		}
		mu.Lock()
		if len(looked) != 1 || looked[0] != egresstest.Intranet {
			t.Errorf("hosts looked up: %v, want %s only", looked, egresstest.Intranet)
		}
		mu.Unlock()
		k := strict.Overlay.Stats().Kinds
		if n := k["micra/DELEGATE"] + k["micra/RESOLVE"]; n != 0 || len(strict.Overlay.Owned()) != 0 || queued.taken() != 0 {
			t.Errorf("%d delegation requests, %d subnets delegated, %d requests queued", n, len(strict.Overlay.Owned()), queued.taken())
		}

		open := overlaytest.NewNode(t, net, 1) // overlaytest.Options allow private networks
		res, err = Submit(t.Context(), open.Overlay, []crawl.Request{{Link: "http://site.example/", Depth: 1}, {Link: "http://127.0.5.6/", Depth: 1}},
			resolve, LocalCrawl(queued.take), Logger(quiet()))
		if err != nil || len(res.Failed) != 0 || queued.taken() != 2 {
			t.Fatalf("allowing private networks: Submit = %+v, %v; %d queued", res, err, queued.taken())
		}
	})
}
