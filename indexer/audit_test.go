package indexer

import (
	"math"
	"testing"
	"time"
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
