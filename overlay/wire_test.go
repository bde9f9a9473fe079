package overlay

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-msgio/pbio"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/egress"
	"github.com/micra-net/micra/overlay/pb"
	"github.com/micra-net/micra/subnet"
)

// pair starts two connected nodes.
func pair(t *testing.T, r *rig) (a, b *node) {
	a = r.node(0)
	b = r.node(1)
	if err := a.h.Connect(t.Context(), peer.AddrInfo{ID: b.h.ID(), Addrs: b.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func TestProtocols(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		a, b := pair(t, r)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()

		rtt, err := a.o.Probe(ctx, b.h.ID(), "http://127.0.0.9/")
		if err != nil || rtt != 10*time.Millisecond {
			t.Fatalf("Probe = %v, %v", rtt, err)
		}
		if _, err := a.o.Probe(ctx, b.h.ID(), "http://fail.example/"); !errors.Is(err, ErrProbeFailed) {
			t.Fatalf("failing probe = %v, want ErrProbeFailed", err)
		}
		if _, err := a.o.Probe(ctx, b.h.ID(), strings.Repeat("x", maxURLLen+1)); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("oversize URL = %v, want ErrTooLarge", err)
		}
	})
}

// rawExchange writes frame bytes (already delimited) on a fresh stream and
// reads the answer.
func rawExchange(t *testing.T, from *node, to peer.ID, id protocol.ID, frame []byte) (*pb.Message, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := from.h.NewStream(ctx, to, id)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(10 * time.Second))
	// A refused frame may fail to write: the server stops reading once it
	// has seen an oversize length (QUIC's STOP_SENDING cancels the rest of
	// the write), and answers all the same; the answer is what counts.
	_, werr := s.Write(frame)
	_ = s.CloseWrite()
	var m pb.Message
	if err := pbio.NewDelimitedReader(s, 1<<20).ReadMsg(&m); err != nil {
		return nil, errors.Join(werr, err)
	}
	return &m, nil
}

func delimited(m proto.Message) []byte {
	b, _ := proto.Marshal(m)
	var buf strings.Builder
	w := pbio.NewDelimitedWriter(&buf)
	_ = w.WriteMsg(m)
	_ = b
	return []byte(buf.String())
}

func TestRefusals(t *testing.T) {
	simulate(t, func(t *testing.T, r *rig) {
		a, b := pair(t, r)
		probe := &pb.Message{Version: wireVersion, Type: pb.Message_PROBE, Probe: &pb.Probe{Url: "http://127.0.0.9/"}}
		v2 := proto.Clone(probe).(*pb.Message)
		v2.Version = 2
		noPayload := &pb.Message{Version: wireVersion, Type: pb.Message_PROBE}
		wrongType := &pb.Message{Version: wireVersion, Type: pb.Message_RESOLVE, Resolve: &pb.Resolve{}}
		unknownType := &pb.Message{Version: wireVersion, Type: 99}
		huge := &pb.Message{Version: wireVersion, Type: pb.Message_PROBE, Probe: &pb.Probe{Url: strings.Repeat("x", 2*maxProbeMsg)}}

		tests := []struct {
			name  string
			frame []byte
			want  error
		}{
			{"version 2", delimited(v2), ErrUnsupportedVersion},
			{"no payload", delimited(noPayload), ErrMalformed},
			{"type of another protocol", delimited(wrongType), ErrUnexpectedType},
			{"unknown type", delimited(unknownType), ErrUnexpectedType},
			{"oversize", delimited(huge), ErrTooLarge},
			{"garbage", append([]byte{5}, 0xff, 0xff, 0xff, 0xff, 0xff), ErrMalformed},
		}
		// No subtests: t.Run is not allowed inside a synctest bubble.
		for _, tt := range tests {
			m, err := rawExchange(t, a, b.h.ID(), ProbeID, tt.frame)
			switch {
			case err != nil:
				t.Errorf("%s: no error frame: %v", tt.name, err)
			case m.GetType() != pb.Message_ERROR:
				t.Errorf("%s: answer %v, want an error frame", tt.name, m.GetType())
			case !errors.Is(codeToError(m.GetError()), tt.want):
				t.Errorf("%s: error %v, want %v", tt.name, codeToError(m.GetError()), tt.want)
			case m.GetError().GetMessage() == "":
				t.Errorf("%s: error frame without a message", tt.name)
			}
		}
		// Refused streams do not affect others.
		if _, err := a.o.Probe(t.Context(), b.h.ID(), "http://127.0.0.9/"); err != nil {
			t.Fatalf("probe after refusals: %v", err)
		}

		// Another version of the protocol is refused by negotiation.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := rawExchange(t, a, b.h.ID(), "/micra/probe/2.0.0", delimited(probe)); err == nil {
			t.Fatal("a /micra/probe/2.0.0 stream was served")
		}
		// A peer that does not speak the protocol: a clear error.
		b.h.RemoveStreamHandler(ProbeID)
		if _, err := a.o.Probe(ctx, b.h.ID(), "http://127.0.0.9/"); !errors.Is(err, ErrUnsupportedProtocol) {
			t.Fatalf("probe to a peer without the protocol = %v, want ErrUnsupportedProtocol", err)
		}
	})
}

