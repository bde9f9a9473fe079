package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// defaultIndexerAPI is where the indexer serves its HTTP API by default,
// and where the client commands look for it.
const defaultIndexerAPI = "127.0.0.1:7465"

// apiFlag adds --api to a client command's flags.
func apiFlag(fs interface {
	String(name, value, usage string) *string
}) *string {
	def := os.Getenv("MICRA_INDEXER")
	if def == "" {
		def = "http://" + defaultIndexerAPI
	}
	return fs.String("api", def, "the indexer's HTTP `URL` (also $MICRA_INDEXER)")
}

// apiClient talks to an indexer's HTTP API.
type apiClient struct {
	base *url.URL
	hc   *http.Client
}

func newAPIClient(raw string) (*apiClient, error) {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("%w: --api %q is not an http(s) URL", errUsage, raw)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return &apiClient{base: u, hc: &http.Client{Timeout: 2 * time.Minute}}, nil
}

// do sends a request to path (with query q) and decodes a JSON answer into
// out (unless nil); an error status becomes an error carrying the API's
// message.
func (c *apiClient) do(ctx context.Context, method, path string, q url.Values, body any, out any) error {
	resp, err := c.send(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	return nil
}

func (c *apiClient) send(ctx context.Context, method, path string, q url.Values, body any) (*http.Response, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, fmt.Errorf("no indexer answers at %s (is \"micra indexer\" running, with --http %s? --api or $MICRA_INDEXER name another): %w", c.base, c.base.Host, err)
		}
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var e struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, e.Error)
	}
	return resp, nil
}
