package index

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/pgserver/pgtest"
)

// killBatches are the batches of TestPostgresKilledWriter: 40 of 50
// records, every record in two of them (batch i and batch i+20 hold the
// same pages, the second set one hour newer).
func killBatches() [][]crawl.Record {
	recs := corpus(1000, 11)
	var out [][]crawl.Record
	for i := range 40 {
		b := make([]crawl.Record, 50)
		for j := range b {
			b[j] = recs[(i%20)*50+j]
			if i >= 20 {
				b[j].Time = b[j].Time.Add(time.Hour)
			}
		}
		out = append(out, b)
	}
	return out
}

// TestPostgresKilledWriter: two indexers write into one database, one in
// another process, which is killed with SIGKILL while it stores; its
// restart stores again every batch it had not reported stored (as the
// nodes send again every batch not acknowledged). Nothing is lost or
// doubled: every page is stored once, at its newest version, and the
// index verifies.
func TestPostgresKilledWriter(t *testing.T) {
	if dsn := os.Getenv("MICRA_TEST_KILLED_WRITER"); dsn != "" {
		killedWriter(t, dsn)
		return
	}
	if raceEnabled {
		t.Skip("a second process killed mid-write: the race detector adds nothing the plain run has not (and its child is slow under it)")
	}
	dsn := pgtest.DSN(t)
	p := openTestPostgres(t, dsn, PostgresOptions{}) // creates the schema
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestPostgresKilledWriter$", "-test.v")
	cmd.Env = append(os.Environ(), "MICRA_TEST_KILLED_WRITER="+dsn)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	batches := killBatches()
	// This process writes the batches backwards while the other writes
	// them forwards; after the other reports its fifth batch stored, it
	// is killed.
	done := make(chan error, 1)
	go func() {
		for i := len(batches) - 1; i >= len(batches)/2; i-- {
			if _, err := p.Put(t.Context(), Source{Node: "here", Seq: uint64(i)}, batches[i]); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	stored := map[int]bool{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "stored "); ok {
			i, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("child: %q", line)
			}
			stored[i] = true
			if len(stored) == 5 {
				cmd.Process.Kill()
				break
			}
		}
	}
	cmd.Wait()
	if len(stored) < 5 {
		t.Fatalf("the other writer stored %d batches before it ended", len(stored))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The restarted writer: every batch not reported stored, again.
	q := openTestPostgres(t, dsn, PostgresOptions{})
	for i, b := range batches {
		if !stored[i] {
			if _, err := q.Put(t.Context(), Source{Node: "there", Seq: uint64(i)}, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := q.Verify(t.Context()); err != nil {
		t.Fatal(err)
	}
	st, err := q.readStats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Committed deliveries: the other's reported batches, this process's
	// 20 and the restart's; the batch the kill interrupted is not one.
	delivered := uint64(50 * (len(stored) + 20 + len(batches) - len(stored)))
	if st.Docs != 1000 || st.Added != 1000 || st.Tombstones != 0 || st.Added+st.Replaced+st.Duplicates+st.Stale != delivered {
		t.Fatalf("after the kill and the restart: %+v, want 1000 pages added once and %d deliveries counted once", st, delivered)
	}
	for _, b := range batches[20:] {
		for _, r := range b {
			d, err := q.Get(t.Context(), r.URL)
			if err != nil || !d.Time.Equal(r.Time) {
				t.Fatalf("%s: %v at %v, want the newer version at %v", r.URL, err, d.Time, r.Time)
			}
		}
	}
}

// killedWriter is the other process of TestPostgresKilledWriter: it
// stores the batches forwards, reporting each on stdout once committed,
// until it is killed.
func killedWriter(t *testing.T, dsn string) {
	p := openTestPostgres(t, dsn, PostgresOptions{})
	for i, b := range killBatches() {
		if _, err := p.Put(t.Context(), Source{Node: "there", Seq: uint64(i)}, b); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("stored %d\n", i)
	}
}
