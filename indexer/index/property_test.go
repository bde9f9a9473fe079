package index

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/micra-net/micra/crawl"
)

// model is the brute-force reference: the current version of every page,
// kept by the documented rule (newest time wins, then greatest content
// hash), and scans over it.
type model struct {
	pages map[string]modelPage
}

type modelPage struct {
	rec  crawl.Record
	hash uint64
	gone bool
	ps   []posting
}

func (m *model) put(r crawl.Record) {
	enc := crawl.AppendRecord(nil, &r)
	g := r.Change == crawl.ChangeGone
	if g {
		r = crawl.Record{URL: r.URL, FinalURL: r.FinalURL, Time: r.Time, Status: r.Status, Change: r.Change}
		enc = crawl.AppendRecord(nil, &r)
	}
	h := contentHash(enc)
	if old, ok := m.pages[r.URL]; ok && newer(r.Time, h, old.rec.Time, old.hash) <= 0 {
		return
	}
	p := modelPage{rec: r, hash: h, gone: g}
	if !g {
		p.ps = indexTerms(&r)
	}
	m.pages[r.URL] = p
}

func (m *model) df(t string) (n int64) {
	for _, p := range m.pages {
		if !p.gone && p.find(t) != nil {
			n++
		}
	}
	return n
}

func (p *modelPage) find(t string) *posting {
	for i := range p.ps {
		if p.ps[i].Term == t {
			return &p.ps[i]
		}
	}
	return nil
}

func (m *model) dfs(ts []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, t := range ts {
		if n := m.df(t); n > 0 {
			out[t] = n
		}
	}
	return out, nil
}

func (m *model) live() (n int64) {
	for _, p := range m.pages {
		if !p.gone {
			n++
		}
	}
	return n
}

// search is the brute-force evaluation of a query, with the fallback of
// an all-words query that nothing matches to partial matches (Search).
func (m *model) search(pq parsedQuery, any bool, boost float64) ([]scored, bool) {
	return m.withAnchors().searchOwn(pq, any, boost)
}

// withAnchors returns the model with each live page's postings as search
// sees them: the anchor terms of the live pages' links to it merged in
// (anchors.go).
func (m *model) withAnchors() *model {
	linked := map[docID]anchorCounts{}
	for _, p := range m.pages {
		if p.gone {
			continue
		}
		for id, terms := range anchorsOf(&p.rec) {
			if linked[id] == nil {
				linked[id] = anchorCounts{}
			}
			for t := range terms {
				linked[id][t]++
			}
		}
	}
	out := &model{pages: make(map[string]modelPage, len(m.pages))}
	for u, p := range m.pages {
		if !p.gone {
			p.ps = withAnchors(p.ps, linked[idOf(u)].top())
		}
		out.pages[u] = p
	}
	return out
}

func (m *model) searchOwn(pq parsedQuery, any bool, boost float64) ([]scored, bool) {
	out := m.eval(pq, any, 0, boost)
	if len(out) == 0 && !any && len(pq.Terms) > 1 && !slices.ContainsFunc(pq.Terms, isHidden) {
		known := pq
		known.Terms = nil
		for _, t := range pq.Terms {
			if m.df(t) > 0 {
				known.Terms = append(known.Terms, t)
			}
		}
		if len(known.Terms) > 0 && len(known.Terms) < len(pq.Terms) {
			out = m.eval(known, false, len(pq.Terms), boost)
		}
		if len(out) == 0 && len(known.Terms) > 0 {
			out = m.eval(pq, true, len(pq.Terms), boost)
		}
		return out, len(out) > 0
	}
	return out, false
}

func (m *model) eval(pq parsedQuery, any bool, coord int, boost float64) []scored {
	n := m.live()
	idfs := make([]float64, len(pq.Terms))
	for i, t := range pq.Terms {
		idfs[i] = idf(n, m.df(t))
	}
	var out []scored
	for _, p := range m.pages {
		if p.gone {
			continue
		}
		found, s := 0, 0.0
		for i, t := range pq.Terms {
			if ps := p.find(t); ps != nil {
				found++
				s += termScore(idfs[i], ps.Weight, ps.Flags, ps.Anchor, boost)
			}
		}
		if found == 0 || (!any && found < len(pq.Terms)) {
			continue
		}
		if slices.ContainsFunc(pq.Excluded, func(t string) bool { return p.find(t) != nil }) {
			continue
		}
		if coord > 0 {
			share := float64(found) / float64(coord)
			s *= share * share
		}
		out = append(out, scored{id: idOf(p.rec.URL), score: s})
	}
	slices.SortFunc(out, func(a, b scored) int {
		if better(a, b) {
			return -1
		}
		return 1
	})
	return out
}

