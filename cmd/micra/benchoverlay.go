package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/micra-net/micra/internal/scale"
	"github.com/micra-net/micra/internal/virtual"
)

// benchOverlay runs micra's overlay at each network size in virtual time
// (internal/scale) and prints one row, or with --json an array of objects,
// per size.
func benchOverlay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseBenchOverlay(args, stderr)
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		stop, err := profileCPU(o.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	// A thousand simulated nodes hold several gigabytes live; Go's heap
	// target, twice that, would not fit beside other work. Unless the
	// caller set GOMEMLIMIT, the collector works harder past 60 % of the
	// machine's memory instead.
	if os.Getenv("GOMEMLIMIT") == "" {
		if total, err := memTotal(); err == nil {
			debug.SetMemoryLimit(total / 10 * 6)
		}
	}
	var out []scale.Result
	for _, n := range o.sizes {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cfg := o.cfg
		cfg.Nodes, cfg.Stop = n, ctx.Done()
		if o.memProfile != "" {
			f, err := os.Create(o.memProfile)
			if err != nil {
				return fmt.Errorf("--memprofile: %w", err)
			}
			defer f.Close()
			cfg.HeapProfile = f
		}
		res, err := runOverlaySize(cfg, stderr)
		if err != nil {
			return err
		}
		out = append(out, res)
		if !o.asJSON {
			fmt.Fprintf(stdout, "%5d nodes: converged %.1f s, %.1f messages and %.0f kB per delegation (%.2f probes, %.1f %% optimal, %.2f ms excess per URL), hops p50 %.0f, idle %.1f MB per node per hour (%.1f holding the delegations), %d left: %d lost, %d doubled, %.1f MB heap per node (%.0f s real)\n",
				res.Nodes, res.ConvergeS, res.MessagesPerDelegation, res.BytesPerDelegation/1000, res.ProbesPerDelegation, res.OptimalPct, res.ExcessPerURLMS, res.HopsP50,
				res.IdleBytesPerHour/1e6, res.IdleHeldBytesPerHour/1e6, res.Left, res.Lost, res.Doubled, res.HeapBytesPerNode/(1<<20), res.RealS)
		}
	}
	if o.asJSON {
		return printJSON(stdout, out)
	}
	return nil
}

// overlayFlags are bench overlay's flags: a scale.Config for every size.
type overlayFlags struct {
	cfg                    scale.Config // but Nodes
	sizes                  []int
	asJSON                 bool
	cpuProfile, memProfile string
}

// parseBenchOverlay parses bench overlay's flags.
func parseBenchOverlay(args []string, stderr io.Writer) (overlayFlags, error) {
	var o overlayFlags
	fs := newFlagSet("bench overlay", "[flags]", stderr)
	sizes := fs.String("nodes", "100,300,1000", "network `SIZES`, comma-separated")
	fs.IntVar(&o.cfg.Subnets, "subnets", 10000, "distinct subnets delegated before the churn (a tenth as many after it)")
	fs.Float64Var(&o.cfg.Churn, "churn", 0.1, "share of the nodes that leave without a word, replaced by as many joining")
	fs.Int64Var(&o.cfg.Seed, "seed", 1, "the world's and the run's seed")
	fs.IntVar(&o.cfg.Boot, "boot", 3, "bootstrap peers every node joins through")
	fs.DurationVar(&o.cfg.Liveness, "liveness", 5*time.Minute, "the overlays' liveness timeout (heartbeats at a tenth of it)")
	fs.DurationVar(&o.cfg.Idle, "idle", 15*time.Minute, "virtual time the idle upkeep is measured over (at least an announcement round, 15 min)")
	fs.BoolVar(&o.cfg.QUIC, "quic", false, "run the hosts on go-libp2p's QUIC over a simulated packet network (x/simlibp2p) instead of the in-memory transport: the same protocols at several times the cost")
	fs.BoolVar(&o.cfg.WorldRTTs, "world-rtts", false, "give the coordinators' guided search the world's RTTs between nodes instead of what the overlays measure (the least of each node's pings over the emulated links, and the RTTs neighbours announce): an oracle a real network lacks")
	fs.BoolVar(&o.asJSON, "json", false, "print the results as a JSON array")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to `FILE` (go tool pprof reads it)")
	fs.StringVar(&o.memProfile, "memprofile", "", "write a heap profile, taken after the delegations, to `FILE` (with several sizes, the last size's)")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	var err error
	if o.sizes, err = intList(*sizes); err != nil {
		return o, fmt.Errorf("%w: --nodes: %v", errUsage, err)
	}
	if o.cfg.Subnets < 1 || o.cfg.Churn < 0 || o.cfg.Churn >= 1 || o.cfg.Boot < 1 {
		return o, fmt.Errorf("%w: want --subnets ≥ 1, --churn in [0,1), --boot ≥ 1", errUsage)
	}
	return o, nil
}

// profileCPU starts a CPU profile to path; stop ends it and closes the
// file.
func profileCPU(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile %s: %w", path, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// runOverlaySize runs cfg in virtual time (internal/virtual), its progress
// lines to stderr marked with the size and the real seconds since it
// began, and returns its result with the real time it took.
func runOverlaySize(cfg scale.Config, stderr io.Writer) (scale.Result, error) {
	began := realNow()
	cfg.Log = func(format string, a ...any) {
		fmt.Fprintf(stderr, "[%d nodes, %4.0f s real] "+format+"\n", append([]any{cfg.Nodes, realSince(began)}, a...)...)
	}
	var res scale.Result
	var runErr error
	err := virtual.Run(fmt.Sprintf("Overlay%d", cfg.Nodes), func(t *testing.T) {
		res, runErr = scale.Run(t, cfg)
	})
	if runErr != nil {
		return res, runErr
	}
	if err != nil {
		return res, err
	}
	res.RealS = realSince(began)
	return res, nil
}

// memTotal returns the machine's memory in bytes (Linux's /proc/meminfo).
func memTotal() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no MemTotal in /proc/meminfo")
}

// realNow reads the monotonic clock by a system call: inside the run's
// synctest bubble time.Now is virtual, and the progress lines say how
// much real time each phase took.
func realNow() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// realSince returns the real seconds since began (a realNow reading).
func realSince(began time.Duration) float64 { return (realNow() - began).Seconds() }
