package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-net/micra/internal/world"
	"github.com/micra-net/micra/internal/world/worldtest"
	"github.com/micra-net/micra/node"
	"github.com/micra-net/micra/results/resultstest"
)

// TestRestartWithBootstrapDown restarts a network of two nodes with its
// bootstrap node down: the second node, restarted while the first is
// away, resumes from its database instead of failing; the first,
// restarted without bootstrap peers and unable to reach the second at the
// address it remembers (the second came back on another port), resumes
// its network alone instead of starting a new one; and the second's
// background dials find the first again, so both are joined.
func TestRestartWithBootstrapDown(t *testing.T) {
	run := worldtest.Start(t, worldtest.Params(23, 12, 3), world.TimeScale(0.05))
	dirA, dirB := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	a := testNode(t, run, 0, dirA, nil)
	if err := a.Join(ctx); err != nil {
		t.Fatal(err)
	}
	boot := a.Addrs()
	b := testNode(t, run, 1, dirB, boot)
	if err := b.Join(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "own subnets claimed", func() error {
		for _, n := range []*node.Node{a, b} {
			if len(n.Overlay().Owned()) == 0 {
				return fmt.Errorf("%s holds no subnet", n.ID())
			}
		}
		return nil
	})
	idA := a.ID()
	port, err := ma.StringCast(boot[0]).ValueForProtocol(ma.P_TCP)
	if err != nil {
		t.Fatal(err)
	}
	// Both remember each other as they close.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	// b comes back with its only bootstrap peer down.
	var logB resultstest.LogBuf
	b = testNodeWith(t, run, 1, dirB, boot, nil, node.RejoinEvery(100*time.Millisecond), node.JoinWait(50*time.Millisecond), node.Logger(logB.Logger()))
	defer b.Close()
	if err := b.Join(ctx); err != nil {
		t.Fatalf("restart with the bootstrap peer down: %v", err)
	}
	for _, want := range []string{"resuming from the data directory", "no peer answers"} {
		if !strings.Contains(logB.String(), want) {
			t.Errorf("b's log lacks %q:\n%s", want, logB.String())
		}
	}
	if st := getStatus(t, b); st.Peers != 0 {
		t.Fatalf("b has %d peers with a down", st.Peers)
	}

	// a comes back on its address, without bootstrap peers; b's old
	// address (its port was chosen by the system) no longer answers.
	var logA resultstest.LogBuf
	a = testNodeWith(t, run, 0, dirA, nil, func(c *node.Config) {
		c.Listen = []string{"/ip4/" + run.World().Nodes()[0].Addr.String() + "/tcp/" + port}
	}, node.JoinWait(50*time.Millisecond), node.Logger(logA.Logger()))
	defer a.Close()
	if a.ID() != idA {
		t.Fatalf("a restarted as %s, was %s", a.ID(), idA)
	}
	if err := a.Join(ctx); err != nil {
		t.Fatalf("a without bootstrap peers: %v", err)
	}
	if strings.Contains(logA.String(), "starts a network") || !strings.Contains(logA.String(), "resuming from the data directory") {
		t.Errorf("a, restarted, does not say it resumes:\n%s", logA.String())
	}
	waitUntil(t, "b joined a again", func() error {
		for _, c := range getStatus(t, b).Conns {
			if c.Peer == idA.String() {
				return nil
			}
		}
		return fmt.Errorf("b not connected to a")
	})
	waitUntil(t, "b says it joined again", func() error {
		if !strings.Contains(logB.String(), "joined the overlay again") {
			return fmt.Errorf("not in b's log")
		}
		return nil
	})
}

// TestFreshNodeWithBootstrapDown: a node that was never part of a network
// still fails when no bootstrap peer answers, naming the peer.
func TestFreshNodeWithBootstrapDown(t *testing.T) {
	run := worldtest.Start(t, worldtest.Params(23, 12, 3), world.TimeScale(0.05))
	a := testNode(t, run, 0, t.TempDir(), nil)
	boot := a.Addrs()
	id := a.ID()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := testNodeWith(t, run, 1, t.TempDir(), boot, nil, node.JoinWait(50*time.Millisecond))
	defer b.Close()
	err := b.Join(t.Context())
	if err == nil || !strings.Contains(err.Error(), id.String()) {
		t.Fatalf("Join with the only bootstrap peer down = %v, want an error naming %s", err, id)
	}
}
