package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/host"

	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// Switching snapshots. The overlay spreads signed releases and fetches
// their snapshot files (overlay/release.go); at a release's activation
// time the peer closes its overlay and starts one on the new snapshot on
// the same host and database, with the old snapshot as overlay.Previous,
// so that its delegations are carried (overlay/carry.go). What hangs on
// the overlay moves with it: the node's outbox (results.Outbox.Switch)
// and router, an indexer's indexer (rebuilt, taking both snapshots'
// batches). Until a peer has switched, its requests under the old
// snapshot are refused by switched peers (ErrWrongSnapshot) and retried;
// the carry window keeps any subnet from being decided twice meanwhile.
//
// The peer stores which snapshot it runs (runningKey), so that a restart
// runs the released snapshot again instead of the configured one, whose
// overlay would take the delegations of the new snapshot for stale ones.

// gone reports whether a is in a range this node held under the previous
// snapshot, the carry window being over.
func (l *live) gone(a netip.Addr) bool {
	if len(l.held) == 0 || time.Now().Before(l.settled) {
		return false
	}
	i, _ := slices.BinarySearchFunc(l.held, a, func(r subnet.Range, a netip.Addr) int { return r.Start.Compare(a) })
	// held[i-1] is the last range starting at or before a (i when equal).
	for _, j := range []int{i, i - 1} {
		if j >= 0 && j < len(l.held) && l.held[j].Contains(a) {
			return true
		}
	}
	return false
}

// switchPoll bounds the wait between two looks at the next release: the
// release can become ready (its file fetched) at any time.
const switchPoll = 2 * time.Second

// switchRetry is the wait after a failed switch.
const switchRetry = 10 * time.Second

// dueRelease returns the next release when its file is stored and its
// activation time has come, and otherwise how long to wait before looking
// again.
func dueRelease(o *overlay.Overlay) (subnet.Release, time.Duration, bool) {
	st, ok := o.NextRelease()
	if !ok || !st.Ready {
		return subnet.Release{}, switchPoll, false
	}
	if wait := time.Until(st.Release.Activation); wait > 0 {
		return subnet.Release{}, min(wait, switchPoll), false
	}
	return st.Release, 0, true
}

// switchLoop switches the peer whenever a release is due, until ctx
// ends. cur returns the running overlay; switchTo switches to r.
func switchLoop(ctx context.Context, log *slog.Logger, cur func() *overlay.Overlay, switchTo func(context.Context, subnet.Release) error) {
	t := time.NewTimer(switchPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r, wait, due := dueRelease(cur())
		if due {
			if err := switchTo(ctx, r); err != nil {
				if ctx.Err() != nil {
					return
				}
				log.Error("switching snapshots failed; trying again", "snapshot", r.Snapshot.Short(), "error", err, "retry", switchRetry)
				wait = switchRetry
			}
		}
		t.Reset(max(wait, 10*time.Millisecond))
	}
}

// reopen closes old, the overlay on tree prev, and starts one on the
// snapshot of release r (stored by old) with Previous, on the same host
// and database, and bootstraps it. When the new overlay cannot start, the
// old snapshot's is started again and the error returned.
func reopen(ctx context.Context, log *slog.Logger, h host.Host, db *badger.DB, prev *subnet.Tree, old *overlay.Overlay, r subnet.Release, opts []overlay.Option) (*subnet.Tree, *overlay.Overlay, error) {
	tree, err := old.ReleasedTree()
	if err != nil {
		return nil, nil, err
	}
	if tree.ID() != r.Snapshot {
		return nil, nil, fmt.Errorf("%w: the stored file holds %s, the release names %s", subnet.ErrReleaseFile, tree.ID().Short(), r.Snapshot.Short())
	}
	if err := old.Close(); err != nil {
		return nil, nil, fmt.Errorf("closing the overlay of snapshot %s: %w", prev.ID().Short(), err)
	}
	o, err := overlay.New(h, tree, db, append(slices.Clip(opts), overlay.Previous(prev, r.Activation))...)
	if err != nil {
		back, berr := overlay.New(h, prev, db, opts...)
		if berr != nil {
			return nil, nil, errors.Join(err, fmt.Errorf("and the overlay of snapshot %s did not start again: %w", prev.ID().Short(), berr))
		}
		return prev, back, fmt.Errorf("overlay of snapshot %s: %w", r.Snapshot.Short(), err)
	}
	bctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := o.Bootstrap(bctx); err != nil && ctx.Err() == nil {
		// Its routing table fills from the connected peers in the
		// background; the peer switched all the same.
		log.Debug("DHT bootstrap after the switch", "error", err)
	}
	return tree, o, nil
}

// running is what a peer stores about the snapshot it runs after a switch.
type running struct {
	base       subnet.SnapshotID // the configured snapshot the chain of switches started from
	snapshot   subnet.SnapshotID // the snapshot it runs
	prev       subnet.SnapshotID // the one before
	activation time.Time         // of the release it switched by
}

