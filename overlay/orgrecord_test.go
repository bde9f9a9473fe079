package overlay

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// orgRecord is an ORG_INDEX record of org listing the prefixes, all
// delegated to node.
func orgRecord(tree *subnet.Tree, org string, epoch, seq uint64, node peer.ID, prefixes ...string) *pb.Record {
	sid := tree.ID()
	r := &pb.Record{Kind: pb.Record_ORG_INDEX, Snapshot: sid[:], Org: org, Epoch: epoch, Seq: seq}
	for _, p := range prefixes {
		r.OrgEntries = append(r.OrgEntries, &pb.OrgEntry{Subnet: rangeToPB(subnet.RangeOf(netip.MustParsePrefix(p))), Node: []byte(node)})
	}
	return r
}

func TestOrgRecordValidator(t *testing.T) {
	tree := mustTree(t)
	sk, _ := newKey(t)
	_, node := newKey(t)
	ov := NewRecordValidators(tree)[OrgNamespace]
	key := OrgKey(tree.ID(), "arin:org-1")
	sign := func(r *pb.Record) []byte {
		sr, err := signRecord(sk, r)
		if err != nil {
			t.Fatal(err)
		}
		return marshalSigned(t, sr)
	}
	good := sign(orgRecord(tree, "arin:org-1", 1, 3, node, "127.1.5.0/24", "127.1.9.0/24"))
	tampered := func() []byte {
		var sr pb.SignedRecord
		_ = proto.Unmarshal(good, &sr)
		var rec pb.Record
		_ = proto.Unmarshal(sr.Record, &rec)
		rec.OrgEntries[0].Node = []byte(mustID(t)) // redirect a subnet
		sr.Record, _ = proto.Marshal(&rec)
		return marshalSigned(t, &sr)
	}()
	unsigned := func() []byte {
		var sr pb.SignedRecord
		_ = proto.Unmarshal(good, &sr)
		sr.Signature = nil
		return marshalSigned(t, &sr)
	}()
	badNode := orgRecord(tree, "arin:org-1", 1, 1, node, "127.1.5.0/24")
	badNode.OrgEntries[0].Node = []byte("not a peer id")
	var many []string
	for i := range maxOrgEntries + 1 {
		many = append(many, fmt.Sprintf("127.1.%d.0/24", i%256))
	}
	tests := []struct {
		name  string
		key   string
		value []byte
		ok    bool
	}{
		{"index", key, good, true},
		{"empty index", key, sign(orgRecord(tree, "arin:org-1", 1, 1, node)), true},
		{"other organisation's key", OrgKey(tree.ID(), "arin:org-2"), good, false},
		{"tampered", key, tampered, false},
		{"unsigned", key, unsigned, false},
		{"garbage", key, []byte{0x0a, 0xff, 0x01}, false},
		{"entry of another organisation", key, sign(orgRecord(tree, "arin:org-1", 1, 1, node, "127.1.5.0/24", "127.2.5.0/24")), false},
		{"entry not in the tree", key, sign(orgRecord(tree, "arin:org-1", 1, 1, node, "10.0.0.0/8")), false},
		{"entries out of order", key, sign(orgRecord(tree, "arin:org-1", 1, 1, node, "127.1.9.0/24", "127.1.5.0/24")), false},
		{"entry repeated", key, sign(orgRecord(tree, "arin:org-1", 1, 1, node, "127.1.5.0/24", "127.1.5.0/24")), false},
		{"entry node malformed", key, sign(badNode), false},
		{"too many entries", key, sign(orgRecord(tree, "arin:org-1", 1, 1, node, many...)), false},
		{"delegation in the org namespace", key, sign(delegationRecord(tree, subnet.RangeOf(netip.MustParsePrefix("127.1.5.0/24")), node)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ov.Validate(tt.key, tt.value)
			if (err == nil) != tt.ok {
				t.Fatalf("Validate = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error %v does not wrap ErrBadRecord", err)
			}
		})
	}
	// A stale epoch loses whatever its sequence number; within an epoch the
	// higher sequence number wins.
	stale := sign(orgRecord(tree, "arin:org-1", 0, 99, node, "127.1.5.0/24"))
	later := sign(orgRecord(tree, "arin:org-1", 1, 4, node))
	if i, err := ov.Select(key, [][]byte{stale, good, tampered}); err != nil || i != 1 {
		t.Fatalf("Select(stale, good, tampered) = %d, %v; want 1", i, err)
	}
	if i, err := ov.Select(key, [][]byte{good, later}); err != nil || i != 1 {
		t.Fatalf("Select(seq 3, seq 4) = %d, %v; want 1", i, err)
	}
}

