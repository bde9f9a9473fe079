package crawl

import (
	"testing"
	"time"
)

// TestPutBackWakes: a page put back after its host's robots.txt was
// fetched must wake the dispatcher, which sleeps until the lease expires
// (or revisitPoll) when every queued request is leased. Before the fix a
// new host's first page waited up to 30 s in a quiet crawl (found by
// TestEgressHostile).
func TestPutBackWakes(t *testing.T) {
	f, err := openFrontier(openMemDB(t), 1000, time.Minute, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &Crawler{front: f, wake: make(chan struct{}, 1), log: quietLogger()}
	now := time.Now()
	addURL(t, f, "http://a.test/page", "", 0, now)
	l, _, err := f.next(now)
	if err != nil || l == nil {
		t.Fatalf("next: %v, %v", l, err)
	}
	if _, wait, _ := f.next(now); wait.Sub(now) < 30*time.Second {
		t.Fatalf("with its only request leased the host waits %v, want the lease", wait.Sub(now))
	}
	c.putBack(l, now.Add(10*time.Millisecond))
	select {
	case <-c.wake:
	default:
		t.Fatal("putBack did not wake the dispatcher")
	}
}