// runningKey is the badger key of the running snapshot (under the node's
// own namespace, beside no other package's).
var runningKey = []byte("/node/running")

func (r running) encode() []byte {
	b := make([]byte, 0, 3*32+8)
	b = append(append(append(b, r.base[:]...), r.snapshot[:]...), r.prev[:]...)
	return binary.BigEndian.AppendUint64(b, uint64(r.activation.UnixMilli()))
}

func saveRunning(db *badger.DB, r running) error {
	return db.Update(func(txn *badger.Txn) error { return txn.Set(runningKey, r.encode()) })
}

// loadValue returns a copy of the value stored at key, and false when
// there is none.
func loadValue(db *badger.DB, key []byte) ([]byte, bool, error) {
	var v []byte
	err := db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(key)
		if err != nil {
			return err
		}
		v, err = it.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	return v, err == nil, err
}

// loadRunning returns the stored running snapshot; a value that does not
// decode is reported and ignored (the configured snapshot runs).
func loadRunning(db *badger.DB) (running, bool, error) {
	v, ok, err := loadValue(db, runningKey)
	if err != nil || !ok {
		return running{}, false, err
	}
	if len(v) != 3*32+8 {
		return running{}, false, fmt.Errorf("stored running snapshot of %d bytes, want %d", len(v), 3*32+8)
	}
	var r running
	copy(r.base[:], v[:32])
	copy(r.snapshot[:], v[32:64])
	copy(r.prev[:], v[64:96])
	r.activation = time.UnixMilli(int64(binary.BigEndian.Uint64(v[96:])))
	return r, true, nil
}

// resumeSnapshot returns the snapshot a peer configured with tree runs
// after a restart: the released one it switched to, when it switched away
// from tree and keeps the file in its release directory, with the one
// before it and the activation (for overlay.Previous; nil when that file
// is gone); otherwise tree.
func resumeSnapshot(db *badger.DB, dataDir string, tree *subnet.Tree, log *slog.Logger) (cur, prev *subnet.Tree, activation time.Time) {
	r, ok, err := loadRunning(db)
	if err != nil {
		log.Warn("running snapshot not read; the configured one runs", "error", err)
	}
	if !ok || r.base != tree.ID() || r.snapshot == tree.ID() {
		return tree, nil, time.Time{}
	}
	dir := releaseDir(dataDir)
	t, err := overlay.ReleasedSnapshot(dir, r.snapshot)
	if err != nil {
		log.Warn("the released snapshot this peer ran is not kept; the configured one runs", "snapshot", r.snapshot.Short(), "error", err)
		return tree, nil, time.Time{}
	}
	if prev = tree; r.prev != tree.ID() {
		if prev, err = overlay.ReleasedSnapshot(dir, r.prev); err != nil {
			prev = nil
		}
	}
	log.Info("running the released snapshot this peer switched to", "snapshot", t.ID().Short(), "configured", tree.ID().Short())
	return t, prev, r.activation
}

// releaseDir is where a peer keeps released snapshot files.
func releaseDir(dataDir string) string { return filepath.Join(dataDir, "snapshots") }

// switchTo moves the node to release r's snapshot: a new overlay on it,
// and the router and outbox on that overlay. The crawler goes on; links of
// ranges the node no longer holds are handed on (router.Disowned).
func (n *Node) switchTo(ctx context.Context, r subnet.Release) error {
	old := n.cur.Load()
	began := time.Now()
	var held []subnet.Range
	for _, d := range old.o.Owned() {
		if !d.Orphaned && d.Node == n.h.ID() {
			held = append(held, d.Subnet)
		}
	}
	slices.SortFunc(held, func(a, b subnet.Range) int { return a.Start.Compare(b.Start) })
	tree, o, err := n.reopen(ctx, old, r)
	if o == nil {
		return err
	}
	l := &live{tree: tree, o: o}
	if err == nil {
		l.held, l.settled = held, o.CarriedBy()
	}
	n.cur.Store(l)
	if serr := n.ob.Switch(o, tree.ID()); serr != nil {
		err = errors.Join(err, fmt.Errorf("results outbox: %w", serr))
	}
	if err != nil {
		return err
	}
	n.switched(old.tree, tree, r, began, "held", len(held))
	return nil
}

// recordSwitch stores that the peer configured with snapshot base
// switched from old to tree by release r.
func recordSwitch(db *badger.DB, log *slog.Logger, base subnet.SnapshotID, old, tree *subnet.Tree, r subnet.Release) {
	if rs, ok, _ := loadRunning(db); ok && rs.snapshot == old.ID() {
		base = rs.base // a chain of switches from the configured snapshot
	}
	if err := saveRunning(db, running{base: base, snapshot: tree.ID(), prev: old.ID(), activation: r.Activation}); err != nil {
		log.Warn("running snapshot not stored; a restart runs the configured one", "error", err)
	}
}
