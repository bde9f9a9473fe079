package index

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/ristretto/v2"

	"github.com/micra-net/micra/crawl"
	"github.com/micra-net/micra/internal/kv"
)

// Index stores keyword records and serves search, profiles and export. It
// is safe for concurrent use: writes (Put, profile changes) are serialised,
// reads run in parallel with them on consistent snapshots.
type Index struct {
	db  *badger.DB
	cfg *config
	log *slog.Logger

	// txnBytes and txnCount are the write budget of one transaction: half
	// of what badger accepts, so that a record never straddles two.
	txnBytes, txnCount int64

	closed    atomic.Bool
	closeOnce sync.Once

	impactQueries, impactFallbacks atomic.Uint64 // see Stats
	packs                          atomic.Uint64 // see Stats

	// runs caches the runs of posting blocks queries read (blocks.go),
	// bounded by their bytes.
	runs *ristretto.Cache[string, *runTable]
	// Work of queries since New, for tests: postings read in order (joins
	// and impact lists), and postings looked up one by one.
	readPostings, lookups atomic.Uint64

	// wmu serialises writers. Writers change the fields below under mu too;
	// while holding wmu they may read them without mu.
	wmu sync.Mutex

	// dfCache holds the stored state of recently written terms, so that
	// updating them needs no read. Guarded by wmu; changed only after a
	// commit, so it never holds an uncommitted value.
	dfCache map[string]termState

	trust trust // the nodes whose records search leaves out (see Distrust)

	mu       sync.RWMutex
	cnt      counts
	profiles map[string]*profileState
	byTerm   map[string][]*profileState // stem → profiles that weigh it
}

// New opens the index kept in db under KeyPrefix, creating it when absent.
// The caller owns db and closes it after Close. New finishes profile
// changes that a crash interrupted (rebuilding or removing their matches)
// before it returns.
func New(db *badger.DB, opts ...Option) (*Index, error) {
	if db == nil {
		return nil, errors.New("index: nil database")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	x := &Index{
		db: db, cfg: cfg, log: cfg.logger,
		txnBytes: db.MaxBatchSize() / 2, txnCount: db.MaxBatchCount() / 2,
		dfCache:  make(map[string]termState),
		profiles: make(map[string]*profileState),
		byTerm:   make(map[string][]*profileState),
	}
	if need := int64(cfg.maxRecordBytes) + 64<<10; need > x.txnBytes {
		return nil, fmt.Errorf("record size cap of %d bytes does not fit a transaction of this database (%d bytes); raise its MemTableSize or lower RecordLimits", cfg.maxRecordBytes, x.txnBytes)
	}
	if x.runs, err = ristretto.NewCache(&ristretto.Config[string, *runTable]{
		NumCounters: max(cfg.runCache/(16<<10), 1000), MaxCost: cfg.runCache, BufferItems: 64, IgnoreInternalCost: true,
	}); err != nil {
		return nil, err
	}
	if err := x.open(); err != nil {
		x.runs.Close()
		return nil, err
	}
	x.log.Info("index opened", "docs", x.cnt.Docs, "terms", x.cnt.Terms, "profiles", len(x.profiles))
	return x, nil
}

// open readies the stored index: its schema, an impact list a crash left
// half built, and the profiles.
func (x *Index) open() error {
	if err := x.openSchema(); err != nil {
		return err
	}
	if err := x.finishBuild(); err != nil {
		return fmt.Errorf("finishing an impact list: %w", err)
	}
	return x.loadProfiles(context.Background())
}

// openSchema checks or writes the schema version, loads the counters and
// migrates an index of an older version.
func (x *Index) openSchema() error {
	var ver uint64
	err := x.db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(keySchema)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(KeyPrefix)})
			it.Rewind()
			used := it.Valid()
			it.Close()
			if used {
				return fmt.Errorf("%w: keys under %s but no schema version", ErrSchema, KeyPrefix)
			}
			ver = schemaVersion
			if err := txn.Set(keySchema, encodeUvarint(schemaVersion)); err != nil {
				return err
			}
			return txn.Set(keyCounts, x.cnt.encode())
		case err != nil:
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if ver, err = decodeUvarint(v); err != nil {
			return fmt.Errorf("%w: %x", ErrSchema, v)
		}
		if ver < 1 || ver > schemaVersion {
			return fmt.Errorf("%w: %d; this micra reads versions 1 to %d (a newer micra wrote the index?)", ErrSchema, ver, schemaVersion)
		}
		if x.cnt, err = readCounts(txn); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	if ver < schemaVersion {
		return x.migrate(ver)
	}
	return nil
}

func readCounts(txn *badger.Txn) (counts, error) {
	item, err := txn.Get(keyCounts)
	if err != nil {
		return counts{}, fmt.Errorf("reading counters: %w", err)
	}
	return kv.Value(item, decodeCounts)
}

// Close stops the index: it waits for a write in progress and makes later
// calls fail with ErrClosed. It does not close the database, which belongs
// to the caller. Safe to call more than once.
func (x *Index) Close() error {
	x.closeOnce.Do(func() {
		x.closed.Store(true)
		x.wmu.Lock()
		defer x.wmu.Unlock() // waits for the writer in progress
		x.runs.Close()
		x.log.Info("index closed")
	})
	return nil
}

