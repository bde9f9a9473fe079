package index

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/kv"
)

// Profiles follow eRACE's Unified Resource Descriptions: a user's standing
// interest is a set of weighted keywords; every stored record is matched
// against every profile and the result kept as an annotation (eRACE's ACI)
// with the record's relevance to the profile.

// ProfileKeyword is a keyword of a profile as the user typed it, with its
// weight (any positive number; URDs use small integers).
type ProfileKeyword struct {
	Word   string
	Weight float64
}

// ProfileTerm is a term a profile's keywords gave after stop words and
// stemming, with its weight (the largest of the keywords that gave it).
type ProfileTerm struct {
	Term   string
	Weight float64
}

// Profile is a registered interest.
type Profile struct {
	Name      string // 1..64 bytes of letters, digits, '.', '_' and '-', starting with a letter or digit
	Keywords  []ProfileKeyword
	Threshold float64 // least relevance, in [0, 1], for a record to match

	// Set by the index; ignored by PutProfile.
	Terms   []ProfileTerm
	Updated time.Time
	Matches int64 // records matching now
	Pending bool  // the matches are being rebuilt, or a rebuild was interrupted
}

// Match is a record matching a profile.
type Match struct {
	Hit               // Hit.Score is zero
	Relevance float64 // in (0, 1]
	Terms     []string
}

// MatchPage is one page of a profile's matches, most relevant first.
type MatchPage struct {
	Profile string
	Total   int64
	Offset  int
	Limit   int
	Matches []Match
}

// profileState is a profile in memory.
type profileState struct {
	profileValue
	terms   []ProfileTerm // sorted by term
	total   float64       // sum of the term weights
	matches int64
}

// relevance of a record with postings ps (sorted by term) to the profile:
// the profile-weighted mean of the record's normalised weights of the
// profile's terms, Σ W(t)·w(t)/65535 / Σ W(t), in [0, 1].
func (p *profileState) relevance(ps []posting) (float64, []string) {
	var sum float64
	var terms []string
	i := 0
	for _, t := range p.terms {
		for i < len(ps) && ps[i].Term < t.Term {
			i++
		}
		if i < len(ps) && ps[i].Term == t.Term {
			sum += t.Weight * float64(ps[i].Weight) / 65535
			terms = append(terms, t.Term)
		}
	}
	return min(sum/p.total, 1), terms
}

func (p *profileState) matchesRelevance(rel float64) bool { return rel > 0 && rel >= p.Threshold }

func (p *profileState) public() Profile {
	return Profile{
		Name: p.Name, Keywords: slices.Clone(p.Keywords), Threshold: p.Threshold,
		Terms: slices.Clone(p.terms), Updated: p.Updated, Matches: p.matches, Pending: p.State != profileReady,
	}
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > maxNameBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// maxKeywordWeight bounds a profile keyword's weight.
const maxKeywordWeight = 1e6

// newProfileState validates a profile value and derives its terms.
func (c *config) newProfileState(v profileValue) (*profileState, error) {
	bad := func(format string, a ...any) (*profileState, error) {
		return nil, fmt.Errorf("%w: %s", ErrBadProfile, fmt.Sprintf(format, a...))
	}
	if !validName(v.Name) {
		return bad("name %q: use 1..%d letters, digits, '.', '_' or '-'", v.Name, maxNameBytes)
	}
	if math.IsNaN(v.Threshold) || v.Threshold < 0 || v.Threshold > 1 {
		return bad("threshold %v not in [0, 1]", v.Threshold)
	}
	if len(v.Keywords) == 0 || len(v.Keywords) > c.maxProfileKeywords {
		return bad("%d keywords, want 1..%d", len(v.Keywords), c.maxProfileKeywords)
	}
	byTerm := make(map[string]float64)
	for _, k := range v.Keywords {
		if k.Word == "" || len(k.Word) > maxWordBytes {
			return bad("keyword of %d bytes", len(k.Word))
		}
		if !(k.Weight > 0 && k.Weight <= maxKeywordWeight) {
			return bad("keyword %q: weight %v not in (0, %g]", k.Word, k.Weight, float64(maxKeywordWeight))
		}
		ts := crawl.Stems(k.Word, c.maxProfileKeywords+1)
		if len(ts) == 0 {
			return bad("keyword %q has no searchable term (stop words, numbers and one-letter words are not indexed)", k.Word)
		}
		for _, t := range ts {
			byTerm[t] = max(byTerm[t], k.Weight)
		}
	}
	if len(byTerm) > c.maxProfileKeywords {
		return bad("%d distinct terms, want at most %d", len(byTerm), c.maxProfileKeywords)
	}
	p := &profileState{profileValue: v}
	for t, w := range byTerm {
		p.terms = append(p.terms, ProfileTerm{Term: t, Weight: w})
	}
	slices.SortFunc(p.terms, func(a, b ProfileTerm) int { return strings.Compare(a.Term, b.Term) })
	for _, t := range p.terms {
		p.total += t.Weight
	}
	return p, nil
}

// setProfile puts p in memory, replacing any profile of its name. Called
// with wmu held.
func (x *Index) setProfile(p *profileState) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.unsetProfileLocked(p.Name)
	x.profiles[p.Name] = p
	for _, t := range p.terms {
		x.byTerm[t.Term] = append(x.byTerm[t.Term], p)
	}
}