func TestErrorCodes(t *testing.T) {
	for _, c := range codeErrors {
		err := codeToError(&pb.Error{Code: c.code, Message: "x"})
		if !errors.Is(err, c.err) || errorToCode(err) != c.code {
			t.Errorf("code %v does not round-trip (%v)", c.code, err)
		}
	}
	if errorToCode(errors.New("boom")) != pb.Error_INTERNAL {
		t.Error("plain error is not INTERNAL")
	}
	if !errors.Is(codeToError(&pb.Error{Code: 999}), ErrRemote) {
		t.Error("unknown code is not ErrRemote")
	}
	long := codeToError(&pb.Error{Code: pb.Error_MALFORMED, Message: strings.Repeat("x", 5000)})
	if len(long.Error()) > 400 {
		t.Error("peer message not clipped")
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for _, m := range []*pb.Message{
		{Version: 1, Type: pb.Message_PROBE, Probe: &pb.Probe{Url: "http://x/"}},
		{Version: 1, Type: pb.Message_REPLICATE, Replicate: &pb.Replicate{Entries: []*pb.Entry{{Kind: pb.Entry_LOAD, Key: []byte("k")}}}},
		{Version: 2, Type: pb.Message_OK},
		{Version: 1, Type: pb.Message_REASSIGN, Reassign: &pb.Reassign{Node: []byte("x"), To: []byte("y")}},
		{Version: 1, Type: pb.Message_BLOCK_UPDATE, BlockUpdate: &pb.BlockUpdate{Probes: []*pb.PeerRTT{{Peer: []byte("p"), RttMicros: 5}}}},
		{Version: 1, Type: pb.Message_BLOCK_ENTRIES, BlockEntries: &pb.BlockEntries{Entries: []*pb.BlockEntry{{}}}},
		{Version: 1, Type: pb.Message_REPLICATE, Replicate: &pb.Replicate{Entries: []*pb.Entry{{Kind: pb.Entry_BLOCK, Key: []byte("k")}}}},
		{Version: 1, Type: pb.Message_REPLICATE, Replicate: &pb.Replicate{Entries: []*pb.Entry{{Kind: pb.Entry_AUDIT, Key: []byte("k"),
			Value: []byte{0x0a, 0x01, 'k', 0x10, 0x02, 0x22, 0x01, 'h'}}}}},
		{Version: 1, Type: pb.Message_AUDIT, Audit: &pb.Audit{Addr: []byte{127, 0, 0, 1}, Url: "http://x/", Evidence: []byte{1},
			Priors: []*pb.AuditPrior{{Url: "http://y/", Evidence: []byte{2}}}}},
		{Version: 1, Type: pb.Message_AUDIT_VERDICT, AuditVerdict: &pb.AuditVerdict{Result: pb.AuditVerdict_AGREE, Pages: []*pb.Page{{Peer: []byte("p"), Distance: 3}}}},
		{Version: 1, Type: pb.Message_PAGE, Page: &pb.Page{Url: "http://x/", Status: 200, Fingerprint: 7}},
		{Version: 1, Type: pb.Message_WITHHELD, Withheld: &pb.Withheld{Addr: []byte{127, 0, 0, 1}, Url: "http://x/", Holder: []byte("p"), AskedMs: 5}},
		{Version: 1, Type: pb.Message_WITHHELD_VERDICT, WithheldVerdict: &pb.WithheldVerdict{Result: pb.WithheldVerdict_NOTED, Holder: []byte("p"), RetryMs: 9}},
		{Version: 1, Type: pb.Message_REPLICATE, Replicate: &pb.Replicate{Entries: []*pb.Entry{{Kind: pb.Entry_WITHHELD, Key: []byte("k"),
			Value: []byte{0x12, 0x01, 'p', 0x18, 0x05}}}}},
		{Version: 1, Type: pb.Message_RELEASE_QUERY, ReleaseQuery: &pb.ReleaseQuery{Parent: make([]byte, 32)}},
		{Version: 1, Type: pb.Message_CHUNK_QUERY, ChunkQuery: &pb.ChunkQuery{Snapshot: make([]byte, 32), Offset: releaseChunk, Length: 10}},
		{Version: 1, Type: pb.Message_CHUNK, Chunk: &pb.Chunk{Data: []byte{1, 2}, Size: 2}},
		{Version: 1, Type: pb.Message_CARRY_PROBES, CarryProbes: &pb.CarryProbes{Snapshot: make([]byte, 32), Probes: []*pb.CarriedProbe{{
			From:  &pb.Range{Start: []byte{127, 0, 0, 0}, End: []byte{127, 0, 0, 255}},
			Probe: &pb.ProbeEntry{Subnet: &pb.Range{Start: []byte{127, 0, 0, 0}, End: []byte{127, 0, 0, 127}}, Peer: []byte("p"), RttMicros: 9000}}}}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	tree := mustTree(f)
	c := &coordinator{o: &Overlay{tree: tree}, tree: tree, sid: tree.ID(), cfg: &config{}}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.Message
		if err := decodeMessage(b, &m); err != nil {
			if errorToCode(err) == pb.Error_INTERNAL {
				t.Fatalf("decoder error without a wire code: %v", err)
			}
			return
		}
		if m.GetVersion() != wireVersion || !payloadOf(&m) {
			t.Fatal("accepted a bad envelope")
		}
		// The payload checks that handlers run on untrusted input.
		_, _ = c.checkEntries(m.GetReplicate().GetEntries())
		_, _ = c.checkEntries(m.GetSyncState().GetEntries())
		if m.GetReplicate().GetShard() != nil {
			_, _ = c.shardRefFromPB(m.GetReplicate().GetShard())
		}
		_, _ = rangeFromPB(m.GetRedelegate().GetSubnet())
		_, _ = addrFromWire(m.GetDelegate().GetAddr())
		_ = hintAddrs(m.GetError().GetHint())
		_, _ = openRecord(tree.ID(), m.GetAssign().GetRecord())
		_, _ = fromPeerRTTs(m.GetBlockUpdate().GetProbes(), subnet.Range{}, time.Time{})
		_, _ = rangeFromPB(m.GetReassign().GetSubnet())
		_, _ = rangeFromPB(m.GetBlockQuery().GetNear())
		_, _ = c.shardRefFromPB(&pb.ShardRef{Kind: pb.ShardRef_BLOCK, Anchor: m.GetBlockQuery().GetBlock()})
		if m.GetAuditVerdict() != nil {
			_, _ = verdictFromPB(m.GetAuditVerdict())
		}
		_ = pageFromPB(m.GetPage())
		if m.GetWithheldVerdict() != nil {
			_, _ = withheldVerdictFromPB(m.GetWithheldVerdict())
		}
		_, _ = addrFromWire(m.GetWithheld().GetAddr())
		_ = egress.HostOf(m.GetWithheld().GetUrl())
		_, _ = peer.IDFromBytes(m.GetWithheld().GetHolder())
		_, _ = addrFromWire(m.GetAudit().GetAddr())
		_ = egress.HostOf(m.GetAudit().GetUrl())
		for _, be := range m.GetBlockEntries().GetEntries() {
			if v, err := proto.Marshal(be); err == nil {
				_, _ = c.openBlockEntry(v, true)
			}
		}
	})
}

// FuzzCheckAnnounce checks any decodable announcement as an ANNOUNCE
// exchange does: what it accepts is within bounds.
func FuzzCheckAnnounce(f *testing.F) {
	now := time.UnixMilli(1_700_000_000_000)
	sid := make([]byte, 32)
	good, _ := proto.Marshal(&pb.Announce{Version: 1, Snapshot: sid, AtMs: now.UnixMilli()})
	f.Add(good)
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.Announce
		if len(b) > maxAnnounceMsg || proto.Unmarshal(b, &m) != nil {
			return
		}
		a, err := checkAnnounce(sid, &m, now)
		if err == nil && (len(a.rtts) > maxRowRTTs || a.at.Sub(now).Abs() > announceSkew) {
			t.Fatal("accepted a bad announcement")
		}
	})
}

