package requests

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/requests/pb"
)

// FuzzDecodeCrawl feeds arbitrary bytes to the decoder of /micra/crawl
// frames (the fuzzing inventory): it must not panic, and whatever
// it accepts must satisfy the protocol's bounds.
func FuzzDecodeCrawl(f *testing.F) {
	good, _ := proto.Marshal(&pb.CrawlMessage{Version: wireVersion, Type: pb.CrawlMessage_CRAWL,
		Requests: []*pb.CrawlRequest{{Link: "http://127.2.3.4/a", Depth: -1, Owners: []string{"x"}}}})
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{8, 2, 16, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.CrawlMessage
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		reqs, err := decodeCrawl(&m)
		if err != nil {
			return
		}
		if len(reqs) == 0 || len(reqs) > MaxCrawlRequests {
			t.Fatalf("%d requests accepted", len(reqs))
		}
		for _, r := range reqs {
			if err := CheckRequest(r); err != nil {
				t.Fatalf("accepted a request that fails its check: %v", err)
			}
		}
	})
}
