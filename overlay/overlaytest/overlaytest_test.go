package overlaytest

import (
	"context"
	"testing"
	"time"

	"github.com/micra-net/micra/overlay"
)

func TestMesh(t *testing.T) {
	nodes := Mesh(t, 4)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, n := range nodes {
		d, err := n.Overlay.Delegate(ctx, "http://"+n.Addr.String()+"/", n.Addr)
		if err != nil || d.Node != n.Host.ID() {
			t.Fatalf("own subnet of %s: %v, %v", n.Addr, d.Node, err)
		}
	}
	// In a mesh seconds old, two peers may briefly disagree on a shard's
	// coordinator (the overlay's doc: disjoint views are transient); the
	// decision reaches the other view with the next maintenance round.
	tree := Tree(t)
	var d overlay.Delegation
	var ok bool
	var err error
	for range 100 { // 10 s: a bound, not a timing assertion
		nodes[3].Overlay.Invalidate(tree.Range(tree.SmallestNonUnary(nodes[0].Addr)))
		if d, ok, err = nodes[3].Overlay.Resolve(ctx, nodes[0].Addr); err == nil && ok && d.Node == nodes[0].Host.ID() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("resolve: %v %v %v", d.Node, ok, err)
}
