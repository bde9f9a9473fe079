package indexer

import (
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/crawl"
)

// TestHostRecords: when a node last delivered a record of a host, by
// host (not page); bounded, the older half of the span forgotten when
// full.
func TestHostRecords(t *testing.T) {
	var h hostRecords
	n, m := peer.ID("n"), peer.ID("m")
	h.note(n, []crawl.Record{{URL: "http://a.example/1"}, {URL: "not a url\x7f"}}, testNow)
	switch {
	case !h.since(n, "http://a.example/other", testNow.Add(-time.Second)):
		t.Error("a record of the host before: not seen")
	case h.since(n, "http://a.example/1", testNow):
		t.Error("a record at the time asked about counts as after it")
	case h.since(m, "http://a.example/1", testNow.Add(-time.Second)), h.since(n, "http://b.example/", testNow.Add(-time.Second)):
		t.Error("another node's or host's record counted")
	}
	// Full: the newer half stays.
	for i := range maxHostRecords - 1 {
		h.note(m, []crawl.Record{{URL: fmt.Sprintf("http://h%d.example/", i)}}, testNow.Add(time.Duration(i+1)*time.Millisecond))
	}
	h.note(n, []crawl.Record{{URL: "http://new.example/"}}, testNow.Add(time.Hour))
	if len(h.m) > maxHostRecords || len(h.m) < maxHostRecords/4 {
		t.Fatalf("%d pairs after eviction", len(h.m))
	}
	if h.since(n, "http://a.example/", testNow.Add(-time.Second)) || !h.since(n, "http://new.example/", testNow) {
		t.Error("the oldest pair kept or the newest lost")
	}
}
