package evaluate

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/micra-net/micra/subnet"
)

func TestTmpCold(t *testing.T) {
	ctx := context.Background()
	for _, noCountry := range []bool{false, true} {
		var all []Outcome
		for seed := int64(1); seed <= 5; seed++ {
			g, info, err := LoadGeo(ctx, GeoConfig{Path: "/work/shared/data/geo/dbip-city-lite-ipv4-2026-06.prefix.csv.gz", Sites: 150, Seed: seed, Nodes: 12})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(seed), 12))
			addrs, err := pickNodes(g, 12, rng)
			if err != nil {
				t.Fatal(err)
			}
			e, err := newEnv(g, info.Tree, addrs, ModelProber{g})
			if err != nil {
				t.Fatal(err)
			}
			e.split = 10 * time.Millisecond
			if noCountry {
				e.cache = &subnet.MemProbeCache{}
			}
			st, _, err := e.strategy(ctx, Guided, 50*time.Millisecond, rng, nil, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range evalSites(g) {
				o, err := e.delegate(ctx, st, s)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, o)
			}
		}
		st := Summarise(all)
		t.Logf("noCountry=%v %+v", noCountry, st)
	}
	_ = os.Getenv
}
