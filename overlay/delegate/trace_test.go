package delegate_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// trace records what the swarm's delegations did, for the report of the
// sub-optimal ones (MICRA_DEBUG): every probe a node ran (its samples,
// when and how many other probes ran at the same time) and every decision
// a coordinator logged (step, the probes it consulted, the peers it knew).
type trace struct {
	mu        sync.Mutex
	probes    map[probeKey][]probeRun
	decisions map[string]decisionLog // by subnet.Range.String
	inflight  atomic.Int32
}

type probeKey struct {
	node netip.Addr
	url  string
}

type probeRun struct {
	rtt        time.Duration // unscaled, as reported
	samples    []time.Duration
	took       time.Duration // wall time of the probe
	concurrent int           // other probes running when it started
	err        error
}

type decisionLog struct {
	coordinator netip.Addr
	step        string
	probes      []string // "short-id=rtt(cached=bool)", as the Delegator logs them
}

func newTrace() *trace {
	return &trace{probes: map[probeKey][]probeRun{}, decisions: map[string]decisionLog{}}
}

// start marks a probe as running and returns how many others were.
func (tr *trace) start() int { return int(tr.inflight.Add(1)) - 1 }

func (tr *trace) done(node netip.Addr, url string, r probeRun) {
	tr.inflight.Add(-1)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	k := probeKey{node, url}
	tr.probes[k] = append(tr.probes[k], r)
}

// handler is a slog.Handler that keeps the Delegator's "search decided"
// records of coordinator at.
func (tr *trace) handler(at netip.Addr) slog.Handler { return &traceHandler{tr: tr, at: at} }

type traceHandler struct {
	tr *trace
	at netip.Addr
}

func (h *traceHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *traceHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *traceHandler) WithGroup(string) slog.Handler            { return h }
func (h *traceHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "search decided" {
		return nil
	}
	d := decisionLog{coordinator: h.at}
	var sub string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "subnet":
			sub = a.Value.String()
		case "step":
			d.step = a.Value.String()
		case "probes":
			d.probes, _ = a.Value.Any().([]string)
		}
		return true
	})
	h.tr.mu.Lock()
	defer h.tr.mu.Unlock()
	if _, ok := h.tr.decisions[sub]; !ok { // the first decision; later ones are re-delegations
		h.tr.decisions[sub] = d
	}
	return nil
}

// delegateWrapper wraps a Delegator to note which peers the coordinator
// knew at each decision.
type delegateWrapper struct {
	inner overlay.Delegator
	mu    sync.Mutex
	peers map[subnet.ID][]peer.ID
}

func (w *delegateWrapper) Delegate(ctx context.Context, req overlay.DelegateRequest, env overlay.DelegationEnv) (peer.ID, error) {
	var ids []peer.ID
	for _, p := range env.Peers() {
		ids = append(ids, p.ID)
	}
	w.mu.Lock()
	if _, ok := w.peers[req.Subnet]; !ok {
		w.peers[req.Subnet] = ids
	}
	w.mu.Unlock()
	return w.inner.Delegate(ctx, req, env)
}

