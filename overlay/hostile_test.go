package overlay

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/overlay/pb"
)

// TestPeerLimiter: a peer's bucket holds the burst, refills at the rate,
// and peers do not share buckets; the map stays bounded.
func TestPeerLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newPeerLimiter(2, 5)
	l.now = func() time.Time { return now }
	n := 0
	for range 100 {
		if l.allow("a", 1) {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("burst: %d allowed, want 5", n)
	}
	if !l.allow("b", 5) || l.allow("b", 1) {
		t.Fatal("another peer's bucket is not its own")
	}
	now = now.Add(1500 * time.Millisecond) // 3 tokens
	n = 0
	for range 10 {
		if l.allow("a", 1) {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("after 1.5 s at 2/s: %d allowed, want 3", n)
	}
	if l.allow("c", 6) {
		t.Fatal("a cost above the burst was allowed")
	}
	for i := range 3 * maxLimitedPeers {
		l.allow(peer.ID(fmt.Sprint(i)), 1)
	}
	if len(l.m) > maxLimitedPeers {
		t.Fatalf("%d buckets kept, bound %d", len(l.m), maxLimitedPeers)
	}
	if err := RequestLimits(0, 1)(&config{}); err == nil {
		t.Fatal("a zero rate was accepted")
	}
}

// hostileExchange writes raw bytes on a fresh stream from h and reads one
// answer frame.
func hostileExchange(ctx context.Context, h host.Host, to peer.ID, id protocol.ID, frame []byte) (*pb.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	s, err := h.NewStream(network.WithAllowLimitedConn(ctx, "test"), to, id)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := s.Write(frame); err != nil {
		return nil, err
	}
	_ = s.CloseWrite()
	var m pb.Message
	if err := pbio.NewDelimitedReader(s, 4<<20).ReadMsg(&m); err != nil {
		return nil, err
	}
	return &m, nil
}

// TestHostilePeer (RELIABILITY.md scenario 6): a peer that runs no overlay of
// its own sends, to the nodes of a small honest swarm, oversize,
// malformed, unknown-type and other-version frames on every protocol;
// floods probe requests; forges and replays delegation
// records (ASSIGN, REPLICATE, an own-subnet claim from outside the subnet,
// re-delegation and reassignment of subnets it does not hold). Each is
// refused with an error frame or cut by the per-peer limits, and
// afterwards every honest node resolves every delegation as decided, holds
// exactly its own, and probes between honest nodes work.
func TestHostilePeer(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		const probeBurst = 8
		nodes := r.swarm(4, RequestLimits(0.01, probeBurst))
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		tree := mustTree(t)
		sid := tree.ID()

		// Honest delegations: node i asks for subnet i and is given it.
		addrs := make([]netip.Addr, len(nodes))
		for i, nd := range nodes {
			addrs[i] = netip.AddrFrom4([4]byte{127, 2, byte(20 + i), 9})
			d, err := nd.o.Delegate(ctx, "http://"+addrs[i].String()+"/", addrs[i])
			if err != nil || d.Node != nd.h.ID() {
				t.Fatalf("honest delegation %d: %v, %v", i, d.Node, err)
			}
		}
		subnetOf := func(i int) *pb.Range { return rangeToPB(tree.Range(tree.SmallestNonUnary(addrs[i]))) }
		shardOf := func(i int) *pb.ShardRef {
			return nodes[0].o.coord.rangeShard(tree.SmallestNonUnary(addrs[i])).toPB()
		}

		// The hostile peer: a bare libp2p host on its own address.
		sk, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		evil := r.net.Host(t, sk, nodeAddr(9))
		for _, nd := range nodes {
			if err := evil.Connect(ctx, peer.AddrInfo{ID: nd.h.ID(), Addrs: nd.h.Addrs()}); err != nil {
				t.Fatal(err)
			}
		}
		msg := func(typ pb.Message_Type, set func(m *pb.Message)) *pb.Message {
			m := newMsg(typ)
			set(m)
			return m
		}
		frames, refused := 0, 0
		expectError := func(name string, to *node, id protocol.ID, frame []byte, want error) {
			t.Helper()
			frames++
			m, err := hostileExchange(ctx, evil, to.h.ID(), id, frame)
			if err != nil {
				t.Errorf("%s on %s: no answer frame: %v", name, id, err)
				return
			}
			if m.GetType() != pb.Message_ERROR {
				t.Errorf("%s on %s: answered %v, want an error frame", name, id, m.GetType())
				return
			}
			refused++
			if got := codeToError(m.GetError()); want != nil && !errors.Is(got, want) {
				t.Errorf("%s on %s: %v, want %v", name, id, got, want)
			}
		}

		// 1. Bad frames on every protocol.
		valid := map[protocol.ID]*pb.Message{
			ProbeID:      msg(pb.Message_PROBE, func(m *pb.Message) { m.Probe = &pb.Probe{Url: "http://127.2.20.9/"} }),
			CoordinateID: msg(pb.Message_RESOLVE, func(m *pb.Message) { m.Resolve = &pb.Resolve{Snapshot: sid[:], Addr: addrs[0].AsSlice()} }),
			ReplicateID:  msg(pb.Message_REPLICATE, func(m *pb.Message) { m.Replicate = &pb.Replicate{Snapshot: sid[:]} }),
			AuditID:      msg(pb.Message_REFETCH, func(m *pb.Message) { m.Refetch = &pb.Refetch{Url: "http://127.2.20.9/"} }),
		}
		limits := map[protocol.ID]int{ProbeID: maxProbeMsg, CoordinateID: maxCoordMsg,
			ReplicateID: maxReplicateMsg, AuditID: maxAuditMsg}
		for id, m := range valid {
			v2 := proto.Clone(m).(*pb.Message)
			v2.Version = 2
			bare := &pb.Message{Version: wireVersion, Type: m.GetType()}
			oversize := binary.AppendUvarint(nil, uint64(limits[id]+1))
			oversize = append(oversize, bytes.Repeat([]byte{0x08}, 64)...)
			target := nodes[1+len(id)%3]
			expectError("oversize frame", target, id, oversize, ErrTooLarge)
			expectError("garbage", target, id, []byte{6, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ErrMalformed)
			expectError("version 2", target, id, delimited(v2), ErrUnsupportedVersion)
			expectError("unknown type", target, id, delimited(&pb.Message{Version: wireVersion, Type: 99}), ErrUnexpectedType)
			expectError("no payload", target, id, delimited(bare), ErrMalformed)
			expectError("answer type as request", target, id, delimited(newMsg(pb.Message_OK)), ErrUnexpectedType)
		}

		// 2. A flood of probes beyond the per-peer budget.
		probesOK, probesLimited := 0, 0
		for range 5 * probeBurst {
			m, err := hostileExchange(ctx, evil, nodes[1].h.ID(), ProbeID, delimited(valid[ProbeID]))
			switch {
			case err != nil:
				t.Fatalf("probe flood: %v", err)
			case m.GetType() == pb.Message_PROBE_RESULT:
				probesOK++
			case errors.Is(codeToError(m.GetError()), ErrOverloaded):
				probesLimited++
			default:
				t.Fatalf("probe flood: %v %v", m.GetType(), m.GetError())
			}
		}
		if probesOK > probeBurst+1 || probesLimited == 0 {
			t.Errorf("probe flood: %d probes run, %d refused; budget %d", probesOK, probesLimited, probeBurst)
		}

		// 3. Forged and replayed delegation records, claims of subnets the
		// peer was not delegated.
		forged, err := signRecord(sk, &pb.Record{
			Kind: pb.Record_DELEGATION, Snapshot: sid[:], Subnet: subnetOf(2), Node: []byte(nodes[1].h.ID()),
			Epoch: 1 << 40, Seq: 1, DecidedMs: time.Now().Add(10 * 365 * 24 * time.Hour).UnixMilli(),
		})
		if err != nil {
			t.Fatal(err)
		}
		toSelf, err := signRecord(sk, &pb.Record{
			Kind: pb.Record_DELEGATION, Snapshot: sid[:], Subnet: subnetOf(2), Node: []byte(evil.ID()),
			Epoch: 1 << 40, Seq: 1, DecidedMs: time.Now().UnixMilli(),
		})
		if err != nil {
			t.Fatal(err)
		}
		// A genuine record, read back with RESOLVE, for replays.
		var genuine *pb.SignedRecord
		for _, nd := range nodes {
			m, err := hostileExchange(ctx, evil, nd.h.ID(), CoordinateID, delimited(valid[CoordinateID]))
			if err == nil && m.GetType() == pb.Message_DELEGATION {
				genuine = m.GetDelegation().GetRecord()
				break
			}
		}
		if genuine == nil {
			t.Fatal("no coordinator answered RESOLVE for subnet 0")
		}
		entry := func(sr *pb.SignedRecord) *pb.Entry {
			v, _ := proto.Marshal(sr)
			return &pb.Entry{Kind: pb.Entry_DELEGATION, Key: rangeKey(tree.Range(tree.SmallestNonUnary(addrs[2]))), Value: v, Epoch: 1 << 40, Seq: 1}
		}
		for _, nd := range nodes {
			expectError("forged ASSIGN", nd, CoordinateID, delimited(msg(pb.Message_ASSIGN, func(m *pb.Message) {
				m.Assign = &pb.Assign{Record: forged}
			})), nil)
			expectError("replayed ASSIGN", nd, CoordinateID, delimited(msg(pb.Message_ASSIGN, func(m *pb.Message) {
				m.Assign = &pb.Assign{Record: genuine}
			})), nil)
			expectError("forged REPLICATE", nd, ReplicateID, delimited(msg(pb.Message_REPLICATE, func(m *pb.Message) {
				m.Replicate = &pb.Replicate{Snapshot: sid[:], Shard: shardOf(2), Epoch: 1 << 40, Owner: []byte(evil.ID()), Entries: []*pb.Entry{entry(toSelf)}}
			})), nil)
			expectError("replayed REPLICATE", nd, ReplicateID, delimited(msg(pb.Message_REPLICATE, func(m *pb.Message) {
				m.Replicate = &pb.Replicate{Snapshot: sid[:], Shard: shardOf(0), Epoch: 1 << 40, Owner: []byte(evil.ID()), Entries: []*pb.Entry{entry(genuine)}}
			})), nil)
			expectError("own claim from outside", nd, CoordinateID, delimited(msg(pb.Message_DELEGATE, func(m *pb.Message) {
				m.Delegate = &pb.Delegate{Snapshot: sid[:], Addr: addrs[3].AsSlice(), Own: true}
			})), nil)
			expectError("REDELEGATE of another's subnet", nd, CoordinateID, delimited(msg(pb.Message_REDELEGATE, func(m *pb.Message) {
				m.Redelegate = &pb.Redelegate{Snapshot: sid[:], Subnet: subnetOf(1), Reason: "mine now"}
			})), nil)
			expectError("REASSIGN of another's subnet", nd, CoordinateID, delimited(msg(pb.Message_REASSIGN, func(m *pb.Message) {
				m.Reassign = &pb.Reassign{Snapshot: sid[:], Subnet: subnetOf(1), Node: []byte(nodes[1].h.ID()), To: []byte(evil.ID())}
			})), nil)
			// A heartbeat claims nothing: whatever the answer, it must not
			// make the peer an owner (checked below).
			_, _ = hostileExchange(ctx, evil, nd.h.ID(), CoordinateID, delimited(msg(pb.Message_HEARTBEAT, func(m *pb.Message) {
				m.Heartbeat = &pb.Heartbeat{Snapshot: sid[:], Shard: shardOf(2), Capacity: 1 << 40, Subnets: 1000}
			})))
			frames++
		}

		// 4. The honest swarm is unaffected.
		for i, nd := range nodes {
			owned := nd.o.Owned()
			if len(owned) != 1 || owned[0].Subnet != tree.Range(tree.SmallestNonUnary(addrs[i])) {
				t.Errorf("node %d holds %v, want only subnet %d", i, owned, i)
			}
			for j := range nodes {
				nd.o.Invalidate(tree.Range(tree.SmallestNonUnary(addrs[j])))
				d, ok, err := nd.o.Resolve(ctx, addrs[j])
				if err != nil || !ok || d.Node != nodes[j].h.ID() {
					t.Errorf("node %d resolves subnet %d to %v (%v, %v), want node %d", i, j, d.Node, ok, err, j)
				}
			}
		}
		if _, err := nodes[0].o.Probe(ctx, nodes[1].h.ID(), "http://127.2.21.9/"); err != nil {
			t.Errorf("honest probe after the flood: %v", err)
		}
		t.Logf("hostile peer: %d frames sent, %d refused with an error frame; probe flood %d run / %d refused",
			frames+5*probeBurst, refused, probesOK, probesLimited)
	})
}
