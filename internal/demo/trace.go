package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/micra-net/micra/internal/swarm"
	"github.com/micra-net/micra/internal/world"
)

// decisionTrace keeps the delegation procedure's debug records of each
// subnet (MICRA_DEBUG), so that the demo can explain a sub-optimal
// delegation: which nodes were asked, in which order, what they answered
// and what their true RTTs are. It is a slog.Handler that passes every
// record on to next and keeps those with a subnet attribute.
type decisionTrace struct {
	next  slog.Handler
	attrs []slog.Attr
	mu    *sync.Mutex
	by    map[string][]string // subnet → records, in order
}

func newDecisionTrace(next slog.Handler) *decisionTrace {
	return &decisionTrace{next: next, mu: &sync.Mutex{}, by: map[string][]string{}}
}

// traceHandler returns t as a slog.Handler, nil when t is nil.
func traceHandler(t *decisionTrace) slog.Handler {
	if t == nil {
		return nil
	}
	return t
}

func (t *decisionTrace) Enabled(context.Context, slog.Level) bool { return true }

func (t *decisionTrace) Handle(ctx context.Context, r slog.Record) error {
	var subnet string
	var b strings.Builder
	b.WriteString(r.Time.Format("15:04:05.000"))
	b.WriteString(" " + r.Message)
	add := func(a slog.Attr) bool {
		if a.Key == "subnet" {
			subnet = a.Value.String()
		}
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	}
	for _, a := range t.attrs {
		add(a)
	}
	r.Attrs(add)
	if subnet != "" {
		t.mu.Lock()
		t.by[subnet] = append(t.by[subnet], b.String())
		t.mu.Unlock()
	}
	if t.next.Enabled(ctx, r.Level) {
		return t.next.Handle(ctx, r)
	}
	return nil
}

func (t *decisionTrace) WithAttrs(as []slog.Attr) slog.Handler {
	c := *t
	c.attrs = append(slices.Clone(t.attrs), as...)
	c.next = t.next.WithAttrs(as)
	return &c
}

func (t *decisionTrace) WithGroup(name string) slog.Handler {
	c := *t
	c.next = t.next.WithGroup(name)
	return &c
}

// explain writes the records of subnet, peer IDs replaced by the nodes'
// addresses with their true RTTs to site s, then every node by true RTT.
func (t *decisionTrace) explain(out io.Writer, w *world.World, subnet string, s world.Site, nodes []*swarm.Node) {
	names := map[string]string{}
	type nr struct {
		addr netip.Addr
		rtt  time.Duration
	}
	var all []nr
	for _, dn := range nodes {
		rtt := w.RTT(dn.Addr, s)
		label := fmt.Sprintf("%s[true %.1f]", dn.Addr, float64(rtt.Microseconds())/1000)
		names[dn.ID().ShortString()] = label
		names[dn.ID().String()] = label
		all = append(all, nr{dn.Addr, rtt})
	}
	t.mu.Lock()
	recs := slices.Clone(t.by[subnet])
	t.mu.Unlock()
	for _, r := range recs {
		for id, l := range names {
			r = strings.ReplaceAll(r, id, l)
		}
		fmt.Fprintf(out, "      %s\n", r)
	}
	slices.SortFunc(all, func(a, b nr) int { return int(a.rtt - b.rtt) })
	var b strings.Builder
	for _, x := range all {
		fmt.Fprintf(&b, " %s=%.1f", x.addr, float64(x.rtt.Microseconds())/1000)
	}
	fmt.Fprintf(out, "      true:%s\n", b.String())
}
