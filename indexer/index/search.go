package index

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl"
)

// Results is one page of search results.
type Results struct {
	Query    string   // the query text
	Terms    []string // the terms searched, after stop words and stemming
	Excluded []string // the terms excluded
	Words    []string // the words searched, as the query wrote them (for display: Terms are stems)
	Without  []string // the words excluded, as the query wrote them
	Any      bool     // any term matched instead of all
	// Partial says that no page has all of the words of an all-words
	// query, so the hits are the pages with some of them: the more of
	// the words a page has, the higher it ranks (Total counts them).
	Partial bool
	// Split lists the query's words no page has that were searched as two
	// words (split.go); Terms and Words are those searched.
	Split     []Split
	Total     int  // pages matching; an estimate when Estimated
	Estimated bool // the scan budget stopped the query early
	Offset    int
	Limit     int
	Hits      []Hit
}

// Hit is a matching page.
type Hit struct {
	URL      string
	FinalURL string
	Title    string
	Lang     string
	Type     crawl.DocType
	Time     time.Time       // when the page was crawled
	Score    float64         // see the package documentation
	Keywords []crawl.Keyword // the page's heaviest keywords (stems), at most hitKeywords
	Matched  []string        // the query's words the page has, as the query wrote them

	// Types are the rdf:types of the page's items (IRIs), at most 8;
	// Statements a few statements about them (literal or IRI values), at
	// most 8. Both are empty for a page without structured data.
	Types      []string
	Statements []crawl.Statement
}

const hitKeywords = 8

// cursor walks the postings of one term in id order: its loose postings,
// or for a term with a run (blocks.go) the run and the delta merged.
type cursor struct {
	it     *badger.Iterator // the loose postings, or the delta
	prefix []byte
	key    []byte // seek scratch
	term   string
	pos    int // index of the term in its query, for a fixed summing order
	weight float64
	run    *runTable // nil: the term has no run
	ri     int       // the position in run

	// the iterator's entry
	lok    bool
	lid    docID
	lw, la uint16
	lflags uint8
	lgone  bool // a delta entry for a posting removed

	ok    bool
	id    docID
	w     uint16
	flags uint8
	a     uint16 // anchor weight
	err   error
}

// openCursor opens a cursor on term t of state st, reading its run (if it
// has one) through Index.runs.
func (x *Index) openCursor(txn *badger.Txn, t string, st termState, pos int) (*cursor, error) {
	var run *runTable
	if st.gen > 0 {
		var err error
		if run, err = x.table(txn, t, st); err != nil {
			return nil, err
		}
	}
	return newCursor(txn, t, run, pos), nil
}

// openTermCursor reads the state of term t and opens a cursor on it.
func (x *Index) openTermCursor(txn *badger.Txn, t string, pos int) (*cursor, error) {
	st, err := getTermState(txn, t)
	if err != nil {
		return nil, err
	}
	return x.openCursor(txn, t, st, pos)
}

// newCursor opens a cursor on the loose postings of term, or with a run on
// the run and the term's delta.
func newCursor(txn *badger.Txn, term string, run *runTable, pos int) *cursor {
	c := &cursor{term: term, pos: pos, prefix: postingPrefix(term), run: run}
	if run != nil {
		c.prefix = deltaPrefix(term, run.gen)
	}
	c.key = bytes.Clone(c.prefix)
	c.it = txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: c.prefix})
	c.it.Seek(c.prefix)
	c.read()
	c.settle()
	return c
}

// read decodes the iterator's entry.
func (c *cursor) read() {
	if c.err != nil || !c.it.ValidForPrefix(c.prefix) {
		c.lok = false
		return
	}
	item := c.it.Item()
	id, ok := postingID(c.prefix, item.Key())
	if !ok {
		c.lok, c.err = false, fmt.Errorf("%w: posting key %q", ErrCorruptValue, item.Key())
		return
	}
	err := item.Value(func(v []byte) error {
		c.lgone = c.run != nil && len(v) == 0
		if c.lgone {
			return nil
		}
		var err error
		c.lw, c.lflags, c.la, err = decodePostingValue(v)
		return err
	})
	if err != nil {
		c.lok, c.err = false, err
		return
	}
	c.lok, c.lid = true, id
}