func (x *Index) unsetProfileLocked(name string) {
	old := x.profiles[name]
	if old == nil {
		return
	}
	delete(x.profiles, name)
	for _, t := range old.terms {
		l := slices.DeleteFunc(x.byTerm[t.Term], func(q *profileState) bool { return q == old })
		if len(l) == 0 {
			delete(x.byTerm, t.Term)
		} else {
			x.byTerm[t.Term] = l
		}
	}
}

// annotate updates the profile annotations of a page whose postings change
// from old to new (nil when gone). Called with wmu held.
func (x *Index) annotate(w *wtxn, id docID, old, new []posting) error {
	if len(x.byTerm) == 0 {
		return nil
	}
	var cands []*profileState
	for _, ps := range [2][]posting{old, new} {
		for _, p := range ps {
			for _, pr := range x.byTerm[p.Term] {
				if !slices.Contains(cands, pr) {
					cands = append(cands, pr)
				}
			}
		}
	}
	for _, pr := range cands {
		k := matchKey(pr.Name, id)
		had := false
		item, err := w.txn.Get(k)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			had = true
			var m match
			if err := item.Value(func(v []byte) error { m, err = decodeMatch(v); return err }); err != nil {
				return err
			}
			if err := w.del(matchRankKey(pr.Name, m.Relevance, id)); err != nil {
				return err
			}
		}
		var rel float64
		var terms []string
		if new != nil {
			rel, terms = pr.relevance(new)
		}
		switch keep := pr.matchesRelevance(rel); {
		case keep:
			if err := x.setMatch(w, pr.Name, id, match{Relevance: rel, Terms: terms}); err != nil {
				return err
			}
			if !had {
				w.pc[pr.Name]++
				w.cnt.Matches++
			}
		case had:
			if err := w.del(k); err != nil {
				return err
			}
			w.pc[pr.Name]--
			w.cnt.Matches--
		}
	}
	return nil
}

func (x *Index) setMatch(w *wtxn, name string, id docID, m match) error {
	if err := w.set(matchKey(name, id), m.encode()); err != nil {
		return err
	}
	return w.set(matchRankKey(name, m.Relevance, id), nil)
}

// PutProfile registers a profile or replaces the one of the same name, and
// builds its matches from the records already stored (through the postings
// of its terms) before it returns; until then, and if ctx ends first, the
// profile is Pending and New or the next PutProfile finishes the work.
// Records stored afterwards are matched as they arrive.
func (x *Index) PutProfile(ctx context.Context, p Profile) (Profile, error) {
	if err := x.check(ctx); err != nil {
		return Profile{}, err
	}
	v := profileValue{Name: p.Name, Keywords: slices.Clone(p.Keywords), Threshold: p.Threshold, Updated: x.cfg.now().Round(0), State: profilePending}
	ps, err := x.cfg.newProfileState(v)
	if err != nil {
		return Profile{}, err
	}
	x.wmu.Lock()
	defer x.wmu.Unlock()
	if x.closed.Load() {
		return Profile{}, ErrClosed
	}
	x.mu.RLock()
	_, exists := x.profiles[p.Name]
	n := len(x.profiles)
	x.mu.RUnlock()
	if !exists && n >= x.cfg.maxProfiles {
		return Profile{}, fmt.Errorf("%w: at most %d", ErrTooManyProfiles, x.cfg.maxProfiles)
	}
	if err := x.db.Update(func(txn *badger.Txn) error { return txn.Set(profileKey(v.Name), v.encode()) }); err != nil {
		return Profile{}, err
	}
	x.setProfile(ps)
	if err := x.rebuild(ctx, ps); err != nil {
		return Profile{}, err
	}
	x.log.Info("profile registered", "profile", ps.Name, "terms", len(ps.terms), "matches", ps.matches)
	x.mu.RLock()
	defer x.mu.RUnlock()
	return ps.public(), nil
}

