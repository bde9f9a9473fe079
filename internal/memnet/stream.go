package memnet

import (
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
)

var (
	errReadClosed  = errors.New("memnet: stream closed for reading")
	errWriteClosed = errors.New("memnet: stream closed for writing")
)

// stream is one end of a stream (network.MuxedStream). Writes never
// block: the bytes go out at once as a frame.
type stream struct {
	c  *conn
	id uint64

	mu          sync.Mutex
	buf         []byte        // arrived, not read
	wake        chan struct{} // closed (and replaced) when anything changes
	remoteFin   bool          // the other end writes no more
	readClosed  bool
	writeClosed bool
	err         error // reset, or the connection closed
	readBy      time.Time
	writeBy     time.Time
	timer       *time.Timer // wakes readers at readBy
}

var _ network.MuxedStream = (*stream)(nil)

func newStream(c *conn, id uint64) *stream {
	return &stream{c: c, id: id, wake: make(chan struct{})}
}

// changed wakes the goroutines waiting on s; s.mu is held.
func (s *stream) changed() {
	close(s.wake)
	s.wake = make(chan struct{})
}

// arrive appends data from the other end.
func (s *stream) arrive(data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readClosed || s.err != nil {
		return
	}
	s.buf = append(s.buf, data...)
	s.changed()
}

// finished notes the other end's end of writing.
func (s *stream) finished() {
	s.mu.Lock()
	s.remoteFin = true
	s.changed()
	done := s.writeClosed
	s.mu.Unlock()
	if done {
		s.c.removeStream(s.id)
	}
}

// fail resets s with err, telling the other end when local.
func (s *stream) fail(err error, local bool) {
	s.mu.Lock()
	first := s.err == nil
	if first {
		s.err = err
		s.buf = nil
		s.changed()
		if s.timer != nil {
			s.timer.Stop()
		}
	}
	s.mu.Unlock()
	s.c.removeStream(s.id)
	if first && local {
		s.c.send(frameReset, s.id, nil)
	}
}

func (s *stream) Read(b []byte) (int, error) {
	for {
		s.mu.Lock()
		switch {
		case s.err != nil:
			defer s.mu.Unlock()
			return 0, s.err
		case s.readClosed:
			defer s.mu.Unlock()
			return 0, errReadClosed
		case len(s.buf) > 0:
			n := copy(b, s.buf)
			if s.buf = s.buf[n:]; len(s.buf) == 0 {
				s.buf = nil
			}
			s.mu.Unlock()
			return n, nil
		case len(b) == 0:
			s.mu.Unlock()
			return 0, nil
		case s.remoteFin:
			s.mu.Unlock()
			return 0, io.EOF
		case !s.readBy.IsZero() && !time.Now().Before(s.readBy):
			s.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		wake := s.wake
		s.mu.Unlock()
		<-wake
	}
}

func (s *stream) Write(b []byte) (int, error) {
	s.mu.Lock()
	switch {
	case s.err != nil:
		defer s.mu.Unlock()
		return 0, s.err
	case s.writeClosed:
		s.mu.Unlock()
		return 0, errWriteClosed
	case !s.writeBy.IsZero() && !time.Now().Before(s.writeBy):
		s.mu.Unlock()
		return 0, os.ErrDeadlineExceeded
	}
	s.mu.Unlock()
	if len(b) == 0 {
		return 0, nil
	}
	s.c.send(frameData, s.id, append([]byte(nil), b...))
	return len(b), nil
}

func (s *stream) CloseWrite() error {
	s.mu.Lock()
	if s.writeClosed || s.err != nil {
		s.mu.Unlock()
		return nil
	}
	s.writeClosed = true
	done := s.remoteFin || s.readClosed
	s.mu.Unlock()
	s.c.send(frameFin, s.id, nil)
	if done {
		s.c.removeStream(s.id)
	}
	return nil
}

func (s *stream) CloseRead() error {
	s.mu.Lock()
	s.readClosed = true
	s.buf = nil
	s.changed()
	done := s.writeClosed
	s.mu.Unlock()
	if done {
		s.c.removeStream(s.id)
	}
	return nil
}

func (s *stream) Close() error {
	s.CloseRead()
	return s.CloseWrite()
}

func (s *stream) Reset() error {
	s.fail(network.ErrReset, true)
	return nil
}

func (s *stream) ResetWithError(network.StreamErrorCode) error { return s.Reset() }

func (s *stream) SetDeadline(t time.Time) error {
	s.SetReadDeadline(t)
	return s.SetWriteDeadline(t)
}

func (s *stream) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readBy = t
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if !t.IsZero() && s.err == nil {
		s.timer = time.AfterFunc(time.Until(t), func() {
			s.mu.Lock()
			s.changed()
			s.mu.Unlock()
		})
	}
	s.changed()
	return nil
}

func (s *stream) SetWriteDeadline(t time.Time) error {
	s.mu.Lock()
	s.writeBy = t
	s.mu.Unlock()
	return nil
}
