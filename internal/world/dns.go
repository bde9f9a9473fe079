package world

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// dnsTTL is the TTL in seconds of the world's A and CNAME records.
const dnsTTL = 300

// startDNS serves DNS on the bound TCP listener and UDP socket and
// returns once both serve.
func (r *Running) startDNS(tl net.Listener, pc net.PacketConn) error {
	h := dns.HandlerFunc(r.serveDNS)
	for _, s := range []*dns.Server{{Listener: tl, Handler: h}, {PacketConn: pc, Handler: h}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		errc := make(chan error, 1)
		r.dns = append(r.dns, s)
		r.wg.Go(func() { errc <- s.ActivateAndServe() })
		select {
		case <-started:
		case err := <-errc:
			r.dns = r.dns[:len(r.dns)-1]
			return fmt.Errorf("starting DNS: %w", err)
		case <-time.After(10 * time.Second):
			return fmt.Errorf("starting DNS: not serving after 10s")
		}
	}
	return nil
}

func (r *Running) soa() dns.RR {
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: ".", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
		Ns:      "ns.micra-world.",
		Mbox:    "hostmaster.micra-world.",
		Serial:  2026010101,
		Refresh: 3600,
		Retry:   600,
		Expire:  86400,
		Minttl:  60,
	}
}

// serveDNS answers as the authority for every name: A records for the
// world's sites (a CNAME first for an alias), every point of presence of
// a CDN-like site ordered nearest first to the querying address, NODATA
// for other types of a known name, NXDOMAIN for unknown names.
func (r *Running) serveDNS(wr dns.ResponseWriter, req *dns.Msg) {
	r.dnsQueries.Add(1)
	m := new(dns.Msg)
	switch {
	case req.Opcode != dns.OpcodeQuery:
		m.SetRcode(req, dns.RcodeNotImplemented)
		_ = wr.WriteMsg(m)
		return
	case len(req.Question) != 1:
		m.SetRcode(req, dns.RcodeFormatError)
		_ = wr.WriteMsg(m)
		return
	}
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = false
	q := req.Question[0]
	name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
	s, ok := r.w.byName[name]
	if !ok || (q.Qclass != dns.ClassINET && q.Qclass != dns.ClassANY) {
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{r.soa()}
	} else {
		target := q.Name
		if name != s.name {
			target = dns.Fqdn(s.name)
			m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: dnsTTL}, Target: target})
		}
		if q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY {
			for _, a := range r.orderedAddrs(s, remoteAddr(wr)) {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: target, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: dnsTTL}, A: a.AsSlice()})
			}
		}
		if len(m.Answer) == 0 || (q.Qtype != dns.TypeA && q.Qtype != dns.TypeANY && q.Qtype != dns.TypeCNAME) {
			m.Ns = []dns.RR{r.soa()}
		}
	}
	if _, udp := wr.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if o := req.IsEdns0(); o != nil {
			size = max(int(o.UDPSize()), dns.MinMsgSize)
			m.SetEdns0(uint16(size), false)
		}
		m.Truncate(size)
	}
	if r.log.Enabled(context.Background(), slog.LevelDebug) {
		r.log.Debug("dns query", "source", remoteAddr(wr), "name", q.Name, "type", dns.TypeToString[q.Qtype], "rcode", dns.RcodeToString[m.Rcode], "answers", len(m.Answer))
	}
	_ = wr.WriteMsg(m)
}

func remoteAddr(wr dns.ResponseWriter) netip.Addr {
	switch a := wr.RemoteAddr().(type) {
	case *net.UDPAddr:
		return a.AddrPort().Addr().Unmap()
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// orderedAddrs returns s's addresses, nearest first to from (as a
// geo-aware authoritative server answers for a CDN).
func (r *Running) orderedAddrs(s *siteRec, from netip.Addr) []netip.Addr {
	type ar struct {
		a   netip.Addr
		rtt float64
	}
	e := r.w.endpoint(from)
	as := make([]ar, len(s.hosts))
	for i, h := range s.hosts {
		as[i] = ar{u32addr(h.addr), r.w.meanRTT(e, r.w.endpointU(h.addr))}
	}
	slices.SortStableFunc(as, func(x, y ar) int { return cmp.Compare(x.rtt, y.rtt) })
	out := make([]netip.Addr, len(as))
	for i, x := range as {
		out[i] = x.a
	}
	return out
}
