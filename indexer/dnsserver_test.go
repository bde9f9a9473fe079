package indexer

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// TestDNSServer: with DNSServer the indexer asks that server, and a name
// it does not know fails naming that server, not the system's resolver.
func TestDNSServer(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		if q.Question[0].Name == "here.example." && q.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: "here.example.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(127, 0, 0, 9)})
		} else if q.Question[0].Name != "here.example." {
			m.Rcode = dns.RcodeNameError
		}
		w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	defer srv.Shutdown()
	server := netip.MustParseAddrPort(pc.LocalAddr().String())
	c := defaultConfig()
	if err := DNSServer(server)(&c); err != nil {
		t.Fatal(err)
	}
	if a, err := c.resolve(t.Context(), "here.example"); err != nil || a != netip.MustParseAddr("127.0.0.9") {
		t.Fatalf("resolve: %v, %v", a, err)
	}
	if as, err := c.lookupAll(t.Context(), "here.example"); err != nil || len(as) != 1 {
		t.Fatalf("lookup: %v, %v", as, err)
	}
	for _, f := range []func() error{
		func() error { _, err := c.resolve(t.Context(), "gone.example"); return err },
		func() error { _, err := c.lookupAll(t.Context(), "gone.example"); return err },
	} {
		if err := f(); err == nil || !strings.Contains(err.Error(), "on "+server.String()) {
			t.Errorf("a name the server does not know: %v, want it named with %s", err, server)
		}
	}
	if err := DNSServer(netip.AddrPort{})(&c); err == nil {
		t.Error("an invalid server taken")
	}
}
