// Package p2ptest is the lowest layer of micra's multi-node test rigs: a
// subnet hierarchy inside 127/8, node addresses spread over it, small
// in-memory databases, a simulated network on which libp2p hosts run in
// virtual time, and WaitFor. It imports nothing of micra's but subnet, so
// that the overlay's own tests and the importable rig built on the overlay
// (overlay/overlaytest) share it.
//
// Protocol tests run on Net inside a testing/synctest bubble: packets are
// carried by simnet on the bubble's clock, never by the kernel, so that
// timeouts, heartbeats and liveness measure the protocol's round trips,
// not the load of the machine the test runs on.
package p2ptest

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/micra-net/micra/internal/poll"
	"github.com/micra-net/micra/subnet"
)

var tree = sync.OnceValues(func() (*subnet.Tree, error) { return buildTree(false) })

var nextTree = sync.OnceValues(func() (*subnet.Tree, error) { return buildTree(true) })

// buildTree builds Tree's hierarchy, or with next NextTree's.
func buildTree(next bool) (*subnet.Tree, error) {
	var iana, rir strings.Builder
	iana.WriteString("2|iana|20240101|1|19700101|20240101|+0000\n")
	iana.WriteString("iana||ipv4|127.0.0.0|16777216|19810901|arin\n")
	rir.WriteString("2.3|arin|20240101|1028|19700101|20240101|+0000\n")
	for a := range 4 {
		fmt.Fprintf(&rir, "arin|US|ipv4|127.%d.0.0|65536|20200101|allocated|org-%d\n", a, a)
		for b := range 256 {
			switch {
			case !next:
			case a == 0 && b == 8:
				fmt.Fprintf(&rir, "arin|US|ipv4|127.0.8.0|512|20200101|assigned|org-0\n")
				continue
			case a == 0 && b == 9, a == 2 && b == 20:
				continue
			case a == 1 && b == 10:
				fmt.Fprintf(&rir, "arin|US|ipv4|127.1.10.0|128|20200101|assigned|org-1\n")
				fmt.Fprintf(&rir, "arin|US|ipv4|127.1.10.128|128|20200101|assigned|org-1\n")
				continue
			}
			fmt.Fprintf(&rir, "arin|US|ipv4|127.%d.%d.0|256|20200101|assigned|org-%d\n", a, b, a)
		}
	}
	bld, err := subnet.NewBuilder(subnet.Strict())
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	if _, err := bld.Add(ctx, "iana", strings.NewReader(iana.String()), subnet.FormatDelegated); err != nil {
		return nil, err
	}
	if _, err := bld.Add(ctx, "arin", strings.NewReader(rir.String()), subnet.FormatDelegated); err != nil {
		return nil, err
	}
	t, _, err := bld.Build()
	return t, err
}

// Tree returns a hierarchy inside 127/8: IANA's /8, four /16 allocations
// 127.0-3.0.0/16 (organisations "arin:org-0" to "arin:org-3", one shard
// each) and all 256 /24 assignments in each, of the /16's organisation. It
// is built once and shared.
func Tree(t testing.TB) *subnet.Tree {
	t.Helper()
	tr, err := tree()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// NextTree returns Tree's hierarchy after a registry update, for snapshot
// switches: 127.0.8.0/24 and 127.0.9.0/24 merged into 127.0.8.0/23,
// 127.1.10.0/24 split into two /25, 127.2.20.0/24 removed (its addresses
// fall to 127.2.0.0/16), every other range unchanged.
func NextTree(t testing.TB) *subnet.Tree {
	t.Helper()
	tr, err := nextTree()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// Addr returns the address of test node i: 127.(i%4).(i/4+1).1, which
// spreads nodes over Tree's four shards.
func Addr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(i % 4), byte(i/4 + 1), 1})
}

// DB opens an in-memory badger database with small tables (a few hundred
// fit in one test process), closed at cleanup.
func DB(t testing.TB) *badger.DB {
	t.Helper()
	opts := badger.DefaultOptions("").WithInMemory(true).WithLogger(nil).
		WithMemTableSize(1 << 20).WithNumMemtables(2).WithBlockCacheSize(256 << 10).WithIndexCacheSize(256 << 10).
		// In memory there is no value log: every value must stay in the
		// LSM tree, under the threshold (badger panics writing a larger
		// one), which must be below the batch size (15 % of a memtable).
		WithNumCompactors(2).WithValueThreshold(128 << 10).WithBaseTableSize(1 << 20)
	db, err := badger.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// SimDB opens an in-memory badger database for simulations of hundreds to
// thousands of nodes in one process, closed at cleanup: DB's, without
// compaction and caches. Each of badger's compactors wakes every 50 ms
// (6 % of a 200-node simulation's CPU, 40 wake-ups per node and virtual
// second) and each cache runs its own goroutines; a simulated node writes
// a few memtables at most, so level 0 is allowed to grow instead of
// stalling writes.
func SimDB(t testing.TB) *badger.DB {
	t.Helper()
	opts := badger.DefaultOptions("").WithInMemory(true).WithLogger(nil).
		WithMemTableSize(1 << 20).WithNumMemtables(2).WithBlockCacheSize(0).WithIndexCacheSize(0).WithCompression(options.None).
		WithNumCompactors(0).WithNumLevelZeroTables(1 << 20).WithNumLevelZeroTablesStall(1<<20 + 1).
		WithValueThreshold(128 << 10).WithBaseTableSize(1 << 20) // see DB
	db, err := badger.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// WaitFor is poll.Until: it calls f every 50 ms until it returns nil, and
// fails the test with f's last error when d has passed. Inside a synctest
// bubble d is virtual time: a bound on the protocol, not on the machine.
func WaitFor(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	poll.Until(t, d, "condition", f)
}
