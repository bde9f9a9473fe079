package requests

import (
	"log/slog"
	"testing"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/internal/p2ptest"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// hostsJoined returns n hosts on net, the first connected to the others.
func hostsJoined(t *testing.T, net *p2ptest.Net, n int) []host.Host {
	t.Helper()
	hs := make([]host.Host, n)
	for i := range hs {
		hs[i] = net.Host(t, nil, p2ptest.Addr(i))
	}
	for _, h := range hs[1:] {
		if err := hs[0].Connect(t.Context(), peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	return hs
}

// serveCrawl has h take crawl requests with f and opts (quietly) until the
// test ends.
func serveCrawl(t *testing.T, h host.Host, f CrawlHandler, opts ...Option) {
	t.Helper()
	remove, err := ServeCrawlRequests(h, f, append([]Option{Logger(quiet())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
}
