package scale

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// events keeps the overlays' log records of shard ownership (claims,
// losses, handovers) and orphaned subnets once armed, for the account of a
// subnet lost after the churn. Bounded: at most maxEvents records.
type events struct {
	armed atomic.Bool
	mu    sync.Mutex
	all   []event
}

type event struct {
	at     time.Time // virtual
	node   netip.Addr
	msg    string
	attrs  string
	shard  string // the "shard" attribute, when present
	subnet string // the "subnet" attribute (an orphaned subnet), when present
}

const maxEvents = 100_000

var eventMsgs = map[string]bool{
	"shard claimed": true, "shard lost to a newer epoch": true, "shard handed over to a closer peer": true,
	"merged a stale coordinator's state": true, "subnet orphaned": true, "shard's state handed to the peer now nearest": true,
}

// logger returns a logger for the overlay of the node at a.
func (e *events) logger(a netip.Addr) *slog.Logger {
	return slog.New(&eventHandler{e: e, node: a})
}

// about returns the records of range shards whose anchor contains a, and
// of orphaned subnets that contain a, in order, one per line.
func (e *events) about(a netip.Addr) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, ev := range e.all {
		anchor, ok := strings.CutPrefix(ev.shard, "range:")
		if !(ok && anchorContains(anchor, a)) && !(ev.subnet != "" && anchorContains(ev.subnet, a)) {
			continue
		}
		fmt.Fprintf(&b, "\n    %s %s: %s%s", ev.at.Format("15:04:05.000"), ev.node, ev.msg, ev.attrs)
	}
	return b.String()
}

// anchorContains reports whether a range, as subnet.Range prints it (a
// prefix, or "start - end": a range shard's anchor, an orphaned subnet),
// contains a.
func anchorContains(anchor string, a netip.Addr) bool {
	if p, err := netip.ParsePrefix(anchor); err == nil {
		return p.Contains(a)
	}
	lo, hi, ok := strings.Cut(anchor, " - ")
	start, err1 := netip.ParseAddr(lo)
	end, err2 := netip.ParseAddr(hi)
	return ok && err1 == nil && err2 == nil && start.Compare(a) <= 0 && a.Compare(end) <= 0
}

type eventHandler struct {
	e     *events
	node  netip.Addr
	attrs []slog.Attr
}

func (h *eventHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo && h.e.armed.Load()
}

func (h *eventHandler) Handle(_ context.Context, r slog.Record) error {
	if !eventMsgs[r.Message] {
		return nil
	}
	ev := event{at: r.Time, node: h.node, msg: r.Message}
	var b strings.Builder
	each := func(a slog.Attr) bool {
		switch a.Key {
		case "shard":
			ev.shard = a.Value.String()
		case "subnet":
			ev.subnet = a.Value.String()
		}
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range h.attrs {
		each(a)
	}
	r.Attrs(each)
	ev.attrs = b.String()
	h.e.mu.Lock()
	if len(h.e.all) < maxEvents {
		h.e.all = append(h.e.all, ev)
	}
	h.e.mu.Unlock()
	return nil
}

func (h *eventHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &eventHandler{e: h.e, node: h.node, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *eventHandler) WithGroup(string) slog.Handler { return h }

// rejectionLog is a slog handler that passes the delegators' "probe claim
// rejected" records to logf, the first ten, and drops everything else.
type rejectionLog struct {
	logf func(format string, args ...any)
	n    *atomic.Int64
}

func (h *rejectionLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *rejectionLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "probe claim rejected" {
		return nil
	}
	if h.n.Add(1) > 10 {
		return nil
	}
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.logf("probe claim rejected:%s", b.String())
	return nil
}

func (h *rejectionLog) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h *rejectionLog) WithGroup(string) slog.Handler { return h }
