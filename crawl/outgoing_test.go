package crawl

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// TestOutgoingStore: links page through the store in order, the cap drops
// the excess and counts it, Handed deletes each link once, and a value that
// does not decode is deleted instead of stopping the store.
func TestOutgoingStore(t *testing.T) {
	f, err := openFrontier(openMemDB(t), 1000, time.Minute, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.outCap = 5
	mk := func(i int) Outlink {
		return Outlink{Request: Request{Link: fmt.Sprintf("http://o%d.test/", i), Depth: i % 3}, Addr: netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)})}
	}
	var links []Outlink
	for i := range 7 {
		links = append(links, mk(i))
	}
	if n, err := f.addOut(links[:3]); err != nil || n != 3 {
		t.Fatal(n, err)
	}
	if n, err := f.addOut(links[3:]); err != nil || n != 2 {
		t.Fatalf("stored %d past the cap of 5 (%v)", n, err)
	}
	var got []Outlink
	var after []byte
	for range 10 {
		page, bad, err := f.outgoing(after, 2)
		if err != nil || bad != 0 {
			t.Fatal(bad, err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		after = page[len(page)-1].key
	}
	if len(got) != 5 {
		t.Fatalf("paged %d links, want 5", len(got))
	}
	for i, o := range got {
		if o.Link != links[i].Link || o.Addr != links[i].Addr || o.Depth != links[i].Depth {
			t.Fatalf("link %d: %+v, want %+v", i, o, links[i])
		}
	}
	if n, err := f.deleteOut([][]byte{got[0].key, got[1].key, got[0].key}); err != nil || n != 2 {
		t.Fatalf("deleted %d, want 2 (%v)", n, err)
	}
	if f.nOut.Load() != 3 {
		t.Fatalf("count %d, want 3", f.nOut.Load())
	}
	// A corrupt value: deleted and counted, the others still served.
	if err := f.db.Update(func(txn *badger.Txn) error { return txn.Set(outlinkKey(1), []byte{9, 9}) }); err != nil {
		t.Fatal(err)
	}
	f.nOut.Add(1)
	page, bad, err := f.outgoing(nil, 10)
	if err != nil || bad != 1 || len(page) != 3 {
		t.Fatalf("after a corrupt value: %d links, %d bad, %v", len(page), bad, err)
	}
	if err := f.countOut(); err != nil || f.nOut.Load() != 3 {
		t.Fatalf("recount %d (%v), want 3", f.nOut.Load(), err)
	}
}

// encodeOutlinkV1 encodes o as version 1 did, before the flags byte.
func encodeOutlinkV1(o Outlink) []byte {
	b := o.encode()
	b = b[:len(b)-1] // the flags byte
	b[0] = 1
	return b
}

// TestOutlinkVersions: a version 1 value, stored before the upgrade, still
// decodes (without the hand-off mark); version 2 keeps the mark; unknown
// flags and versions are refused.
func TestOutlinkVersions(t *testing.T) {
	o := Outlink{Request: Request{Link: "http://a.test/x", ParentLink: "http://b.test/", Depth: 2, Owners: []string{"alice"}}, Addr: netip.MustParseAddr("192.0.2.1"), hops: 3, again: true}
	for _, tc := range []struct {
		name  string
		b     []byte
		again bool
	}{
		{"v1", encodeOutlinkV1(o), false},
		{"v2", o.encode(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeOutlink(tc.b)
			if err != nil || got.Link != o.Link || got.ParentLink != o.ParentLink || got.Depth != o.Depth || got.Addr != o.Addr ||
				got.hops != o.hops || len(got.Owners) != 1 || got.again != tc.again {
				t.Fatalf("decoded %+v (%v)", got, err)
			}
		})
	}
	bad := o.encode()
	bad[len(bad)-1] = 2
	if _, err := decodeOutlink(bad); err == nil {
		t.Error("unknown flag accepted")
	}
	bad = o.encode()
	bad[0] = 3
	if _, err := decodeOutlink(bad); err == nil {
		t.Error("unknown version accepted")
	}
}

// FuzzDecodeOutlink: a stored outlink value never panics the decoder, and
// what decodes encodes back to a value that decodes to the same link.
func FuzzDecodeOutlink(f *testing.F) {
	o := Outlink{Request: Request{Link: "http://a.test/x", ParentLink: "http://b.test/", Depth: -1, Owners: []string{"alice"}}, Addr: netip.MustParseAddr("2001:db8::1")}
	f.Add(o.encode())
	f.Add(encodeOutlinkV1(o))
	h := Outlink{Request: Request{Link: "http://c.test/y", ParentLink: "http://a.test/x", Depth: 3}, Addr: netip.MustParseAddr("192.0.2.7"), hops: 2, again: true}
	f.Add(h.encode())
	f.Add(encodeOutlinkV1(h))
	f.Add([]byte{1, 0, 0, 0, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeOutlink(b)
		if err != nil {
			return
		}
		again, err := decodeOutlink(got.encode())
		if err != nil || again.Link != got.Link || again.ParentLink != got.ParentLink || again.Depth != got.Depth ||
			again.Addr != got.Addr || len(again.Owners) != len(got.Owners) || again.hops != got.hops || again.again != got.again {
			t.Fatalf("round trip: %+v → %+v (%v)", got, again, err)
		}
	})
}