func (x *Index) check(ctx context.Context) error {
	if x.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// Stats are the index's counters.
type Stats struct {
	Docs       int64 // searchable pages
	Tombstones int64 // pages removed by a gone record
	Terms      int64 // distinct terms
	Postings   int64 // (term, page) pairs
	Profiles   int   // registered profiles
	Matches    int64 // (profile, page) annotations

	// Outcomes of every record ever given to Put.
	Added, Replaced, Removed, Duplicates, Stale, Rejected uint64
	LastIngest                                            time.Time // zero if none

	// Queries since New that ran on impact lists (threshold.go), and
	// those of them that ran out of budget there and were joined instead.
	ImpactQueries, ImpactFallbacks uint64

	// Packs counts the runs of posting blocks written since New
	// (blocks.go).
	Packs uint64
}

// Stats returns the current counters. It does not touch the database.
func (x *Index) Stats() Stats {
	x.mu.RLock()
	defer x.mu.RUnlock()
	c := x.cnt
	return Stats{
		Docs: c.Docs, Tombstones: c.Tombstones, Terms: c.Terms, Postings: c.Postings,
		Profiles: len(x.profiles), Matches: c.Matches,
		Added: c.Added, Replaced: c.Replaced, Removed: c.Removed, Duplicates: c.Duplicates,
		Stale: c.Stale, Rejected: c.Rejected, LastIngest: c.LastIngest,
		ImpactQueries: x.impactQueries.Load(), ImpactFallbacks: x.impactFallbacks.Load(),
		Packs: x.packs.Load(),
	}
}

// Doc is a stored record with its provenance.
type Doc struct {
	crawl.Record
	Provenance Provenance
	// Distrusted: the node that delivered this version is distrusted
	// (see Distrust), so search leaves the page out.
	Distrusted bool
}

// Distrust makes search leave out every page whose stored version a node
// in nodes (peer ids as in Provenance.Node) delivered — the indexer's
// audits found that node's results fabricated — including versions it
// delivers later. Nothing stored changes: Get and Export still return those
// pages, marked Distrusted, and a page comes back into search when a
// trusted node's newer record replaces the version. Each call replaces the
// set; no arguments trust everyone again. Safe for concurrent use.
func (x *Index) Distrust(nodes ...string) { x.trust.set(nodes) }

// Get returns the stored record of the page whose (requested) URL is url,
// exactly as the crawler normalised it. For a removed page it returns the
// tombstone (URL, time, ChangeGone and provenance) with an error matching
// ErrGone; for an unknown one, ErrNotFound.
func (x *Index) Get(ctx context.Context, url string) (Doc, error) {
	if err := x.check(ctx); err != nil {
		return Doc{}, err
	}
	var d Doc
	id := idOf(url)
	err := x.db.View(func(txn *badger.Txn) error {
		m, ok, err := getMeta(txn, id)
		if err != nil {
			return err
		}
		if !ok || m.URL != url {
			return fmt.Errorf("%w: %s", ErrNotFound, url)
		}
		if m.Gone {
			d = Doc{Record: crawl.Record{URL: m.URL, FinalURL: m.URL, Time: m.Time, Change: crawl.ChangeGone}, Provenance: m.Prov}
			return fmt.Errorf("%w: %s", ErrGone, url)
		}
		r, _, err := getRecord(txn, id)
		if err != nil {
			return err
		}
		d = Doc{Record: r, Provenance: m.Prov, Distrusted: x.trust.distrusts(m.Prov.Node)}
		return nil
	})
	return d, err
}

func getMeta(txn *badger.Txn, id docID) (docMeta, bool, error) {
	m, found, err := kv.Decode(txn, docKey(id), decodeDocMeta)
	return m, found && err == nil, err
}

// getStored reads the stored value of a live page; its Record is a copy.
func getStored(txn *badger.Txn, id docID) (stored, error) {
	item, err := txn.Get(recordKey(id))
	if err != nil {
		return stored{}, fmt.Errorf("reading record: %w", err)
	}
	v, err := item.ValueCopy(nil)
	if err != nil {
		return stored{}, err
	}
	return decodeStored(v)
}

// decodeStoredRecord decodes a stored value's record.
func decodeStoredRecord(v []byte) (crawl.Record, error) {
	s, err := decodeStored(v)
	if err != nil {
		return crawl.Record{}, err
	}
	return crawl.DecodeRecord(s.Record)
}

// getRecord reads and decodes the record of a live page.
func getRecord(txn *badger.Txn, id docID) (crawl.Record, []posting, error) {
	s, err := getStored(txn, id)
	if err != nil {
		return crawl.Record{}, nil, err
	}
	r, err := crawl.DecodeRecord(s.Record)
	if err != nil {
		return crawl.Record{}, nil, fmt.Errorf("%w: %w", ErrCorruptValue, err)
	}
	return r, s.Postings, nil
}

func contentHash(b []byte) uint64 { return xxhash.Sum64(b) }

// topKeywords returns the n heaviest keywords of a record (stored records
// keep them heaviest first).
func topKeywords(r *crawl.Record, n int) []crawl.Keyword {
	return slices.Clone(r.Keywords[:min(n, len(r.Keywords))])
}

// maxHostsScan bounds the page states HostsOf reads.
const maxHostsScan = 1 << 22

// HostsOf returns the hosts of the live pages whose stored version node
// delivered (by Provenance.Node), at most max of them, in no particular
// order. It reads every page's state (up to 4M): for rare questions, such
// as where a node found to fabricate records had been crawling.
func (x *Index) HostsOf(ctx context.Context, node string, max int) ([]string, error) {
	if err := x.check(ctx); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	err := x.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixDoc, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		n := 0
		for it.Rewind(); it.Valid() && len(out) < max && n < maxHostsScan; it.Next() {
			n++
			if n%4096 == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			var m docMeta
			if err := it.Item().Value(func(v []byte) (err error) { m, err = decodeDocMeta(v); return err }); err != nil || m.Gone || m.Prov.Node != node {
				continue
			}
			if u, err := url.Parse(m.URL); err == nil && u.Hostname() != "" && !seen[u.Hostname()] {
				seen[u.Hostname()] = true
				out = append(out, u.Hostname())
			}
		}
		return nil
	})
	return out, err
}
