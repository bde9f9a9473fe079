package node

import (
	"context"
	"time"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/overlay"
)

// SplitFar does what the split loop does with a far server's calibration
// signal, and waits for it.
func (n *Node) SplitFar(ctx context.Context, s crawl.Slow) (overlay.Delegation, bool, error) {
	return n.splitFar(ctx, s)
}

// JoinWait sets the first wait after a failed dial of a bootstrap or
// known peer as the node joins (the last is 4 times as long), instead of
// bootstrap's 0.5 s doubling to 8 s.
func JoinWait(d time.Duration) Option { return func(o *options) { o.joinWait = d } }

// RejoinEvery sets the first wait between rounds of rejoin dials (the
// last is 30 times as long), instead of 10 s.
func RejoinEvery(d time.Duration) Option { return func(o *options) { o.rejoin = d } }
