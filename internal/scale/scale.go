package scale

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// Config is one run.
type Config struct {
	Nodes   int     // network size
	Subnets int     // distinct subnets delegated before the churn (a tenth as many after it)
	Churn   float64 // share of the nodes that leave without a word, replaced by as many joining
	Seed    int64   // the world (locations, sites), the nodes' keys and every choice
	Boot    int     // bootstrap peers every node joins through (default 3)
	// Liveness is the overlays' liveness timeout, heartbeats at a tenth of
	// it (default micra's, 5 min); Idle the span upkeep is measured over
	// (default 5 min).
	Liveness, Idle time.Duration
	// QUIC runs the hosts on go-libp2p's QUIC over simnet (x/simlibp2p)
	// instead of internal/memnet's in-memory transport: the protocols'
	// figures are the same, the cost to run them several times higher.
	QUIC bool
	// WorldRTTs gives the coordinators' guided search the world's RTTs
	// between nodes (delegate.Between) instead of what the overlay
	// measured (Overlay.Between: each node's least of three pings over
	// the transport's emulated links, and the RTTs neighbours announce):
	// an oracle a real network lacks, for comparison.
	WorldRTTs bool
	// Stop, when closed, ends the run at the next phase or virtual
	// second with ErrStopped (nil: never). It may come from outside the
	// bubble (a command's interrupt).
	Stop <-chan struct{}
	// Log receives progress lines (nil: none).
	Log func(format string, args ...any)
	// HeapProfile, when set, receives a heap profile (pprof's format)
	// taken after the delegations, when the network holds the most.
	HeapProfile io.Writer
}

// Result is what a run measured. Times are virtual.
type Result struct {
	Nodes                 int     `json:"nodes"`
	ConvergeS             float64 `json:"converge_s"`              // from the first join to every node holding its own subnet
	Delegations           int     `json:"delegations"`             // distinct subnets delegated before the churn
	MessagesPerDelegation float64 `json:"messages_per_delegation"` // micra requests and DHT queries per delegation, upkeep subtracted (measureIdle)
	BytesPerDelegation    float64 `json:"bytes_per_delegation"`    // stream bytes per delegation, upkeep subtracted
	ProbesPerDelegation   float64 `json:"probes_per_delegation"`   // probe requests per delegation
	OptimalPct            float64 `json:"optimal_pct"`             // delegations to a node of the lowest RTT to the site among the live ones (evaluate.Outcome.IsOptimal), RTTs from the latency model that answers the probes
	ExcessPerURLMS        float64 `json:"excess_per_url_ms"`       // mean over the delegations of the node's RTT less the lowest, ms, 0 where optimal (evaluate.Summarise)
	HopsP50               float64 `json:"hops_p50"`                // RESOLVE requests and shard-key DHT queries of a resolve that misses every cache, median
	HopsP90               float64 `json:"hops_p90"`
	IdleBytesPerHour      float64 `json:"idle_bytes_per_hour"` // per node, joined and idle (heartbeats, maintenance, announcements, DHT refresh)
	// IdleHeldBytesPerHour is the same after the delegations, every node
	// holding its share of them and the network their shards: a
	// volunteer's upkeep in service.
	IdleHeldBytesPerHour float64 `json:"idle_held_bytes_per_hour"`
	Failed               int     `json:"failed"`             // delegations that returned an error, before the churn
	FailedAfterChurn     int     `json:"failed_after_churn"` // new subnets after the churn whose delegation returned an error
	FailedAgain          int     `json:"failed_again"`       // subnets held before the churn, asked for again after it, whose delegation returned an error
	Left                 int     `json:"left"`               // nodes that left without a word (as many joined)
	Lost                 int     `json:"lost"`               // subnets delegated before the churn not held by a live node after it; a part whose node left, falling back to a live holder of the range around it, is not lost (logged apart)
	Doubled              int     `json:"doubled"`            // subnets held by two live nodes after the churn
	// ClaimsRejected counts the winning probes the coordinators' claim
	// checks rejected over the run: every node here answers its probes
	// truly, so each is a false rejection.
	ClaimsRejected   int64   `json:"claims_rejected"`
	HeapBytesPerNode float64 `json:"heap_bytes_per_node"` // Go heap in use over the nodes, after converging
	RealS            float64 `json:"real_s"`              // real time of the run
}

// Defaults: micra's upkeep timing (overlay's defaults), so that the idle
// figure is a volunteer's.
const (
	defaultLiveness = 5 * time.Minute
	defaultIdle     = 15 * time.Minute // an announcement round
	threshold       = 50 * time.Millisecond
	inFlight        = 64               // delegations at once
	drainLimit      = 30 * time.Minute // the longest wait for the notices of the delegations
	hopSample       = 200              // resolves timed for hops
	// settle is how long the delegation phase goes on after its last
	// answer: past the overlay's coalescing of organisation records (10 s)
	// and a maintenance round (15 s).
	settle = 30 * time.Second
)

// ErrStopped is Run's error when cfg.Stop closed before the run ended.
var ErrStopped = errors.New("scale: stopped")

// Run runs cfg in t's synctest bubble (p2ptest.Bubble or virtual.Run):
// t's cleanups close the network. The phases run in order: the network
// joins and converges, idles, delegates, resolves, churns (when
// cfg.Churn > 0), and the last figures are read.
func Run(t *testing.T, cfg Config) (Result, error) {
	if cfg.Boot <= 0 {
		cfg.Boot = 3
	}
	if cfg.Liveness <= 0 {
		cfg.Liveness = defaultLiveness
	}
	if cfg.Idle <= 0 {
		cfg.Idle = defaultIdle
	}
	if cfg.Nodes < cfg.Boot+2 || cfg.Subnets < 1 || cfg.Churn < 0 || cfg.Churn >= 1 {
		return Result{}, fmt.Errorf("scale: want nodes ≥ %d, subnets ≥ 1, churn in [0,1): %+v", cfg.Boot+2, cfg)
	}
	s, err := newSim(t, cfg)
	if err != nil {
		return Result{}, err
	}
	res, err := s.converge()
	if err != nil {
		return Result{}, err
	}
	// Idle upkeep.
	if s.wait(2 * s.heartbeat) { // past the joins' own traffic
		return res, ErrStopped
	}
	idle, ok := s.measureIdle("idle")
	if !ok {
		return res, ErrStopped
	}
	res.IdleBytesPerHour = idle.bytes / float64(cfg.Nodes)
	todo, later := s.pickSites()
	if err := s.delegations(&res, todo, idle); err != nil {
		return res, err
	}
	if err := s.hops(&res, todo); err != nil {
		return res, err
	}
	if s.extra > 0 {
		if err := s.churn(&res, todo, later); err != nil {
			return res, err
		}
	}
	s.finish(&res)
	return res, nil
}
