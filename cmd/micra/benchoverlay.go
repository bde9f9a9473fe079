package main

import (
	"context"
	"encoding/json"
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
	fs := newFlagSet("bench overlay", "[flags]", stderr)
	sizes := fs.String("nodes", "100,300,1000", "network `SIZES`, comma-separated")
	subnets := fs.Int("subnets", 10000, "distinct subnets delegated before the churn (a tenth as many after it)")
	churn := fs.Float64("churn", 0.1, "share of the nodes that leave without a word, replaced by as many joining")
	seed := fs.Int64("seed", 1, "the world's and the run's seed")
	boot := fs.Int("boot", 3, "bootstrap peers every node joins through")
	liveness := fs.Duration("liveness", 5*time.Minute, "the overlays' liveness timeout (heartbeats at a tenth of it)")
	idle := fs.Duration("idle", 15*time.Minute, "virtual time the idle upkeep is measured over (at least an announcement round, 15 min)")
	quic := fs.Bool("quic", false, "run the hosts on go-libp2p's QUIC over a simulated packet network (x/simlibp2p) instead of the in-memory transport: the same protocols at several times the cost")
	asJSON := fs.Bool("json", false, "print the results as a JSON array")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `FILE` (go tool pprof reads it)")
	memProfile := fs.String("memprofile", "", "write a heap profile, taken after the delegations, to `FILE` (with several sizes, the last size's)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile %s: %w", *cpuProfile, err)
		}
		defer pprof.StopCPUProfile()
	}
	ns, err := intList(*sizes)
	if err != nil {
		return fmt.Errorf("%w: --nodes: %v", errUsage, err)
	}
	if *subnets < 1 || *churn < 0 || *churn >= 1 || *boot < 1 {
		return fmt.Errorf("%w: want --subnets ≥ 1, --churn in [0,1), --boot ≥ 1", errUsage)
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
	for _, n := range ns {
		began := realNow()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cfg := scale.Config{Nodes: n, Subnets: *subnets, Churn: *churn, Seed: *seed, Boot: *boot, Liveness: *liveness, Idle: *idle, QUIC: *quic, Stop: ctx.Done(),
			Log: func(format string, a ...any) {
				fmt.Fprintf(stderr, "[%d nodes, %4.0f s real] "+format+"\n", append([]any{n, realSince(began)}, a...)...)
			}}
		if *memProfile != "" {
			f, err := os.Create(*memProfile)
			if err != nil {
				return fmt.Errorf("--memprofile: %w", err)
			}
			defer f.Close()
			cfg.HeapProfile = f
		}
		var res scale.Result
		var runErr error
		err := virtual.Run(fmt.Sprintf("Overlay%d", n), func(t *testing.T) {
			res, runErr = scale.Run(t, cfg)
		})
		if runErr != nil {
			return runErr
		}
		if err != nil {
			return err
		}
		res.RealS = realSince(began)
		out = append(out, res)
		if !*asJSON {
			fmt.Fprintf(stdout, "%5d nodes: converged %.1f s, %.1f messages and %.0f kB per delegation (%.2f probes), hops p50 %.0f, idle %.1f MB per node per hour (%.1f holding the delegations), %d left: %d lost, %d doubled, %.1f MB heap per node (%.0f s real)\n",
				res.Nodes, res.ConvergeS, res.MessagesPerDelegation, res.BytesPerDelegation/1000, res.ProbesPerDelegation, res.HopsP50,
				res.IdleBytesPerHour/1e6, res.IdleHeldBytesPerHour/1e6, res.Left, res.Lost, res.Doubled, res.HeapBytesPerNode/(1<<20), res.RealS)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return nil
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