// rebuild replaces the matches of a pending profile by matching it against
// every stored record that has one of its terms, then marks it ready.
// Called with wmu held.
func (x *Index) rebuild(ctx context.Context, p *profileState) error {
	if err := x.clearMatches(ctx, p.Name); err != nil {
		return err
	}
	rtxn := x.db.NewTransaction(false)
	defer rtxn.Discard()
	var cs []*cursor
	defer func() {
		for _, c := range cs {
			c.close()
		}
	}()
	for i, t := range p.terms {
		c, err := x.openTermCursor(rtxn, t.Term, i)
		if err != nil {
			return err
		}
		c.weight = t.Weight
		cs = append(cs, c)
	}
	w := x.newWtxn()
	defer func() { w.txn.Discard() }()
	var terms []string
	steps := 0
	for {
		var lowest *docID
		for _, c := range cs {
			if c.ok && (lowest == nil || bytes.Compare(c.id[:], lowest[:]) < 0) {
				lowest = &c.id
			}
		}
		if lowest == nil {
			break
		}
		id := *lowest
		var sum float64
		terms = terms[:0]
		for _, c := range cs { // in term order, as relevance sums
			if c.ok && c.id == id {
				sum += c.weight * float64(c.w) / 65535
				terms = append(terms, c.term)
				c.next()
				steps++
			}
		}
		if steps&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		rel := min(sum/p.total, 1)
		if !p.matchesRelevance(rel) {
			continue
		}
		if err := x.setMatch(w, p.Name, id, match{Relevance: rel, Terms: slices.Clone(terms)}); err != nil {
			return err
		}
		w.pc[p.Name]++
		w.cnt.Matches++
		if x.full(w) {
			if err := x.commit(w); err != nil {
				return err
			}
			w = x.newWtxn()
		}
	}
	for _, c := range cs {
		if c.err != nil {
			return c.err
		}
	}
	v := p.profileValue
	v.State = profileReady
	if err := w.set(profileKey(p.Name), v.encode()); err != nil {
		return err
	}
	if err := x.commit(w); err != nil {
		return err
	}
	x.mu.Lock()
	p.State = profileReady
	x.mu.Unlock()
	return nil
}

// clearMatches removes every annotation of a profile. Called with wmu held.
func (x *Index) clearMatches(ctx context.Context, name string) error {
	for _, prefix := range [][]byte{matchPrefix(name), matchRankPrefix(name)} {
		isMatch := bytes.HasPrefix(prefix, prefixMatch) && !bytes.HasPrefix(prefix, prefixMatchRank)
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			keys, err := kv.Keys(x.db, prefix, 4096)
			if err != nil || len(keys) == 0 {
				if err != nil {
					return err
				}
				break
			}
			w := x.newWtxn()
			for _, k := range keys {
				if err := w.del(k); err != nil {
					w.txn.Discard()
					return err
				}
			}
			if isMatch {
				w.pc[name] -= int64(len(keys))
				w.cnt.Matches -= int64(len(keys))
			}
			if err := x.commit(w); err != nil {
				return err
			}
		}
	}
	return x.db.Update(func(txn *badger.Txn) error { return txn.Delete(profileCountKey(name)) })
}

// DeleteProfile removes a profile and its matches.
func (x *Index) DeleteProfile(ctx context.Context, name string) error {
	if err := x.check(ctx); err != nil {
		return err
	}
	x.wmu.Lock()
	defer x.wmu.Unlock()
	if x.closed.Load() {
		return ErrClosed
	}
	x.mu.RLock()
	p := x.profiles[name]
	x.mu.RUnlock()
	if p == nil {
		return fmt.Errorf("%w: profile %q", ErrNotFound, name)
	}
	v := p.profileValue
	v.State = profileDeleting
	if err := x.db.Update(func(txn *badger.Txn) error { return txn.Set(profileKey(name), v.encode()) }); err != nil {
		return err
	}
	x.mu.Lock()
	x.unsetProfileLocked(name)
	x.mu.Unlock()
	if err := x.finishDelete(ctx, name); err != nil {
		return err
	}
	x.log.Info("profile deleted", "profile", name)
	return nil
}

func (x *Index) finishDelete(ctx context.Context, name string) error {
	if err := x.clearMatches(ctx, name); err != nil {
		return err
	}
	return x.db.Update(func(txn *badger.Txn) error { return txn.Delete(profileKey(name)) })
}

