package node

import (
	"context"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/overlay"
)

// SplitFar does what the split loop does with a far server's calibration
// signal, and waits for it.
func (n *Node) SplitFar(ctx context.Context, s crawl.Slow) (overlay.Delegation, bool, error) {
	return n.splitFar(ctx, s)
}
