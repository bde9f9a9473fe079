package overlaytest

import (
	"context"
	"testing"
	"time"
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
	d, ok, err := nodes[3].Overlay.Resolve(ctx, nodes[0].Addr)
	if err != nil || !ok || d.Node != nodes[0].Host.ID() {
		t.Fatalf("resolve: %v %v %v", d.Node, ok, err)
	}
}