// settle makes the cursor's posting the first of the iterator's entry and
// the run's, the delta's where both have the page, past removed ones.
func (c *cursor) settle() {
	for {
		if c.err != nil {
			c.ok = false
			return
		}
		var rid docID
		runOK := c.run != nil && c.ri < c.run.blk.n
		if runOK {
			rid = c.run.blk.id(c.ri)
		}
		switch {
		case !c.lok && !runOK:
			c.ok = false
			return
		case !c.lok || runOK && compareIDs(&rid, &c.lid) < 0:
			c.ok, c.id = true, rid
			c.w, c.flags, c.a = c.run.blk.attr(c.ri)
			return
		case !c.lgone:
			c.ok, c.id, c.w, c.flags, c.a = true, c.lid, c.lw, c.lflags, c.la
			return
		}
		if runOK && rid == c.lid {
			c.ri++
		}
		c.it.Next()
		c.read()
	}
}

func (c *cursor) next() {
	if r := c.run; r != nil && !c.lok && c.err == nil {
		// A run without a delta ahead: its next posting.
		if c.ri++; c.ri < r.blk.n {
			c.id = r.blk.id(c.ri)
			c.w, c.flags, c.a = r.blk.attr(c.ri)
			return
		}
		c.ok = false
		return
	}
	if c.lok && c.lid == c.id {
		c.it.Next()
		c.read()
	}
	if c.run != nil && c.ri < c.run.blk.n && c.run.blk.id(c.ri) == c.id {
		c.ri++
	}
	c.settle()
}

// seekSteps is how many postings seek steps over before it seeks: in a
// dense list the target is usually a few postings ahead, and a step costs a
// small fraction of a badger Seek, which rebuilds its merge iterator.
const seekSteps = 8

// seek moves to the first posting with an id not below id.
func (c *cursor) seek(id docID) {
	if !c.ok || compareIDs(&c.id, &id) >= 0 {
		return
	}
	if c.run != nil {
		c.ri = c.run.blk.search(c.ri, id)
	}
	// The loose postings are stepped over first; a delta is sparse, so
	// its next entry is usually past id.
	for range seekSteps {
		if !c.lok || compareIDs(&c.lid, &id) >= 0 {
			break
		}
		c.it.Next()
		c.read()
	}
	if c.lok && compareIDs(&c.lid, &id) < 0 {
		c.key = append(c.key[:len(c.prefix)], id[:]...)
		c.it.Seek(c.key)
		c.read()
	}
	c.settle()
}

func (c *cursor) close() { c.it.Close() }

// scored is a candidate hit.
type scored struct {
	id    docID
	score float64
}

// better orders hits: higher score first, then lower id.
func better(a, b scored) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return compareIDs(&a.id, &b.id) < 0
}

// topK keeps the k best candidates; its root is the worst kept.
type topK struct {
	k int
	h []scored
}

func (t *topK) Len() int           { return len(t.h) }
func (t *topK) Less(i, j int) bool { return better(t.h[j], t.h[i]) }
func (t *topK) Swap(i, j int)      { t.h[i], t.h[j] = t.h[j], t.h[i] }
func (t *topK) Push(x any)         { t.h = append(t.h, x.(scored)) }
func (t *topK) Pop() any           { x := t.h[len(t.h)-1]; t.h = t.h[:len(t.h)-1]; return x }

func (t *topK) offer(s scored) {
	if len(t.h) < t.k {
		heap.Push(t, s)
	} else if better(s, t.h[0]) {
		t.h[0] = s
		heap.Fix(t, 0)
	}
}

// sorted returns the kept candidates, best first.
func (t *topK) sorted() []scored {
	out := make([]scored, len(t.h))
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(t).(scored)
	}
	return out
}

