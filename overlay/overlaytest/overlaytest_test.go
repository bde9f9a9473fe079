package overlaytest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/p2ptest"
)

// TestMesh runs a mesh on each kind of network: simulated in virtual time
// and real loopback hosts.
func TestMesh(t *testing.T) {
	t.Run("simulated", func(t *testing.T) {
		p2ptest.Bubble(t, func(t *testing.T) { checkMesh(t, p2ptest.NewNet(t)) })
	})
	t.Run("loopback", func(t *testing.T) { checkMesh(t, nil) })
}

func checkMesh(t *testing.T, net *p2ptest.Net) {
	nodes := Mesh(t, net, 4)
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
	p2ptest.WaitFor(t, 10*time.Second, func() error {
		nodes[3].Overlay.Invalidate(tree.Range(tree.SmallestNonUnary(nodes[0].Addr)))
		d, ok, err := nodes[3].Overlay.Resolve(ctx, nodes[0].Addr)
		if err != nil || !ok || d.Node != nodes[0].Host.ID() {
			return fmt.Errorf("resolve: %v %v %v", d.Node, ok, err)
		}
		return nil
	})
}
