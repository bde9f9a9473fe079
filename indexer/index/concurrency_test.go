package index

import (
	"sync"
	"testing"
)

// TestConcurrentUse runs writers, readers and profile changes together
// (under -race in CI) and checks the index is consistent afterwards. Two
// nodes deliver the same records: each is stored once.
func TestConcurrentUse(t *testing.T) {
	x := newTestIndex(t, nil)
	recs := corpus(600, 9)
	var wg sync.WaitGroup
	for node := range 2 {
		wg.Go(func() {
			for i := 0; i < len(recs); i += 50 {
				if _, err := x.Put(t.Context(), Source{Node: "node" + itoa(node), Seq: uint64(i)}, recs[i:i+50]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for i := range 40 {
				if _, err := x.Search(t.Context(), Query{Text: "wbx wcx", Any: i%2 == 0}); err != nil {
					t.Error(err)
					return
				}
				_ = x.Stats()
			}
		})
	}
	wg.Go(func() {
		for i := range 5 {
			if _, err := x.PutProfile(t.Context(), Profile{Name: "p", Keywords: []ProfileKeyword{{"wbx", float64(i + 1)}, {"wdx", 1}}}); err != nil {
				t.Error(err)
				return
			}
			if _, err := x.Matches(t.Context(), "p", 10, 0); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	s := x.Stats()
	if s.Docs != int64(len(recs)) || s.Added != uint64(len(recs)) || s.Duplicates != uint64(len(recs)) {
		t.Fatalf("stats %+v", s)
	}
	checkInvariants(t, x)
	m := &model{pages: make(map[string]modelPage)}
	for _, r := range recs {
		m.put(r)
	}
	p, _ := x.Profile(t.Context(), "p")
	ps, _ := x.cfg.newProfileState(profileValue{Name: "p", Keywords: p.Keywords})
	compareMatches(t, x, m, ps)
}
