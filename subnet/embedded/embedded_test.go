package embedded

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/micra-net/micra/subnet"
)

func TestEmbeddedLookups(t *testing.T) {
	tr, err := Tree()
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Tree()
	if again != tr {
		t.Error("Tree decoded the snapshot twice")
	}
	// The README's main-job command looks up these two addresses.
	for _, tc := range []struct {
		addr, smallest, registry string
		depth                    int
	}{
		{"193.0.6.139", "193.0.0.0/21", "", 3},
		{"2001:67c:2e8::1", "2001:67c:2e8::/48", "ripencc", 2},
	} {
		a := netip.MustParseAddr(tc.addr)
		chain := tr.Chain(a)
		n := tr.Node(tr.SmallestNonUnary(a))
		if n.Range.String() != tc.smallest || n.Depth != tc.depth || n.Registry != tc.registry || len(chain) != tc.depth+1 {
			t.Errorf("%s -> %+v (chain of %d), want %s at depth %d", tc.addr, n, len(chain), tc.smallest, tc.depth)
		}
		if top := tr.Node(chain[1]); top.Registry != "ripencc" || top.Layer != subnet.LayerIANA {
			t.Errorf("%s: first block %+v, want RIPE NCC's IANA block", tc.addr, top)
		}
	}
}

// TestEmbeddedIsCurrent rebuilds the snapshot from the real data and checks
// that the embedded one has the same id, so a change to the builder or the
// data cannot leave a stale snapshot in the binary.
func TestEmbeddedIsCurrent(t *testing.T) {
	if raceEnabled {
		t.Skip("a single-threaded rebuild of the real data; it runs without -race")
	}
	root := filepath.Join("..", "..")
	paths := strings.Fields(Inputs)
	if _, err := os.Stat(filepath.Join(root, paths[0])); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI needs the real data beside the repository: %v", err)
		}
		t.Skipf("real data not found: %v", err)
	}
	b, err := subnet.NewBuilder()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if _, err := b.AddFile(context.Background(), filepath.Join(root, p), subnet.FormatAuto); err != nil {
			t.Fatal(err)
		}
	}
	built, _, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	emb, err := Tree()
	if err != nil {
		t.Fatal(err)
	}
	if built.ID() != emb.ID() {
		t.Fatalf("embedded snapshot %s is stale: the data builds %s; run go generate ./subnet/embedded", emb.ID().Short(), built.ID().Short())
	}
}
