package searcheval

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// site serves a corpus directory over HTTP on a loopback address, with a
// robots.txt that keeps crawlers out of the pages the judgments come from.
type site struct {
	srv  *http.Server
	ln   net.Listener
	base string // "http://127.0.0.1:PORT"
}

// serveSite starts serving root on addr (a loopback host, port 0 for any).
// hidden are slash paths relative to root that robots.txt disallows.
func serveSite(root, addr string, hidden []string) (*site, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("site address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("site address %q: not a loopback address", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	var robots strings.Builder
	robots.WriteString("User-agent: *\n")
	for _, p := range hidden {
		fmt.Fprintf(&robots, "Disallow: /%s\n", p)
	}
	files := http.FileServer(http.Dir(root))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /robots.txt", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte(robots.String()))
	})
	mux.Handle("/", files)
	s := &site{ln: ln, base: "http://" + ln.Addr().String(),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *site) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
