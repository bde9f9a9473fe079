package evaluate

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/micra-net/micra/internal/world"
)

// maxFrontPage bounds a downloaded front page; a larger body is an error.
const maxFrontPage = 8 << 20

// requestTimeout bounds one request in wall time.
const requestTimeout = time.Minute

// HTTPDownloader downloads through a running world over loopback: each
// request on a fresh connection bound to the node's address (the world
// applies its latency and bandwidth model by that address), timed from the
// start of the connect, and divided by the world's time scale. Bodies are
// asked for without content coding, so Bytes are the bytes on the wire.
type HTTPDownloader struct {
	Run *world.Running

	mu      sync.Mutex
	clients map[netip.Addr]*http.Client
}

var _ Downloader = (*HTTPDownloader)(nil)

func (h *HTTPDownloader) client(node netip.Addr) (*http.Client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.clients[node]; ok {
		return c, nil
	}
	dial, err := h.Run.Dialer(node)
	if err != nil {
		return nil, err
	}
	c := &http.Client{
		Transport: &http.Transport{DialContext: dial.DialContext, DisableKeepAlives: true, DisableCompression: true},
		// The front page is the URL of record: a redirect is not followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if h.clients == nil {
		h.clients = map[netip.Addr]*http.Client{}
	}
	h.clients[node] = c
	return c, nil
}

// Get implements Downloader.
func (h *HTTPDownloader) Get(ctx context.Context, node netip.Addr, s world.Site) (time.Duration, int64, error) {
	var n int64
	t, err := h.do(ctx, http.MethodGet, node, s, func(body io.Reader) error {
		var err error
		n, err = io.Copy(io.Discard, io.LimitReader(body, maxFrontPage+1))
		if err == nil && n > maxFrontPage {
			err = fmt.Errorf("front page over %d bytes", maxFrontPage)
		}
		return err
	})
	return t, n, err
}

// Head implements Downloader.
func (h *HTTPDownloader) Head(ctx context.Context, node netip.Addr, s world.Site) (time.Duration, error) {
	return h.do(ctx, http.MethodHead, node, s, nil)
}

// do sends one request for s's front page from node and returns its
// modelled duration: to the last body byte read by read, or to the
// response's first byte when read is nil.
func (h *HTTPDownloader) do(ctx context.Context, method string, node netip.Addr, s world.Site, read func(io.Reader) error) (time.Duration, error) {
	c, err := h.client(node)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, h.Run.URL(s), nil)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s from %s: %w", method, s.Name, node, err)
	}
	defer resp.Body.Close()
	if read != nil {
		if err := read(resp.Body); err != nil {
			return 0, fmt.Errorf("%s %s from %s: %w", method, s.Name, node, err)
		}
	}
	elapsed := time.Since(start)
	if resp.StatusCode >= 500 {
		return 0, fmt.Errorf("%s %s from %s: %s", method, s.Name, node, resp.Status)
	}
	return time.Duration(float64(elapsed) / h.Run.TimeScale()), nil
}
