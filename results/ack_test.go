package results

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/internal/p2ptest"
	"github.com/micra-net/micra/overlay"
	opb "github.com/micra-net/micra/overlay/pb"
)

// TestAckProtocol: acknowledgements reach the author's handler as sent; a
// handler that does not know the indexer yet answers UNAVAILABLE, which
// the sender sees as overlay.ErrUnavailable; a peer without the protocol
// is a clear error; empty and oversize acknowledgements are not sent.
func TestAckProtocol(t *testing.T) {
	p2ptest.Bubble(t, func(t *testing.T) {
		net := p2ptest.NewNet(t)
		author, indexer, other := net.Host(t, nil, p2ptest.Addr(0)), net.Host(t, nil, p2ptest.Addr(1)), net.Host(t, nil, p2ptest.Addr(2))
		for _, h := range []peer.AddrInfo{{ID: indexer.ID(), Addrs: indexer.Addrs()}, {ID: other.ID(), Addrs: other.Addrs()}} {
			if err := author.Connect(t.Context(), h); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		var got []BatchRef
		known := false
		t.Cleanup(ServeAcks(author, quiet(), func(ctx context.Context, from peer.ID, refs []BatchRef) error {
			mu.Lock()
			defer mu.Unlock()
			if !known || from != indexer.ID() {
				return overlay.ErrUnavailable
			}
			got = append(got, refs...)
			return nil
		}))
		ref := BatchRef{Node: author.ID(), Seq: 7, Digest: [32]byte{1, 2, 3}}
		if err := SendAck(t.Context(), indexer, author.ID(), []BatchRef{ref}); !errors.Is(err, overlay.ErrUnavailable) {
			t.Fatalf("an acknowledgement from an unknown indexer: %v, want ErrUnavailable", err)
		}
		mu.Lock()
		known = true
		mu.Unlock()
		if err := SendAck(t.Context(), indexer, author.ID(), []BatchRef{ref}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(got) != 1 || got[0] != ref {
			t.Errorf("the handler saw %v", got)
		}
		mu.Unlock()
		if err := SendAck(t.Context(), author, other.ID(), []BatchRef{ref}); !errors.Is(err, overlay.ErrUnsupportedProtocol) {
			t.Errorf("to a peer without the protocol: %v", err)
		}
		if err := SendAck(t.Context(), indexer, author.ID(), nil); err == nil {
			t.Error("an empty acknowledgement was sent")
		}
		if err := SendAck(t.Context(), indexer, author.ID(), make([]BatchRef, maxAckBatches+1)); err == nil {
			t.Error("an oversize acknowledgement was sent")
		}
	})
}

// FuzzDecodeAck feeds arbitrary bytes to the decoder of /micra/ack frames:
// it must not panic, and what it accepts is within the protocol's bounds.
func FuzzDecodeAck(f *testing.F) {
	good, _ := proto.Marshal(&opb.Message{Version: ackWire, Type: opb.Message_ACK, Ack: &opb.Ack{
		Batches: []*opb.BatchRef{{Node: []byte("\x00\x04node"), Seq: 3, Digest: make([]byte, 32)}}}})
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{8, 1, 16, 12})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m opb.Message
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		refs, err := decodeAck(&m)
		if err != nil {
			return
		}
		if len(refs) == 0 || len(refs) > maxAckBatches {
			t.Fatalf("%d references accepted", len(refs))
		}
		for _, r := range refs {
			if r.Node == "" {
				t.Fatal("a reference without a node accepted")
			}
		}
	})
}
