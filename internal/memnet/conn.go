package memnet

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/transport"
	ma "github.com/multiformats/go-multiaddr"
)

type frameKind uint8

const (
	frameOpen  frameKind = iota // a stream opens
	frameData                   // bytes on a stream
	frameFin                    // the sender writes no more on a stream
	frameReset                  // a stream is reset
	frameClose                  // the connection closes
)

type frame struct {
	at   time.Time
	kind frameKind
	id   uint64
	data []byte
}

// conn is one end of a connection (transport.CapableConn).
type conn struct {
	t          *Transport
	local      netip.AddrPort
	remote     netip.AddrPort
	remotePeer peer.ID
	remoteKey  crypto.PubKey
	scope      network.ConnManagementScope
	dir        network.Direction
	oneWay     time.Duration // to the other end
	peer       *conn         // the other end

	// out is the frames in flight to peer, in order of arrival.
	outMu    sync.Mutex
	out      []frame
	armed    bool       // a timer will deliver out[0]
	deliver  sync.Mutex // one delivery at a time, in order
	streamMu sync.Mutex
	streams  map[uint64]*stream
	nextID   uint64
	accepted []*stream
	wake     chan struct{} // a stream was accepted
	done     chan struct{} // closed with the connection
	err      error         // why it closed
}

var _ transport.CapableConn = (*conn)(nil)

// init sets c up to send to p with one-way latency d, numbering the
// streams it opens from first by twos (the two ends never collide).
func (c *conn) init(d time.Duration, p *conn, first uint64) {
	c.oneWay, c.peer, c.nextID = d, p, first
	c.streams = map[uint64]*stream{}
	c.wake = make(chan struct{}, 1)
	c.done = make(chan struct{})
}

// send queues f for the other end; it arrives once it left this host's
// uplink and crossed the link. Frames of a cut host are lost.
func (c *conn) send(kind frameKind, id uint64, data []byte) {
	n := c.t.n
	if n.isCut(c.local.Addr(), c.remote.Addr()) {
		return
	}
	at := n.depart(c.local.Addr(), len(data)+frameOverhead).Add(c.oneWay)
	c.outMu.Lock()
	defer c.outMu.Unlock()
	c.out = append(c.out, frame{at: at, kind: kind, id: id, data: data})
	if !c.armed {
		c.armed = true
		time.AfterFunc(time.Until(at), c.flush)
	}
}

// flush delivers the frames due, in order, and arms the timer for the
// next. Frames leave a host's uplink in order and cross a connection at
// one latency, so arrival times never decrease along out.
func (c *conn) flush() {
	c.deliver.Lock()
	defer c.deliver.Unlock()
	c.outMu.Lock()
	now := time.Now()
	i := 0
	for i < len(c.out) && !c.out[i].at.After(now) {
		i++
	}
	due := c.out[:i:i]
	c.out = c.out[i:]
	if len(c.out) > 0 {
		time.AfterFunc(c.out[0].at.Sub(now), c.flush)
	} else {
		c.armed = false
		c.out = nil
	}
	c.outMu.Unlock()
	n := c.t.n
	if n.isCut(c.local.Addr(), c.remote.Addr()) {
		return
	}
	n.frames.Add(int64(len(due)))
	for _, f := range due {
		c.peer.receive(f)
	}
}

// receive handles a frame from the other end.
func (c *conn) receive(f frame) {
	if f.kind == frameClose {
		c.closeLocal(errRemoteClosed)
		return
	}
	c.streamMu.Lock()
	if c.err != nil {
		c.streamMu.Unlock()
		return
	}
	s := c.streams[f.id]
	if f.kind == frameOpen && s == nil {
		s = newStream(c, f.id)
		c.streams[f.id] = s
		c.accepted = append(c.accepted, s)
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	c.streamMu.Unlock()
	if s == nil {
		return // a stream this end has done with
	}
	switch f.kind {
	case frameData:
		s.arrive(f.data)
	case frameFin:
		s.finished()
	case frameReset:
		s.fail(network.ErrReset, false)
	}
}

func (c *conn) OpenStream(ctx context.Context) (network.MuxedStream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.streamMu.Lock()
	if c.err != nil {
		defer c.streamMu.Unlock()
		return nil, c.err
	}
	id := c.nextID
	c.nextID += 2
	s := newStream(c, id)
	c.streams[id] = s
	c.streamMu.Unlock()
	c.send(frameOpen, id, nil)
	return s, nil
}

func (c *conn) AcceptStream() (network.MuxedStream, error) {
	for {
		c.streamMu.Lock()
		if c.err != nil {
			defer c.streamMu.Unlock()
			return nil, c.err
		}
		if len(c.accepted) > 0 {
			s := c.accepted[0]
			c.accepted = c.accepted[1:]
			if len(c.accepted) > 0 {
				select {
				case c.wake <- struct{}{}:
				default:
				}
			}
			c.streamMu.Unlock()
			return s, nil
		}
		c.streamMu.Unlock()
		select {
		case <-c.wake:
		case <-c.done:
		}
	}
}

// removeStream forgets stream id: frames for it are dropped from now on.
func (c *conn) removeStream(id uint64) {
	c.streamMu.Lock()
	delete(c.streams, id)
	c.streamMu.Unlock()
}

// closeLocal closes this end with err: its streams fail, and it reports
// whether it was open.
func (c *conn) closeLocal(err error) bool {
	c.streamMu.Lock()
	if c.err != nil {
		c.streamMu.Unlock()
		return false
	}
	c.err = err
	streams := c.streams
	c.streams = nil
	c.accepted = nil
	close(c.done)
	c.streamMu.Unlock()
	for _, s := range streams {
		s.fail(network.ErrReset, false)
	}
	if c.scope != nil {
		c.scope.Done()
	}
	c.t.n.forget(c)
	return true
}

func (c *conn) Close() error {
	if c.closeLocal(errClosed) {
		c.send(frameClose, 0, nil)
	}
	return nil
}

func (c *conn) CloseWithError(network.ConnErrorCode) error { return c.Close() }

func (c *conn) IsClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *conn) LocalPeer() peer.ID             { return c.t.id }
func (c *conn) RemotePeer() peer.ID            { return c.remotePeer }
func (c *conn) RemotePublicKey() crypto.PubKey { return c.remoteKey }
func (c *conn) LocalMultiaddr() ma.Multiaddr   { return toMultiaddr(c.local) }
func (c *conn) RemoteMultiaddr() ma.Multiaddr  { return toMultiaddr(c.remote) }
func (c *conn) Transport() transport.Transport { return c.t }
func (c *conn) ConnState() network.ConnectionState {
	return network.ConnectionState{Transport: "memnet"}
}

func (c *conn) Scope() network.ConnScope {
	if c.scope == nil {
		return &network.NullScope{}
	}
	return c.scope
}

// As is false: there is no underlying connection to expose.
func (c *conn) As(any) bool { return false }
