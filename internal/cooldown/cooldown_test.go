package cooldown

import (
	"testing"
	"time"
)

func TestTable(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const gap = 10 * time.Minute
	tb := New[string](2)
	if _, ok := tb.Use("a", t0, gap); !ok {
		t.Fatal("a first use refused")
	}
	if left, ok := tb.Use("a", t0.Add(4*time.Minute), gap); ok || left != 6*time.Minute {
		t.Fatalf("a within its gap: %v, %v", left, ok)
	}
	if _, ok := tb.Use("b", t0.Add(time.Minute), gap); !ok {
		t.Fatal("b refused")
	}
	// Full of keys within their gap: a new key waits, the table stays.
	if left, ok := tb.Use("c", t0.Add(2*time.Minute), gap); ok || left != gap || tb.Len() != 2 {
		t.Fatalf("c in a full table: %v, %v, %d keys", left, ok, tb.Len())
	}
	// Past a's gap, a is forgotten to make room.
	if _, ok := tb.Use("c", t0.Add(gap), gap); !ok || tb.Len() != 2 {
		t.Fatalf("c once a's gap is over: %v, %d keys", ok, tb.Len())
	}
	tb.Forget("c")
	if _, ok := tb.Use("c", t0.Add(gap+time.Second), gap); !ok {
		t.Fatal("c after Forget refused")
	}
	if _, ok := tb.Use("a", t0.Add(2*gap), gap); !ok {
		t.Fatal("a past its gap refused")
	}
}