// matches is the brute-force evaluation of a profile.
func (m *model) matches(p *profileState) map[string]float64 {
	out := make(map[string]float64)
	for url, pg := range m.pages {
		if pg.gone {
			continue
		}
		var sum float64
		for _, t := range p.terms {
			if ps := pg.find(t.Term); ps != nil {
				sum += t.Weight * float64(ps.Weight) / 65535
			}
		}
		if rel := min(sum/p.total, 1); p.matchesRelevance(rel) {
			out[url] = rel
		}
	}
	return out
}

// fixedVocabulary returns words the stemmer leaves as they are, so that
// they are at once keywords, title words and query words.
func fixedVocabulary(n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		w := "w" + base26(i) + "x"
		if s := crawl.Stems(w, 2); len(s) == 1 && s[0] == w {
			out = append(out, w)
		}
	}
	return out
}

func randomRecord(rng *rand.Rand, vocab []string, url string) crawl.Record {
	at := t0.Add(time.Duration(rng.IntN(6)) * time.Hour) // few distinct times: ties happen
	if rng.IntN(8) == 0 {
		return gone(url, at)
	}
	r := crawl.Record{URL: url, FinalURL: url, Time: at, Status: 200, Type: crawl.TypeHTML, Change: crawl.ChangeModified}
	perm := rng.Perm(len(vocab))[:1+rng.IntN(8)]
	for _, i := range perm {
		r.Keywords = append(r.Keywords, crawl.Keyword{Term: vocab[i], Weight: crawl.QuantiseWeight(uint16(1 + rng.IntN(65535)))}) // as a record carries it
	}
	// Already in stored form: heaviest first, ties by term.
	slices.SortFunc(r.Keywords, func(a, b crawl.Keyword) int {
		return cmp.Or(cmp.Compare(b.Weight, a.Weight), strings.Compare(a.Term, b.Term))
	})
	var title []string
	for range rng.IntN(4) {
		title = append(title, vocab[rng.IntN(len(vocab))])
	}
	r.Title = strings.Join(title, " ")
	// Links to pages of the same space, with anchors of vocabulary words
	// (anchors.go): sometimes to itself, sometimes without anchor text.
	for range rng.IntN(5) {
		l := crawl.Link{URL: fmt.Sprintf("http://h%d.example/p%d", rng.IntN(4), rng.IntN(60))}
		if rng.IntN(6) == 0 {
			l.URL = url
		}
		for range rng.IntN(3) {
			l.Anchor += vocab[rng.IntN(len(vocab))] + " "
		}
		r.Links = append(r.Links, l)
	}
	return r
}

func randomQuery(rng *rand.Rand, vocab []string) Query {
	var words []string
	for range 1 + rng.IntN(3) {
		words = append(words, vocab[rng.IntN(len(vocab))])
	}
	if rng.IntN(4) == 0 {
		words = append(words, "-"+vocab[rng.IntN(len(vocab))])
	}
	if rng.IntN(5) == 0 {
		words = append(words, "the") // a stop word, ignored
	}
	return Query{Text: strings.Join(words, " "), Any: rng.IntN(2) == 0, Limit: 1 + rng.IntN(20), Offset: rng.IntN(5)}
}

// TestIndexAgreesWithBruteForce drives random deliveries (duplicates, stale
// and gone records, content ties) and random profiles, and compares every
// search and profile listing with a scan of the model: on joins, with
// impact lists from a document frequency of 3 on, on the threshold
// algorithm wherever every word of a query has one, with posting blocks of
// four postings from a document frequency of 3 on, packed again every few
// changes, and with both (the threshold algorithm's lookups in the runs).
func TestIndexAgreesWithBruteForce(t *testing.T) {
	seeds := uint64(4)
	if raceEnabled {
		seeds = 1 // every variant once: the race detector's slowdown; the plain run has them all
	}
	for _, v := range []struct {
		name string
		opts []Option
	}{
		{"joins", nil},
		{"impact", []Option{withImpactMin(3)}},
		{"blocks", []Option{withBlocks(3, 4, 2, 4)}},
		{"impact-blocks", []Option{withImpactMin(3), withBlocks(3, 4, 2, 4)}},
	} {
		for seed := range seeds {
			t.Run(fmt.Sprint(v.name, "/seed", seed), func(t *testing.T) {
				storeAgreesWithBruteForce(t, seed, newTestIndex(t, nil, v.opts...))
			})
		}
	}
}

