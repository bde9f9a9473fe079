package indexer

import (
	"context"
	"testing"
	"time"

	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/overlay/overlaytest"
	"github.com/micra-net/micra/results"
	"github.com/micra-net/micra/subnet"
)

// reopen restarts n's overlay on tree, as a snapshot switch does: the old
// overlay is closed and a new one started on the same host and database.
func reopen(t testing.TB, n *tnode, tree, prev *subnet.Tree) {
	t.Helper()
	if err := n.o.Close(); err != nil {
		t.Fatal(err)
	}
	o, err := overlay.New(n.h, tree, n.db, append(overlaytest.Options(), overlay.WithDelegator(&overlaytest.RequesterDelegator{}),
		overlay.Previous(prev, time.Now()))...)
	if err != nil {
		t.Fatal(err)
	}
	n.o = o
	if len(n.h.Network().Peers()) == 0 {
		return // not joined yet
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := o.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestOutboxSwitch: nodes store batches under one snapshot while no
// indexer is online, then switch to the next (results.Outbox.Switch on
// their new overlay). An indexer that runs only the new snapshot takes
// every batch, the stored ones signed again under it, and the batches
// made after the switch; none is refused, lost or stored twice.
func TestOutboxSwitch(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		net := p2ptest.NewNet(t)
		nodes := []*tnode{newTNode(t, net, 0, nil, nil), newTNode(t, net, 1, nil, nil)}
		join(t, nodes[0], nodes[1:]...)
		oldTree, newTree := overlaytest.Tree(t), p2ptest.NextTree(t)
		var obs []*results.Outbox
		total := 0
		for i, n := range nodes {
			ob := startOutbox(t, n, n.db)
			total += produce(t, ob, 10*i, 3, 20)
			obs = append(obs, ob)
		}
		for i, n := range nodes {
			reopen(t, n, newTree, oldTree)
			if err := obs[i].Switch(n.o, newTree.ID()); err != nil {
				t.Fatal(err)
			}
		}
		if err := obs[0].Switch(nil, newTree.ID()); err == nil {
			t.Fatal("Switch to a nil overlay passed")
		}
		total += produce(t, obs[1], 50, 2, 20)

		ixn := newTNode(t, net, 3, nil, nil)
		reopen(t, ixn, newTree, oldTree)
		join(t, nodes[0], ixn)
		ix := startIndexer(t, ixn)
		waitDrained(t, obs)
		if s := ix.Index().Stats(); s.Docs != int64(total) || s.Duplicates != 0 || s.Rejected != 0 {
			t.Fatalf("index %+v, want %d records once", s, total)
		}
		if s := ix.Stats(); s.Refused != 0 || s.Rejected != 0 {
			t.Fatalf("indexer %+v: batches of the old snapshot arrived", s)
		}
		for _, ob := range obs {
			if err := ob.Close(); err != nil {
				t.Fatal(err)
			}
			if err := ob.Switch(nodes[0].o, newTree.ID()); err == nil {
				t.Fatal("Switch after Close passed")
			}
		}
	})
}
