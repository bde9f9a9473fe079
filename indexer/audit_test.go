package indexer

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/indexer/index"
	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/results/resultstest"
)

// TestAuditSampling: the keyed sample takes about the share asked, differs
// between indexers (keys), and the hourly budget holds per node.
func TestAuditSampling(t *testing.T) {
	a, b := mustAuditor(t), mustAuditor(t)
	var digest [32]byte
	const n = 20000
	inA, both := 0, 0
	for i := range n {
		digest[0], digest[1] = byte(i), byte(i>>8)
		sa, sb := a.sampled(digest, i, 0.05), b.sampled(digest, i, 0.05)
		if sa {
			inA++
		}
		if sa && sb {
			both++
		}
	}
	// 5 % of 20,000 = 1,000, σ ≈ 31; two keys agree on about 0.25 %.
	if math.Abs(float64(inA)-1000) > 150 || both > 150 {
		t.Errorf("sampled %d of %d at 5 %% (want ≈ 1000), %d by both keys (want ≈ 50)", inA, n, both)
	}
	now := testNow
	got := 0
	for range 100 {
		if a.spend("node-a", 30, now) {
			got++
		}
	}
	if got != 30 {
		t.Errorf("budget of 30 an hour spent %d times at once", got)
	}
	if !a.spend("node-b", 30, now) {
		t.Errorf("another node's budget was taken")
	}
	if a.spend("node-a", 30, now.Add(time.Minute)) != false || !a.spend("node-a", 30, now.Add(3*time.Minute)) {
		t.Errorf("budget did not refill at 30 an hour")
	}
}

func mustAuditor(t testing.TB) *auditor {
	t.Helper()
	a, err := newAuditor()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestAuditStateSurvivesRestart: an indexer's disputed records
// outlive a restart on the same badger directory. After seven records of
// a node disagreed (five kept, the bound) and another node was flagged,
// the indexer is closed and reopened: the node's next audit carries the
// same priors as before the restart, its five newest disputed records are
// there to tell coordinators of, it is still a suspect (every record of it
// audited), the flag stands, and a flagged node's evidence survives too.
func TestAuditStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	open := func() (*Indexer, func()) {
		db := resultstest.DiskDB(t, dir)
		x, err := index.New(db, index.Logger(quiet()), index.Clock(func() time.Time { return testNow }))
		if err != nil {
			t.Fatal(err)
		}
		ix, err := newIndexer(x, db, sid(t), Logger(quiet()), Clock(func() time.Time { return testNow }))
		if err != nil {
			t.Fatal(err)
		}
		return ix, func() {
			_ = ix.Close()
			x.Close()
			if err := db.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	id := func() peer.ID {
		p, _ := peer.IDFromPrivateKey(resultstest.Key(t))
		return p
	}
	fab, flagged, coord := id(), id(), id()
	job := func(node peer.ID, k int) auditJob {
		url := fmt.Sprintf("http://h%d.test/p", k)
		return auditJob{node: node, url: url, host: fmt.Sprintf("h%d.test", k), evidence: []byte("signed batch of " + url)}
	}
	disagree := func(ix *Indexer, j auditJob, convicted bool) {
		ix.noteVerdict(j, overlay.AuditVerdict{Result: overlay.AuditDisagree, Node: j.node, Coordinator: coord, Convicted: convicted}, nil)
	}

	ix, closeIx := open()
	for k := range 7 {
		disagree(ix, job(fab, k), false)
	}
	disagree(ix, job(flagged, 100), true)
	before := ix.aud.priors(job(fab, 99))
	closeIx()

	ix, closeIx = open()
	defer closeIx()
	after := ix.aud.priors(job(fab, 99))
	if len(after) != maxPriors || !slices.EqualFunc(before, after, func(a, b overlay.AuditPrior) bool {
		return a.URL == b.URL && string(a.Evidence) == string(b.Evidence)
	}) {
		t.Fatalf("priors of the next audit after the restart: %v, before it: %v", urls(after), urls(before))
	}
	ix.aud.mu.Lock()
	kept, suspect := urls(ix.aud.disputes[fab]), ix.aud.suspect[fab]
	fl := urls(ix.aud.disputes[flagged])
	ix.aud.mu.Unlock()
	if want := []string{"http://h2.test/p", "http://h3.test/p", "http://h4.test/p", "http://h5.test/p", "http://h6.test/p"}; !slices.Equal(kept, want) {
		t.Errorf("disputed records after the restart: %v, want %v", kept, want)
	}
	if !suspect || !slices.Equal(fl, []string{"http://h100.test/p"}) {
		t.Errorf("after the restart: suspect %v, the flagged node's disputed records %v", suspect, fl)
	}
	for _, na := range ix.Audited() {
		if (na.Node == flagged) != na.Flagged {
			t.Errorf("after the restart: %+v", na)
		}
		if want := []string{"h2.test", "h3.test", "h4.test", "h5.test", "h6.test"}; na.Node == fab && !slices.Equal(na.DisputedHosts, want) {
			t.Errorf("the node's disputed hosts after the restart: %v, want %v", na.DisputedHosts, want)
		}
	}
}

func urls(ps []overlay.AuditPrior) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.URL)
	}
	return out
}