// TestRelay reaches a node that does not listen at all through a circuit
// relay v2 on loopback: it is asked to probe, and answers.
func TestRelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	relaySK, _, _ := crypto.GenerateEd25519Key(nil)
	relay, err := NewHost(relaySK, BindAddress(netip.MustParseAddr("127.0.0.1"), 0), Reachability(network.ReachabilityPublic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	relayInfo := peer.AddrInfo{ID: relay.ID(), Addrs: relay.Addrs()}

	natSK, _, _ := crypto.GenerateEd25519Key(nil)
	natHost, err := NewHost(natSK, NoListen(), StaticRelays([]peer.AddrInfo{relayInfo}), Reachability(network.ReachabilityPrivate), NoRelayService())
	if err != nil {
		t.Fatal(err)
	}
	natOverlay, err := New(natHost, mustTree(t), memDB(t), append(swarmOpts(), WithDelegator(&requesterDelegator{}),
		WithProber(fixedProber{25 * time.Millisecond}), Logger(testLogger()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { natOverlay.Close(); natHost.Close() })
	for _, a := range natHost.Network().ListenAddresses() {
		if _, err := a.ValueForProtocol(ma.P_IP4); err == nil {
			t.Fatalf("the NATed host listens on %s", a)
		}
		if _, err := a.ValueForProtocol(ma.P_IP6); err == nil {
			t.Fatalf("the NATed host listens on %s", a)
		}
	}
	if err := natHost.Connect(ctx, relayInfo); err != nil {
		t.Fatal(err)
	}
	// The circuit address through the relay. autorelay does not advertise
	// circuit addresses of loopback relays (it keeps public ones only), so
	// the test builds it; dials fail until the reservation is made.
	circuit := relay.Addrs()[0].Encapsulate(ma.StringCast("/p2p/" + relay.ID().String() + "/p2p-circuit"))
	a := loopback(t).node(2)
	eventually(t, 30*time.Second, func() error {
		a.h.Network().ClosePeer(natHost.ID())
		a.h.Peerstore().ClearAddrs(natHost.ID())
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return a.h.Connect(cctx, peer.AddrInfo{ID: natHost.ID(), Addrs: []ma.Multiaddr{circuit}})
	})
	for _, c := range a.h.Network().ConnsToPeer(natHost.ID()) {
		if !strings.Contains(c.RemoteMultiaddr().String(), "p2p-circuit") {
			t.Fatalf("direct connection %s to a node that does not listen", c.RemoteMultiaddr())
		}
	}
	rtt, err := a.o.Probe(ctx, natHost.ID(), "http://127.0.0.9/")
	if err != nil || rtt != 25*time.Millisecond {
		t.Fatalf("probe through the relay = %v, %v", rtt, err)
	}
}

// TestPayloadFields: every message type but OK has its payload field, and
// a message of one type is checked for that field only.
func TestPayloadFields(t *testing.T) {
	for name, v := range pb.Message_Type_value {
		typ := pb.Message_Type(v)
		if typ == pb.Message_OK || typ == pb.Message_UNKNOWN {
			continue
		}
		if _, ok := payloadFields[typ]; !ok {
			t.Errorf("message type %s has no field %s", name, strings.ToLower(name))
		}
	}
	if !payloadOf(&pb.Message{Type: pb.Message_OK}) {
		t.Error("OK needs no payload")
	}
	if payloadOf(&pb.Message{Type: pb.Message_ASSIGN, Probe: &pb.Probe{}}) {
		t.Error("an ASSIGN with another type's field passed")
	}
	if !payloadOf(&pb.Message{Type: pb.Message_ASSIGN, Assign: &pb.Assign{}}) {
		t.Error("an ASSIGN with its field failed")
	}
	if payloadOf(&pb.Message{Type: 99}) {
		t.Error("an unknown type passed")
	}
}
