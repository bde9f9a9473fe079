// Reading a running node's status from its dashboard, as micra status and
// micra bench footprint do.

package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// ErrDashboardAddr is wrapped by FetchStatus when addr is not a host:port
// an HTTP request can be made to.
var ErrDashboardAddr = errors.New("not a dashboard address")

// FetchStatus reads the Status a node's dashboard at addr (host:port)
// serves at /api/status, with the bearer token when it is not empty,
// within 10 s; a body over 8 MiB is cut.
func FetchStatus(ctx context.Context, addr, token string) (Status, error) {
	var st Status
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/status", nil)
	if err != nil {
		return st, fmt.Errorf("%w: %q: %v", ErrDashboardAddr, addr, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("no node answers at %s (is \"micra node\" running, with --dashboard %s?): %w", addr, addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: %s: %s", addr, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("%s: not a node's status: %v", addr, err)
	}
	return st, nil
}
