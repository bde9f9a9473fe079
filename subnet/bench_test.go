package subnet

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// fullInputs are the real data files the default snapshot is built from,
// relative to ../shared/data (see subnet/embedded/inputs.txt).
var fullInputs = []string{
	"rir/iana/delegated-iana-latest.gz",
	"rir/extended/delegated-afrinic-extended-latest.gz",
	"rir/extended/delegated-lacnic-extended-latest.gz",
	"rir/extended/delegated-ripencc-extended-head.gz",
	"rir/2013-08-13/delegated-apnic-latest.gz",
	"rir/2013-08-13/delegated-arin-latest.gz",
	"rir/2013-08-13/delegated-lacnic-latest.gz",
	"rir/2013-08-13/delegated-ripencc-latest.gz",
	"ip2asn/asn-ipv4.csv.gz",
}

func buildFull(tb testing.TB) (*Tree, *Report) {
	tb.Helper()
	dir := dataDir(tb)
	b, err := NewBuilder()
	if err != nil {
		tb.Fatal(err)
	}
	for _, in := range fullInputs {
		if _, err := b.AddFile(context.Background(), filepath.Join(dir, in), FormatAuto); err != nil {
			tb.Fatal(err)
		}
	}
	tr, rep, err := b.Build()
	if err != nil {
		tb.Fatal(err)
	}
	return tr, rep
}

var full = struct {
	once sync.Once
	tree *Tree
	snap []byte
}{}

// fullTree builds the full real-data tree once per test binary.
func fullTree(tb testing.TB) (*Tree, []byte) {
	tb.Helper()
	dataDir(tb)
	full.once.Do(func() {
		full.tree, _ = buildFull(tb)
		var buf bytes.Buffer
		if err := full.tree.WriteSnapshot(&buf); err != nil {
			tb.Fatal(err)
		}
		full.snap = buf.Bytes()
	})
	if full.tree == nil {
		tb.Fatal("building the full tree failed earlier")
	}
	return full.tree, full.snap
}

// BenchmarkBuildFull parses all the real data (gzip included) and builds the
// tree. Goal: ≤ 5 s on one core.
func BenchmarkBuildFull(b *testing.B) {
	dataDir(b)
	var ranges int
	for b.Loop() {
		tr, _ := buildFull(b)
		ranges = tr.Len() - 2
	}
	b.ReportMetric(float64(ranges), "ranges")
}

// lookupAddrs returns addresses spread over the tree's ranges.
func lookupAddrs(tr *Tree, is4 bool, n int) []netip.Addr {
	rng := rand.New(rand.NewPCG(5, 6))
	lo, hi := tr.bounds(is4)
	out := make([]netip.Addr, n)
	for i := range out {
		id := lo + 1 + rng.IntN(hi-lo-1)
		s, e := tr.start[id], tr.end[id]
		d := e.sub(s)
		off := key{lo: rng.Uint64()}
		if d.hi == 0 && d.lo != ^uint64(0) {
			off.lo %= d.lo + 1
		}
		out[i] = s.add(off).addr(is4)
	}
	return out
}

func benchLookup(b *testing.B, is4 bool, f func(*Tree, netip.Addr) ID) {
	tr, _ := fullTree(b)
	addrs := lookupAddrs(tr, is4, 1<<16)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		f(tr, addrs[i&(len(addrs)-1)])
		i++
	}
}

// Goal: ≤ 500 ns per lookup.
func BenchmarkLookupIPv4(b *testing.B) { benchLookup(b, true, (*Tree).Lookup) }
func BenchmarkLookupIPv6(b *testing.B) { benchLookup(b, false, (*Tree).Lookup) }
func BenchmarkSmallestNonUnaryIPv4(b *testing.B) {
	benchLookup(b, true, (*Tree).SmallestNonUnary)
}

// BenchmarkSnapshotLoad decodes the full snapshot and reports the heap it
// retains per range. Goal: ≤ 150 bytes per range.
func BenchmarkSnapshotLoad(b *testing.B) {
	_, snap := fullTree(b)
	b.SetBytes(int64(len(snap)))
	var kept *Tree
	var before, after runtime.MemStats
	for b.Loop() {
		kept = nil
		runtime.GC()
		runtime.ReadMemStats(&before)
		t, err := DecodeSnapshot(snap)
		if err != nil {
			b.Fatal(err)
		}
		kept = t
		runtime.GC()
		runtime.ReadMemStats(&after)
	}
	ranges := float64(kept.Len() - 2)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/ranges, "heapB/range")
	b.ReportMetric(float64(kept.Stats().MemoryBytes)/ranges, "B/range")
	runtime.KeepAlive(kept)
}

// TestFullData builds the full real data and checks its shape: depth within
// the paper's 8, the known chains, and the memory budget.
func TestFullData(t *testing.T) {
	tr, snap := fullTree(t)
	st := tr.Stats()
	if st.Ranges < 500_000 || st.MaxDepth > 8 || st.Orgs < 85_000 {
		t.Errorf("unexpected shape: %d ranges, max depth %d, %d organisations", st.Ranges, st.MaxDepth, st.Orgs)
	}
	if per := float64(st.MemoryBytes) / float64(st.Ranges); per > 150 {
		t.Errorf("%.1f bytes per range, budget 150", per)
	}
	for _, tc := range []struct{ addr, smallest, org string }{
		{"193.0.6.139", "193.0.0.0/21", "as-org:Reseaux IP Europeens Network Coordination Centre (RIPE NCC)"},
		{"2001:67c:2e8::1", "2001:67c:2e8::/48", ""},
		{"1.1.1.1", "1.1.1.0/24", "as-org:Cloudflare, Inc."},
		{"41.0.0.1", "41.0.0.0/16", "as-org:Vodacom"},
	} {
		n := tr.Node(tr.SmallestNonUnary(mustAddr(t, tc.addr)))
		if n.Range.String() != tc.smallest || n.Org != tc.org {
			t.Errorf("%s -> %s %q, want %s %q", tc.addr, n.Range, n.Org, tc.smallest, tc.org)
		}
	}
	checkLayering(t, tr)
	back, err := DecodeSnapshot(snap)
	if err != nil || back.ID() != tr.ID() {
		t.Fatalf("full snapshot round trip: %v", err)
	}
}