// TestSwarmOrgRecords checks the organisation index records: the
// organisation shard's coordinator publishes one in the DHT, any node reads
// it back, OrgDelegations falls back on it when the coordinator does not
// answer, an older epoch cannot replace it, the coordinator's successor
// replaces it under a higher epoch, and a record signed by a peer that
// cannot be the coordinator is refused.
func TestSwarmOrgRecords(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		nodes := r.swarm(8, PublishRecords(false, true), OrgRecords(200*time.Millisecond, time.Hour))
		ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
		defer cancel()
		tree := mustTree(t)
		const org = "arin:org-1"
		want := map[subnet.Range]peer.ID{}
		for _, n := range nodes {
			if _, err := n.o.Delegate(ctx, "http://"+n.addr.String()+"/", n.addr); err != nil {
				t.Fatal(err)
			}
			if id := tree.SmallestNonUnary(n.addr); tree.Org(id) == org {
				want[tree.Range(id)] = n.h.ID()
			}
		}
		if len(want) == 0 {
			t.Fatal("no node in the organisation")
		}
		match := func(ds []Delegation) error {
			got := map[subnet.Range]peer.ID{}
			for _, d := range ds {
				got[d.Subnet] = d.Node
			}
			if len(got) != len(want) {
				return fmt.Errorf("index lists %d subnets, want %d", len(got), len(want))
			}
			for r, p := range want {
				if got[r] != p {
					return fmt.Errorf("index gives %s to %s, want %s", r, got[r], p)
				}
			}
			return nil
		}

		// Written and read back, by a node that is not the coordinator.
		okey := orgShard(org).key(tree.ID())
		var coord *node
		eventually(t, 20*time.Second, func() error {
			id := nodes[0].o.coord.closestPeers(ctx, okey, true)[0]
			for _, n := range nodes {
				if n.h.ID() == id {
					coord = n
					return nil
				}
			}
			return fmt.Errorf("no coordinator for %s", org)
		})
		reader := nodes[0]
		if reader == coord {
			reader = nodes[1]
		}
		var fromDHT []Delegation
		eventually(t, 30*time.Second, func() error {
			ds, err := reader.o.orgFromDHT(ctx, org)
			if err != nil {
				return err
			}
			fromDHT = ds
			return match(ds)
		})
		if fromDHT[0].Writer != coord.h.ID() || fromDHT[0].Epoch == 0 {
			t.Fatalf("record written by %s at epoch %d, want %s", fromDHT[0].Writer, fromDHT[0].Epoch, coord.h.ID())
		}
		if coord.o.Stats().Puts == 0 {
			t.Fatal("the coordinator counted no puts")
		}

		// The coordinator stops answering coordinate requests: OrgDelegations
		// falls back on the record.
		coord.h.RemoveStreamHandler(CoordinateID)
		ds, err := reader.o.OrgDelegations(ctx, org)
		if err != nil {
			t.Fatalf("OrgDelegations without its coordinator: %v", err)
		}
		if err := match(ds); err != nil {
			t.Fatal(err)
		}

		// A stale epoch, even signed by the coordinator itself with a higher
		// sequence number, does not replace the record.
		csk := coord.h.Peerstore().PrivKey(coord.h.ID())
		putter := nodes[len(nodes)-1]
		if putter == coord || putter == reader {
			putter = nodes[len(nodes)-2]
		}
		put := func(sk crypto.PrivKey, r *pb.Record) error {
			sr, err := signRecord(sk, r)
			if err != nil {
				t.Fatal(err)
			}
			return putter.o.DHT().PutValue(ctx, OrgKey(tree.ID(), org), marshalSigned(t, sr))
		}
		_ = put(csk, orgRecord(tree, org, fromDHT[0].Epoch-1, fromDHT[0].Seq+100, coord.h.ID(), "127.1.77.0/24"))
		if ds, err := reader.o.orgFromDHT(ctx, org); err != nil || match(ds) != nil || ds[0].Epoch != fromDHT[0].Epoch {
			t.Fatalf("after a stale put: %v, %v", ds, err)
		}

		// The coordinator leaves: its successor claims the shard under a higher
		// epoch and publishes the index again, which replaces the old record.
		// When the coordinator's own subnet is in the organisation, it is
		// orphaned a liveness timeout after the takeover and handed to another
		// node: the successor's record may list it with the coordinator, with
		// its new node, or not at all.
		coord.stop()
		matchAfter := func(ds []Delegation) error {
			got := map[subnet.Range]peer.ID{}
			for _, d := range ds {
				got[d.Subnet] = d.Node
			}
			for r := range got {
				if _, ok := want[r]; !ok {
					return fmt.Errorf("index lists %s, which no node asked for", r)
				}
			}
			for r, p := range want {
				if p != coord.h.ID() && got[r] != p {
					return fmt.Errorf("index gives %s to %s, want %s", r, got[r], p)
				}
			}
			return nil
		}
		eventually(t, 30*time.Second, func() error {
			ds, err := reader.o.orgFromDHT(ctx, org)
			if err != nil {
				return err
			}
			if len(ds) == 0 || ds[0].Epoch <= fromDHT[0].Epoch || ds[0].Writer == coord.h.ID() {
				return fmt.Errorf("record still from epoch %d; %s", fromDHT[0].Epoch, shardOwners(nodes, coord, okey))
			}
			if err := matchAfter(ds); err != nil {
				return fmt.Errorf("record of epoch %d from %s: %w", ds[0].Epoch, ds[0].Writer, err)
			}
			fromDHT = ds
			return nil
		})

		// A record signed by a key farther from the shard than every node,
		// which anyone can make, is refused by the DHT's validators even with a
		// higher epoch, and the reader keeps the coordinator's.
		// Each try succeeds with probability 1/9. 1000 tries failed in about
		// one run in a hundred, when the farthest node sat near the far end of
		// the key space; 100000 leave one run in ten thousand.
		var outsider crypto.PrivKey
		for range 100000 {
			sk, id := newKey(t)
			far := true
			for _, n := range nodes {
				if !kb.Closer(n.h.ID(), id, string(okey[:])) {
					far = false
					break
				}
			}
			if far {
				outsider = sk
				break
			}
		}
		if outsider == nil {
			t.Fatal("no key farther from the shard than every node in 100000 tries")
		}
		if err := put(outsider, orgRecord(tree, org, fromDHT[0].Epoch+5, 1, mustID(t), "127.1.77.0/24")); !errors.Is(err, ErrBadRecord) {
			t.Fatalf("forged record put: %v, want ErrBadRecord", err)
		}
		ds, err = reader.o.orgFromDHT(ctx, org)
		if err != nil || matchAfter(ds) != nil || ds[0].Epoch != fromDHT[0].Epoch {
			t.Fatalf("after a forged put: %v, %v", ds, err)
		}
	})
}

// shardOwners describes which live nodes claim the shard at key, and at
// which epoch, for a failure message.
func shardOwners(nodes []*node, gone *node, key [32]byte) string {
	var b []string
	for _, n := range nodes {
		if n == gone {
			continue
		}
		n.o.coord.mu.Lock()
		sh := n.o.coord.shards[key]
		n.o.coord.mu.Unlock()
		if sh == nil {
			continue
		}
		sh.mu.Lock()
		owner, _ := peer.IDFromBytes(sh.meta.GetOwner())
		b = append(b, fmt.Sprintf("%s owned=%v epoch=%d owner=%s promised=%d dirty=%v published=%v",
			n.h.ID().ShortString(), sh.owned, sh.meta.GetEpoch(), owner.ShortString(), sh.meta.GetPromised(), sh.orgDirty, !sh.orgPublished.IsZero()))
		sh.mu.Unlock()
	}
	return "holders: " + strings.Join(b, "; ")
}