// explain describes the decision of site's subnet r: the coordinator, the
// step, each probe consulted with its measured and true RTT (and the
// samples and concurrency of issued ones), and why the winner won rather
// than the optimal node best.
func (s *swarm) explain(tr *trace, wraps []*delegateWrapper, r subnet.Range, url string, trueRTT func(n *swarmNode) time.Duration, winner, best *swarmNode) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	d, ok := tr.decisions[r.String()]
	if !ok {
		return "  no decision logged"
	}
	byShort := map[string]*swarmNode{}
	for p, n := range s.byPeer {
		byShort[p.ShortString()] = n
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  coordinator %s, step %s\n", d.coordinator, d.step)
	id, _ := s.tree.Find(r)
	for _, w := range wraps {
		w.mu.Lock()
		if ps, ok := w.peers[id]; ok {
			fmt.Fprintf(&b, "  peers known to the coordinator: %d, the optimal node among them: %v\n", len(ps), slices.Contains(ps, best.o.Host().ID()))
		}
		w.mu.Unlock()
	}
	measured := map[*swarmNode]time.Duration{}
	for _, p := range d.probes {
		short, rest, _ := strings.Cut(p, "=")
		n := byShort[short]
		if n == nil {
			fmt.Fprintf(&b, "    %s (unknown)\n", p)
			continue
		}
		if v, err := time.ParseDuration(strings.TrimSuffix(rest, "(cached=false)")); err == nil {
			measured[n] = v
		}
		fmt.Fprintf(&b, "    %-15s measured %-24s true %-10v", n.addr, rest, trueRTT(n).Round(100*time.Microsecond))
		for _, run := range tr.probes[probeKey{n.addr, url}] {
			ss := make([]string, len(run.samples))
			for i, x := range run.samples {
				ss[i] = x.Round(100 * time.Microsecond).String()
			}
			fmt.Fprintf(&b, " samples %v took %v with %d others", ss, run.took.Round(time.Millisecond), run.concurrent)
		}
		b.WriteString("\n")
	}
	gap := trueRTT(winner) - trueRTT(best)
	mb, askedBest := measured[best]
	mw, askedWinner := measured[winner]
	switch {
	case d.step == "organisation":
		fmt.Fprintf(&b, "  why: the organisation's only node, kept without probing; the optimal node is %v nearer\n", gap.Round(100*time.Microsecond))
	case askedBest && askedWinner:
		fmt.Fprintf(&b, "  why: measurement: the optimal node read %v (error %+v), the winner %v (error %+v), a gap of %v the other way\n",
			mb.Round(100*time.Microsecond), (mb - trueRTT(best)).Round(100*time.Microsecond), mw.Round(100*time.Microsecond),
			(mw - trueRTT(winner)).Round(100*time.Microsecond), gap.Round(100*time.Microsecond))
	case gap <= subnet.DefaultThreshold/5:
		fmt.Fprintf(&b, "  why: the optimal node, %v nearer, was not asked: within the guided search's tolerance of the best answer (10 ms)\n", gap.Round(100*time.Microsecond))
	default:
		fmt.Fprintf(&b, "  why: the optimal node, %v nearer, was not asked: pruned or not promising by the stored probes' predictions\n", gap.Round(100*time.Microsecond))
	}
	return b.String()
}

// errors summarises the probes' errors against the true RTTs: of the
// least of the samples (the probe's answer) and, beside, of their median.
func (tr *trace) errors(truth func(node netip.Addr, url string) (time.Duration, bool)) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var med, mn []float64
	for k, runs := range tr.probes {
		want, ok := truth(k.node, k.url)
		if !ok {
			continue
		}
		for _, r := range runs {
			if r.err != nil {
				continue
			}
			sorted := slices.Sorted(slices.Values(r.samples))
			med = append(med, float64(sorted[len(sorted)/2]-want)/1e6)
			mn = append(mn, float64(r.rtt-want)/1e6)
		}
	}
	f := func(xs []float64) string {
		if len(xs) == 0 {
			return "none"
		}
		slices.Sort(xs)
		var sum, abs float64
		over3, over10 := 0, 0
		for _, x := range xs {
			sum += x
			if x < 0 {
				x = -x
			}
			abs += x
			if x > 3 {
				over3++
			}
			if x > 10 {
				over10++
			}
		}
		n := float64(len(xs))
		return fmt.Sprintf("n=%d mean %+.2f ms, mean |e| %.2f ms, p5 %+.1f p50 %+.1f p95 %+.1f max %+.1f, |e|>3ms %d, >10ms %d",
			len(xs), sum/n, abs/n, xs[int(0.05*n)], xs[int(0.5*n)], xs[int(0.95*n)], xs[len(xs)-1], over3, over10)
	}
	return "least of 3 (the probe): " + f(mn) + "\nmedian of 3: " + f(med)
}
