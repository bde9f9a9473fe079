// Package resultstest holds what the results and indexer packages' tests
// share: records and batches to send, keys, databases and a log buffer.
package resultstest

import (
	"bytes"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/poll"
	"github.com/micra-net/micra/results/pb"
	"google.golang.org/protobuf/proto"
)

// LogBuf collects log lines at every level, for tests that check what was
// logged.
type LogBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (l *LogBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was logged.
func (l *LogBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Logger logs into l at every level.
func (l *LogBuf) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// MemDB opens an in-memory badger database large enough for the index's
// transactions, closed at cleanup.
func MemDB(t testing.TB) *badger.DB {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil).
		WithMemTableSize(16 << 20).WithNumMemtables(2).WithBlockCacheSize(1 << 20).WithIndexCacheSize(1 << 20).WithNumCompactors(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// DiskDB opens a badger database in dir; the caller closes it.
func DiskDB(t testing.TB, dir string) *badger.DB {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithMemTableSize(8 << 20).WithNumMemtables(2).
		WithBlockCacheSize(1 << 20).WithIndexCacheSize(1 << 20).WithNumCompactors(2).WithValueLogFileSize(16 << 20))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// Key returns a new Ed25519 key.
func Key(t testing.TB) crypto.PrivKey {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	return sk
}

// Records returns n records of site (a host of its own), each with a
// keyword unique to it ("w<site>x<i>") and one all share ("micra").
func Records(site, n int, at time.Time) []crawl.Record {
	recs := make([]crawl.Record, n)
	for i := range recs {
		u := fmt.Sprintf("http://s%d.example/p%d", site, i)
		recs[i] = crawl.Record{URL: u, FinalURL: u, Time: at, Status: 200, Type: crawl.TypeHTML, Change: crawl.ChangeNew,
			Title: fmt.Sprintf("Page %d of site %d", i, site), Size: 4000,
			Keywords: []crawl.Keyword{{Term: fmt.Sprintf("w%dx%d", site, i), Weight: 65535}, {Term: "micra", Weight: 30000}}}
	}
	return recs
}

// Batch encodes recs as the crawler does.
func Batch(t testing.TB, recs []crawl.Record) crawl.Batch {
	t.Helper()
	b, err := crawl.EncodeBatch(recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Reenvelope decodes a result message, lets f change its envelope and
// header (the header's changes are not put back: the signature covers it)
// and encodes the envelope again.
func Reenvelope(t testing.TB, data []byte, f func(e *pb.Envelope, h *pb.Header)) []byte {
	t.Helper()
	var e pb.Envelope
	if err := proto.Unmarshal(data, &e); err != nil {
		t.Fatal(err)
	}
	var h pb.Header
	if err := proto.Unmarshal(e.Header, &h); err != nil {
		t.Fatal(err)
	}
	f(&e, &h)
	b, err := proto.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// WaitFor is p2ptest.WaitFor with a condition: a bound of 90 s (virtual
// inside a synctest bubble), not a timing assertion.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 90*time.Second, what, poll.True(cond))
}