// loadProfiles reads the profiles and finishes interrupted changes.
func (x *Index) loadProfiles(ctx context.Context) error {
	var vals []profileValue
	err := x.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, Prefix: prefixProfile})
		defer it.Close()
		for it.Seek(prefixProfile); it.ValidForPrefix(prefixProfile); it.Next() {
			v, err := kv.Value(it.Item(), decodeProfileValue)
			if err != nil {
				return fmt.Errorf("profile %q: %w", it.Item().Key(), err)
			}
			vals = append(vals, v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	x.wmu.Lock()
	defer x.wmu.Unlock()
	for _, v := range vals {
		if v.State == profileDeleting {
			x.log.Info("finishing an interrupted profile deletion", "profile", v.Name)
			if err := x.finishDelete(ctx, v.Name); err != nil {
				return err
			}
			continue
		}
		p, err := x.cfg.newProfileState(v)
		if err != nil {
			// Limits may have been lowered since it was registered: keep
			// serving it as it is rather than dropping a user's data.
			p, err = (&config{maxProfileKeywords: ceilProfileKeywords}).newProfileState(v)
			if err != nil {
				return fmt.Errorf("profile %q: %w", v.Name, err)
			}
		}
		x.setProfile(p)
		if v.State == profilePending {
			x.log.Info("rebuilding the matches of a profile", "profile", v.Name)
			if err := x.rebuild(ctx, p); err != nil {
				return err
			}
			continue
		}
		err = x.db.View(func(txn *badger.Txn) error {
			n, err := getUvarint(txn, profileCountKey(v.Name))
			p.matches = int64(n)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Profile returns the profile called name.
func (x *Index) Profile(ctx context.Context, name string) (Profile, error) {
	if err := x.check(ctx); err != nil {
		return Profile{}, err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	p := x.profiles[name]
	if p == nil {
		return Profile{}, fmt.Errorf("%w: profile %q", ErrNotFound, name)
	}
	return p.public(), nil
}

// Profiles returns every profile, sorted by name.
func (x *Index) Profiles(ctx context.Context) ([]Profile, error) {
	if err := x.check(ctx); err != nil {
		return nil, err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]Profile, 0, len(x.profiles))
	for _, p := range x.profiles {
		out = append(out, p.public())
	}
	slices.SortFunc(out, func(a, b Profile) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// matchesWindow checks the bounds of a page of matches and returns its
// limit, the default for 0.
func (c *config) matchesWindow(limit, offset int) (int, error) {
	if limit == 0 {
		limit = c.defaultLimit
	}
	if limit < 0 || limit > c.maxLimit {
		return 0, fmt.Errorf("%w: limit %d not in 1..%d", ErrBadQuery, limit, c.maxLimit)
	}
	if offset < 0 || offset+limit > c.maxWindow {
		return 0, fmt.Errorf("%w: offset %d: only the first %d matches can be paged", ErrBadQuery, offset, c.maxWindow)
	}
	return limit, nil
}

// Matches returns a page of the records matching a profile, most relevant
// first (ties by a fixed per-page order). limit 0 means the default page
// size; limit and offset have the bounds of Search.
func (x *Index) Matches(ctx context.Context, name string, limit, offset int) (*MatchPage, error) {
	if err := x.check(ctx); err != nil {
		return nil, err
	}
	limit, err := x.cfg.matchesWindow(limit, offset)
	if err != nil {
		return nil, err
	}
	x.mu.RLock()
	p := x.profiles[name]
	x.mu.RUnlock()
	if p == nil {
		return nil, fmt.Errorf("%w: profile %q", ErrNotFound, name)
	}
	page := &MatchPage{Profile: name, Offset: offset, Limit: limit, Matches: []Match{}}
	err = x.db.View(func(txn *badger.Txn) error {
		n, err := getUvarint(txn, profileCountKey(name))
		if err != nil {
			return err
		}
		page.Total = int64(n)
		prefix := matchRankPrefix(name)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		skip := offset
		for it.Seek(prefix); it.ValidForPrefix(prefix) && len(page.Matches) < limit; it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			if skip > 0 {
				skip--
				continue
			}
			rel, id, ok := parseMatchRankKey(prefix, it.Item().Key())
			if !ok {
				return fmt.Errorf("%w: match key %q", ErrCorruptValue, it.Item().Key())
			}
			item, err := txn.Get(matchKey(name, id))
			if err != nil {
				return fmt.Errorf("match of %q: %w", name, err)
			}
			var m match
			if err := item.Value(func(v []byte) error { m, err = decodeMatch(v); return err }); err != nil {
				return err
			}
			r, _, err := getRecord(txn, id)
			if err != nil {
				return fmt.Errorf("match of %q: %w", name, err)
			}
			h := newHit(&r, nil, 0, parsedQuery{})
			h.Matched = nil
			page.Matches = append(page.Matches, Match{Hit: h, Relevance: rel, Terms: m.Terms})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}
