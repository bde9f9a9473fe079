package delegate

import (
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-net/micra/overlay"
	"github.com/micra-net/micra/subnet"
)

// TestDelegatorClaimCheck: the Delegator checks the winner's probe by
// default, with the witnesses' own measurements (DelegationEnv.MeasuredBy)
// and the coordinator as the trusted witness, and reports what it
// rejected and whom it bars.
func TestDelegatorClaimCheck(t *testing.T) {
	// n1 answers 1 ms but is next to n3 and n4 (5 ms), which are 140 and
	// 150 ms from the subnet; n2 is honest at 30 ms. The paper's search
	// asks the siblings' nodes n1 then n2 in turn.
	rtts := map[peer.ID]int{"n1": 1, "n2": 30, "n3": 140, "n4": 150, "n5": 200}
	between := map[[2]peer.ID]int{{"n3", "n1"}: 5, {"n4", "n1"}: 6, {"n2", "n1"}: 160, {"n5", "n1"}: 100,
		{"n3", "n4"}: 3, {"n2", "n3"}: 150, {"n2", "n4"}: 150, {"n5", "n2"}: 180}
	setup := func() *fakeEnv {
		e := newEnv(t, "127.0.3.0/24", rtts)
		e.delegate(t, "127.0.1.0/24", "n1")
		e.delegate(t, "127.0.2.0/24", "n2")
		e.between, e.self = between, "n5"
		return e
	}
	t.Run("on by default", func(t *testing.T) {
		e := setup()
		n, d := run(t, e, overlay.DelegateRequest{}, Pure(), ClaimCheck(&subnet.ClaimCheck{}))
		if n != "n2" {
			t.Fatalf("chose %s after asking %v; want n2, n1's claim refuted", n, e.asked)
		}
		st := d.Stats()
		if st.ClaimsRejected != 1 || !slices.Equal(st.Barred, []peer.ID{"n1"}) {
			t.Errorf("stats %+v; want 1 claim rejected and n1 barred", st)
		}
		// The search asked n1 and n2; every other probe was a witness's,
		// and each counts.
		if st.Probes != int64(len(e.asked)) || len(e.asked) <= 2 {
			t.Errorf("%d probes counted, %v asked; want every witness counted", st.Probes, e.asked)
		}
		// The next decision does not ask n1 at all.
		e2 := setup()
		if _, err := d.Delegate(t.Context(), overlay.DelegateRequest{Subnet: e2.subnet, Addr: e2.tree.Range(e2.subnet).Start.Next()}, e2); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(e2.asked, "n1") {
			t.Errorf("asked the barred n1: %v", e2.asked)
		}
	})
	t.Run("off", func(t *testing.T) {
		e := setup()
		n, d := run(t, e, overlay.DelegateRequest{}, Pure())
		if n != "n1" || d.Stats().ClaimsRejected != 0 {
			t.Errorf("chose %s, stats %+v; want n1 unchecked", n, d.Stats())
		}
	})
	t.Run("only the witness's own measurement counts", func(t *testing.T) {
		// The claimant's word: n1 announces it is 5 ms from n3 and n4
		// (Between, the overlay's merge, takes it), but they measured
		// nothing of it.
		e := setup()
		e.between = map[[2]peer.ID]int{{"n2", "n3"}: 150, {"n2", "n4"}: 150, {"n3", "n4"}: 3}
		e.announced = map[[2]peer.ID]int{{"n1", "n3"}: 5, {"n1", "n4"}: 6}
		if d, ok := e.Between("n3", "n1"); !ok || d != 5*time.Millisecond {
			t.Fatalf("Between(n3, n1) = %v, %v; the rig should merge n1's word", d, ok)
		}
		n, _ := run(t, e, overlay.DelegateRequest{}, Pure(), ClaimCheck(&subnet.ClaimCheck{}))
		if n != "n1" {
			t.Errorf("chose %s; want n1: nobody measured it", n)
		}
	})
}