// storeAgreesWithBruteForce is the property test of any store.
func storeAgreesWithBruteForce(t *testing.T, seed uint64, x Store) {
	rng := rand.New(rand.NewPCG(seed, 99))
	vocab := fixedVocabulary(30)
	m := &model{pages: make(map[string]modelPage)}
	var profs []*profileState
	for round := range 12 {
		var batch []crawl.Record
		for range 1 + rng.IntN(40) {
			url := fmt.Sprintf("http://h%d.example/p%d", rng.IntN(4), rng.IntN(60))
			batch = append(batch, randomRecord(rng, vocab, url))
		}
		for i := 0; i < len(batch); i += 7 { // some records twice
			batch = append(batch, batch[i])
		}
		rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		mustPut(t, x, batch...)
		for _, r := range batch {
			m.put(r)
		}
		if round%4 == 1 {
			var kws []ProfileKeyword
			for range 1 + rng.IntN(4) {
				kws = append(kws, ProfileKeyword{Word: vocab[rng.IntN(len(vocab))], Weight: float64(1 + rng.IntN(5))})
			}
			p := Profile{Name: fmt.Sprint("p", round), Keywords: kws, Threshold: rng.Float64() * 0.3}
			if _, err := x.PutProfile(t.Context(), p); err != nil {
				t.Fatal(err)
			}
			ps, _ := x.settings().newProfileState(profileValue{Name: p.Name, Keywords: kws, Threshold: p.Threshold})
			profs = append(profs, ps)
		}
		if err := x.Verify(t.Context()); err != nil {
			t.Fatal(err)
		}
		if s := x.Stats(); s.Docs != m.live() || s.Docs+s.Tombstones != int64(len(m.pages)) {
			t.Fatalf("round %d: stats %+v, model %d live of %d", round, s, m.live(), len(m.pages))
		}
		for range 25 {
			q := randomQuery(rng, vocab)
			compareSearch(t, x, m, q)
		}
		for _, p := range profs {
			compareMatches(t, x, m, p)
		}
	}
}

func compareSearch(t *testing.T, x Store, m *model, q Query) {
	t.Helper()
	res, err := x.Search(t.Context(), q)
	pq, perr := parseQuery(q.Text, 1024, 16)
	if perr != nil {
		if err == nil {
			t.Fatalf("%+v: index accepted a query the parser refuses: %v", q, perr)
		}
		return
	}
	if err != nil {
		t.Fatalf("%+v: %v", q, err)
	}
	pq, _, _ = splitUnknown(pq, m.dfs) // the query rewriting is split_test.go's
	want, partial := m.search(pq, q.Any, x.settings().titleBoost)
	if res.Total != len(want) || res.Estimated || res.Partial != partial {
		t.Fatalf("%+v: total %d (estimated %v, partial %v), brute force %d (partial %v)", q, res.Total, res.Estimated, res.Partial, len(want), partial)
	}
	want = want[min(q.Offset, len(want)):]
	want = want[:min(q.Limit, len(want))]
	if len(res.Hits) != len(want) {
		t.Fatalf("%+v: %d hits, brute force %d", q, len(res.Hits), len(want))
	}
	for i, h := range res.Hits {
		if id := idOf(h.URL); !bytes.Equal(id[:], want[i].id[:]) || h.Score != want[i].score {
			t.Fatalf("%+v: hit %d is %s %v, brute force %x %v", q, i, h.URL, h.Score, want[i].id, want[i].score)
		}
	}
}

func compareMatches(t *testing.T, x Store, m *model, p *profileState) {
	t.Helper()
	want := m.matches(p)
	page, err := x.Matches(t.Context(), p.Name, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != int64(len(want)) || len(page.Matches) != min(len(want), 100) {
		t.Fatalf("profile %s: %d matches (%d listed), brute force %d", p.Name, page.Total, len(page.Matches), len(want))
	}
	for i, mt := range page.Matches {
		if w, ok := want[mt.URL]; !ok || w != mt.Relevance {
			t.Fatalf("profile %s: %s relevance %v, brute force %v (%v)", p.Name, mt.URL, mt.Relevance, w, ok)
		}
		if i > 0 && mt.Relevance > page.Matches[i-1].Relevance {
			t.Fatalf("profile %s: not ordered by relevance", p.Name)
		}
	}
}