// idf is the inverse document frequency of a term found in df of n pages
// (the BM25 form, always positive).
func idf(n, df int64) float64 {
	n = max(n, df)
	return math.Log(1 + (float64(n)-float64(df)+0.5)/(float64(df)+0.5))
}

// termScore is what one term found on a page adds to its score: its own
// weight, boosted in the title, and the weight of the anchors of links to
// the page.
func termScore(idf float64, w uint16, flags uint8, anchor uint16, titleBoost float64) float64 {
	s := float64(w) / 65535
	if flags&inTitle != 0 {
		s *= 1 + titleBoost
	}
	return idf * (s + float64(anchor)/65535)
}

// Search runs a query. Terms are ANDed unless q.Any; pages containing an
// excluded term are left out. Hits are ordered by score, then by a fixed
// per-page order, so paging is stable while the index does not change.
// Errors matching ErrBadQuery are the caller's (bad text, limit or offset).
func (x *Index) Search(ctx context.Context, q Query) (*Results, error) {
	if err := x.check(ctx); err != nil {
		return nil, err
	}
	pq, res, err := x.cfg.startSearch(&q)
	if err != nil {
		return nil, err
	}
	err = x.db.View(func(txn *badger.Txn) error {
		pq, splits, err := splitUnknown(pq, func(ts []string) (map[string]int64, error) { return termDFs(txn, ts) })
		if err != nil {
			return err
		}
		res.searchedAs(pq, splits)
		top, err := x.evaluate(ctx, txn, pq, q.Any, 0, q.Offset+q.Limit, res)
		if err != nil {
			return err
		}
		if wantsPartial(pq, q.Any, res) {
			// Nothing has every word: the best partial matches, said so.
			if top, err = x.partial(ctx, txn, pq, q.Offset+q.Limit, res); err != nil {
				return err
			}
			res.Partial = res.Total > 0
		}
		if q.Offset >= len(top) {
			return nil
		}
		for _, s := range top[q.Offset:] {
			r, ps, err := getRecord(txn, s.id)
			if err != nil {
				return fmt.Errorf("hit %x: %w", s.id, err)
			}
			a, err := getAnchorCounts(txn, s.id)
			if err != nil {
				return err
			}
			for t := range a.top() {
				ps = append(ps, posting{Term: t, Flags: inAnchor})
			}
			res.Hits = append(res.Hits, newHit(&r, ps, s.score, pq))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// startSearch checks a query's bounds (setting the default limit) and
// parses it, and returns the results to fill.
func (c *config) startSearch(q *Query) (parsedQuery, *Results, error) {
	if q.Limit == 0 {
		q.Limit = c.defaultLimit
	}
	if q.Limit < 0 || q.Limit > c.maxLimit {
		return parsedQuery{}, nil, fmt.Errorf("%w: limit %d not in 1..%d", ErrBadQuery, q.Limit, c.maxLimit)
	}
	if q.Offset < 0 || q.Offset+q.Limit > c.maxWindow {
		return parsedQuery{}, nil, fmt.Errorf("%w: offset %d: only the first %d results can be paged", ErrBadQuery, q.Offset, c.maxWindow)
	}
	pq, err := parseQuery(q.Text, c.maxQueryBytes, c.maxQueryTerms)
	if err != nil {
		return pq, nil, err
	}
	res := &Results{Query: q.Text, Terms: pq.Terms, Excluded: pq.Excluded, Words: pq.words(pq.Terms), Without: pq.words(pq.Excluded),
		Any: q.Any, Offset: q.Offset, Limit: q.Limit, Hits: []Hit{}}
	return pq, res, nil
}

// wantsPartial reports whether an all-words query that matched nothing is
// answered with partial matches: several words and no statement
// conditions (type:, prop=value), which are filters, not words.
func wantsPartial(pq parsedQuery, any bool, res *Results) bool {
	return res.Total == 0 && !any && len(pq.Terms) > 1 && !slices.ContainsFunc(pq.Terms, isHidden)
}

// newHit makes a hit of a stored record and its postings.
func newHit(r *crawl.Record, ps []posting, score float64, pq parsedQuery) Hit {
	stmts, _ := cleanStatements(r.Statements, ceilStatements)
	return Hit{
		URL: r.URL, FinalURL: r.FinalURL, Title: r.Title, Lang: r.Lang, Type: r.Type,
		Time: r.Time, Score: score, Keywords: topKeywords(r, hitKeywords), Matched: matched(r, ps, pq),
		Types: pageTypes(stmts, hitTypes), Statements: summary(stmts, hitStatements),
	}
}

// matched returns the words of pq whose terms r has: keywords, and the
// terms of ps (title and host stems, statement conditions, the anchors of
// links to the page).
func matched(r *crawl.Record, ps []posting, pq parsedQuery) []string {
	var has []string
	for _, t := range pq.Terms {
		if slices.ContainsFunc(ps, func(p posting) bool { return p.Term == t }) ||
			slices.ContainsFunc(r.Keywords, func(k crawl.Keyword) bool { return k.Term == t }) {
			has = append(has, t)
		}
	}
	return pq.words(has)
}

// partial finds the k best partial matches of an all-words query that no
// page matches whole: the pages with every word that some page has, when
// some of the query's words are on no page (a typing error, a word of
// another site), else the pages with any of the words. Either way a
// page's score is scaled by the square of the share of the query's terms
// it has. The first is a join driven by the rarest word, the second a
// merge of every list.
func (x *Index) partial(ctx context.Context, txn *badger.Txn, pq parsedQuery, k int, res *Results) ([]scored, error) {
	known := pq
	known.Terms = nil
	for _, t := range pq.Terms {
		st, err := getTermState(txn, t)
		if err != nil {
			return nil, err
		}
		if st.df > 0 {
			known.Terms = append(known.Terms, t)
		}
	}
	if len(known.Terms) == 0 {
		return nil, nil
	}
	if len(known.Terms) < len(pq.Terms) {
		top, err := x.evaluate(ctx, txn, known, false, len(pq.Terms), k, res)
		if err != nil || res.Total > 0 {
			return top, err
		}
	}
	if len(known.Terms) <= maxSubsetTerms {
		return x.bySubsets(ctx, txn, known, len(pq.Terms), k, res)
	}
	return x.evaluate(ctx, txn, pq, true, len(pq.Terms), k, res)
}

// qterm is a term of a query with what the index knows of it.
type qterm struct {
	t      string
	pos    int // index of the term in its query
	state  termState
	weight float64 // idf
}

// evaluate finds the k best pages for pq and sets res.Total and
// res.Estimated. With coord > 0, a page's score is scaled by the square of
// the share of coord terms it has. Queries of frequent terms run on their
// impact lists (threshold.go) and estimate their total; the others join
// the terms' posting lists.
func (x *Index) evaluate(ctx context.Context, txn *badger.Txn, pq parsedQuery, any bool, coord, k int, res *Results) ([]scored, error) {
	cnt, err := readCounts(txn)
	if err != nil {
		return nil, err
	}
	qts, err := x.queryTerms(txn, pq, cnt)
	if err != nil || len(qts) == 0 || (!any && len(qts) < len(pq.Terms)) {
		return nil, err // no term, or for all words a term no page has: nothing matches
	}
	ex, err := excludedTerms(txn, pq)
	if err != nil {
		return nil, err
	}
	hidden := x.hiddenIn(txn)
	j := joiner{qts: qts, ex: ex, hidden: hidden, any: any, coord: coord, n: len(pq.Terms)}
	if budget, ok := x.cfg.plan(qts, any, cnt.Docs); ok {
		th := threshold{x: x, ctx: ctx, txn: txn, qts: qts, ex: ex, hidden: hidden, any: any, coord: coord,
			boost: x.cfg.titleBoost, budget: budget, contrib: make([]float64, len(pq.Terms))}
		top, done, err := th.run(k)
		if err != nil {
			return nil, err
		}
		x.impactQueries.Add(1)
		x.readPostings.Add(uint64(th.reads))
		x.lookups.Add(uint64(th.lookups))
		if done {
			if len(qts) == 1 && len(ex) == 0 && hidden == nil {
				res.Total = int(qts[0].state.df) // every page with the word
			} else if th.matches > 0 {
				// Counting every match is the join avoided: the total is
				// estimated from the first part of the id space.
				if _, err := x.join(ctx, txn, j, 0, min(countBudget, x.cfg.maxScan), res); err != nil {
					return nil, err
				}
			}
			res.Total = max(res.Total, th.matches)
			return top, nil
		}
		x.impactFallbacks.Add(1)
	}
	return x.join(ctx, txn, j, k, x.cfg.maxScan, res)
}

// termDFs returns the document frequencies of ts that some page has.
func termDFs(txn *badger.Txn, ts []string) (map[string]int64, error) {
	out := make(map[string]int64, len(ts))
	for _, t := range ts {
		st, err := getTermState(txn, t)
		if err != nil {
			return nil, err
		}
		if st.df > 0 {
			out[t] = int64(st.df)
		}
	}
	return out, nil
}

// excludedTerms returns the excluded terms of pq that some page has.
func excludedTerms(txn *badger.Txn, pq parsedQuery) ([]string, error) {
	var ex []string
	for _, t := range pq.Excluded {
		st, err := getTermState(txn, t)
		if err != nil {
			return nil, err
		}
		if st.df > 0 {
			ex = append(ex, t)
		}
	}
	return ex, nil
}

// queryTerms returns the terms of pq that some page has.
func (x *Index) queryTerms(txn *badger.Txn, pq parsedQuery, cnt counts) ([]qterm, error) {
	var qts []qterm
	for i, t := range pq.Terms {
		st, err := getTermState(txn, t)
		if err != nil {
			return nil, err
		}
		if st.df > 0 {
			qts = append(qts, qterm{t: t, pos: i, state: st, weight: idf(cnt.Docs, int64(st.df))})
		}
	}
	return qts, nil
}

// hiddenIn reports the pages of distrusted nodes, read in txn; nil while no
// node is distrusted.
func (x *Index) hiddenIn(txn *badger.Txn) func(docID) bool {
	if !x.trust.any() {
		return nil
	}
	// One read of the page's state per match.
	return func(id docID) bool {
		m, ok, err := getMeta(txn, id)
		return err == nil && ok && x.trust.distrusts(m.Prov.Node)
	}
}

// joiner is a query for join: its terms, the excluded ones, the pages to
// leave out, and how to combine the terms.
type joiner struct {
	qts    []qterm
	ex     []string
	hidden func(docID) bool // nil: none
	any    bool
	coord  int
	n      int // terms in the query
}

// countBudget is the postings a query on impact lists reads to estimate
// its total.
const countBudget = 1024

// join finds the k best pages of j by joining (all terms) or merging (any
// term) the terms' posting lists in id order, reading at most budget
// postings, and sets res.Total and res.Estimated. With k == 0 it only
// counts.
func (x *Index) join(ctx context.Context, txn *badger.Txn, j joiner, k, budget int, res *Results) ([]scored, error) {
	var cs, ex []*cursor
	defer func() {
		for _, c := range append(cs, ex...) {
			c.close()
		}
	}()
	for _, q := range j.qts {
		c, err := x.openCursor(txn, q.t, q.state, q.pos)
		if err != nil {
			return nil, err
		}
		c.weight = q.weight
		cs = append(cs, c)
	}
	for _, t := range j.ex {
		c, err := x.openTermCursor(txn, t, -1)
		if err != nil {
			return nil, err
		}
		ex = append(ex, c)
	}
	e := evaluator{
		cs: cs, ex: ex, top: &topK{k: k}, budget: budget, hidden: j.hidden, coord: j.coord,
		contrib: make([]float64, j.n), boost: x.cfg.titleBoost, ctx: ctx,
	}
	var err error
	if j.any {
		err = e.union()
	} else {
		err = e.intersect()
	}
	x.readPostings.Add(uint64(e.steps))
	if err != nil {
		return nil, err
	}
	res.Total = e.matches
	if e.stopped {
		// Ids are uniform hashes: the share of the id space read is the
		// share of the matches seen.
		frac := (float64(binary.BigEndian.Uint64(e.at[:8])) + 1) / (1 << 64)
		res.Total = int(math.Round(float64(e.matches) / max(frac, 1e-9)))
		res.Estimated = true
	}
	return e.top.sorted(), nil
}

// evaluator runs one query over its cursors.
type evaluator struct {
	ctx     context.Context
	cs, ex  []*cursor
	top     *topK
	contrib []float64 // per query term, summed in query order
	boost   float64
	hidden  func(docID) bool // pages of distrusted nodes; nil: none
	coord   int              // the query's terms, when scores are scaled by the share a page has; 0: not scaled
	budget  int
	steps   int
	matches int
	stopped bool
	at      docID // the id reached when stopped
}

// step accounts for one cursor move; it reports false when the query must
// stop.
func (e *evaluator) step(at docID) (bool, error) {
	e.steps++
	if e.steps&1023 == 0 {
		if err := e.ctx.Err(); err != nil {
			return false, err
		}
	}
	if e.steps > e.budget {
		e.stopped, e.at = true, at
		return false, nil
	}
	return true, nil
}

func (e *evaluator) cursorErr() error {
	for _, c := range append(e.cs[:len(e.cs):len(e.cs)], e.ex...) {
		if c.err != nil {
			return c.err
		}
	}
	return nil
}

// excluded reports whether a page has an excluded term.
func (e *evaluator) excluded(id docID) bool {
	for _, c := range e.ex {
		c.seek(id)
		if c.ok && c.id == id {
			return true
		}
	}
	return false
}

// emit scores a matching page from the cursors positioned on it.
func (e *evaluator) emit(id docID, on []*cursor) {
	if e.excluded(id) || (e.hidden != nil && e.hidden(id)) {
		return
	}
	e.matches++
	if e.top.k == 0 {
		return // counting only
	}
	clear(e.contrib)
	for _, c := range on {
		e.contrib[c.pos] = termScore(c.weight, c.w, c.flags, c.a, e.boost)
	}
	var s float64
	for _, v := range e.contrib {
		s += v
	}
	if e.coord > 0 {
		share := float64(len(on)) / float64(e.coord)
		s *= share * share
	}
	e.top.offer(scored{id: id, score: s})
}

// intersect is a leapfrog join: the rarest list drives, the others seek.
func (e *evaluator) intersect() error {
	cs := e.cs
	// Rarest first: fewer candidates, longer seeks in the others.
	sortByLength(cs)
	lead := cs[0]
	for lead.ok {
		target := lead.id
		agree := true
		for _, c := range cs[1:] {
			c.seek(target)
			if ok, err := e.step(target); !ok {
				return err
			}
			if !c.ok {
				return e.cursorErr()
			}
			if c.id != target {
				lead.seek(c.id)
				agree = false
				break
			}
		}
		if agree {
			e.emit(target, cs)
			lead.next()
		}
		if ok, err := e.step(target); !ok {
			return err
		}
	}
	return e.cursorErr()
}

// union merges all lists, scoring every page with any term.
func (e *evaluator) union() error {
	on := make([]*cursor, 0, len(e.cs))
	for {
		var lowest *docID
		for _, c := range e.cs {
			if c.ok && (lowest == nil || bytes.Compare(c.id[:], lowest[:]) < 0) {
				lowest = &c.id
			}
		}
		if lowest == nil {
			return e.cursorErr()
		}
		id := *lowest
		on = on[:0]
		for _, c := range e.cs {
			if c.ok && c.id == id {
				on = append(on, c)
			}
		}
		e.emit(id, on)
		for _, c := range on {
			c.next()
			if ok, err := e.step(id); !ok {
				return err
			}
		}
	}
}

// sortByLength orders cursors by their term's document frequency, which
// the idf weight reflects: the highest weight is the rarest term.
func sortByLength(cs []*cursor) {
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].weight > cs[j-1].weight; j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
}
