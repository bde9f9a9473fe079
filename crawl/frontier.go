package crawl

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"net/url"
	"sync"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/crawl/internal/urlnorm"
)

// entry is a queued crawl request: the value of queue and revisit keys.
type entry struct {
	URL      string
	Parent   string
	Depth    int // remaining link hops to follow from URL
	Hops     int // distance from the request that introduced it
	Owners   []string
	Attempts int
	Revisit  bool
	Added    time.Time
}

func (e *entry) encode() []byte {
	var w encoder
	w.byte(1)
	w.str(e.URL)
	w.str(e.Parent)
	w.uvarint(uint64(max(e.Depth, 0)))
	w.uvarint(uint64(max(e.Hops, 0)))
	w.uvarint(uint64(len(e.Owners)))
	for _, o := range e.Owners {
		w.str(o)
	}
	w.uvarint(uint64(max(e.Attempts, 0)))
	w.bool(e.Revisit)
	w.time(e.Added)
	return w.b
}

func decodeEntry(b []byte) (entry, error) {
	d := decoder{b: b}
	var e entry
	if v := d.byte(); d.err == nil && v != 1 {
		return e, fmt.Errorf("%w: entry version %d", ErrCorruptValue, v)
	}
	e.URL = d.str(urlnorm.MaxLength)
	e.Parent = d.str(urlnorm.MaxLength)
	e.Depth = int(min(d.uvarint(), 1<<16))
	e.Hops = int(min(d.uvarint(), 1<<16))
	if n := d.count(maxRecOwners, 1); n > 0 {
		e.Owners = make([]string, n)
		for i := range e.Owners {
			e.Owners[i] = d.str(256)
		}
	}
	e.Attempts = int(min(d.uvarint(), 1<<16))
	e.Revisit = d.bool()
	e.Added = d.time()
	return e, d.done()
}

// pageState is what the crawler remembers about a URL: the value of
// /crawl/u/<hash>. Its presence is the URL-seen test.
type pageState struct {
	URL          string
	Queued       []byte // queue key while queued, else nil
	Inlinks      uint32
	Depth, Hops  int
	ETag         string
	LastModified string
	BodyHash     uint64
	Digest       uint64 // digest of the last record sent
	Indexed      bool   // a New/Modified record was sent and not withdrawn
	Visits       uint32
	Changes      uint32
	FirstVisit   time.Time
	LastVisit    time.Time
	Interval     time.Duration // current revisit interval
	NextVisit    time.Time     // scheduled revisit, zero if none
}

func (p *pageState) encode() []byte {
	var w encoder
	w.byte(1)
	w.str(p.URL)
	w.bytes(p.Queued)
	w.uvarint(uint64(p.Inlinks))
	w.uvarint(uint64(max(p.Depth, 0)))
	w.uvarint(uint64(max(p.Hops, 0)))
	w.str(p.ETag)
	w.str(p.LastModified)
	w.u64(p.BodyHash)
	w.u64(p.Digest)
	w.bool(p.Indexed)
	w.uvarint(uint64(p.Visits))
	w.uvarint(uint64(p.Changes))
	w.time(p.FirstVisit)
	w.time(p.LastVisit)
	w.dur(p.Interval)
	w.time(p.NextVisit)
	return w.b
}

func decodePageState(b []byte) (pageState, error) {
	d := decoder{b: b}
	var p pageState
	if v := d.byte(); d.err == nil && v != 1 {
		return p, fmt.Errorf("%w: page state version %d", ErrCorruptValue, v)
	}
	p.URL = d.str(urlnorm.MaxLength)
	p.Queued = d.bytes(1024)
	if len(p.Queued) == 0 {
		p.Queued = nil
	}
	p.Inlinks = uint32(min(d.uvarint(), math.MaxUint32))
	p.Depth = int(min(d.uvarint(), 1<<16))
	p.Hops = int(min(d.uvarint(), 1<<16))
	p.ETag = d.str(1024)
	p.LastModified = d.str(256)
	p.BodyHash = d.u64()
	p.Digest = d.u64()
	p.Indexed = d.bool()
	p.Visits = uint32(min(d.uvarint(), math.MaxUint32))
	p.Changes = uint32(min(d.uvarint(), math.MaxUint32))
	p.FirstVisit = d.time()
	p.LastVisit = d.time()
	p.Interval = d.dur()
	p.NextVisit = d.time()
	return p, d.done()
}

func urlHash(u string) [16]byte {
	s := sha256.Sum256([]byte(u))
	return [16]byte(s[:16])
}

// priority orders a host's queue: fewer hops first, then more in-links (a
// link-based importance estimate in the manner of IglooG's backlink count).
// Lower sorts first.
func priority(hops int, inlinks uint32) uint16 {
	h := min(hops, 255)
	imp := min(255, int(32*math.Log2(1+float64(inlinks))))
	return uint16(h)<<8 | uint16(255-imp)
}

// frontier is the persistent crawl frontier: per-host queues in badger, a
// ready index of hosts by the time they may next be fetched, the URL-seen
// set (a Bloom filter in RAM in front of the exact set on disk) and the
// revisit schedule. Methods are safe for concurrent use; writes are
// serialised by mu so badger transactions never conflict.
type frontier struct {
	db    *badger.DB
	mu    sync.Mutex
	bloom *bloom.BloomFilter
	seq   uint64
	lease time.Duration
}

// lease is a host checked out for one fetch. Until done or the lease
// expires, the host is not handed out again.
type lease struct {
	host  string
	key   []byte // queue key
	entry entry
}

func openFrontier(db *badger.DB, expected uint, leaseDur time.Duration) (*frontier, error) {
	f := &frontier{db: db, seq: uint64(time.Now().UnixNano()), lease: leaseDur}
	err := db.Update(func(txn *badger.Txn) error {
		it, err := txn.Get(keySchema)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			return txn.Set(keySchema, be64(schemaVersion))
		case err != nil:
			return err
		}
		v, err := it.ValueCopy(nil)
		if err != nil {
			return err
		}
		if len(v) != 8 || bytes.Compare(v, be64(schemaVersion)) != 0 {
			return fmt.Errorf("%w: %x", ErrSchema, v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("opening frontier: %w", err)
	}
	if err := f.loadBloom(expected); err != nil {
		return nil, err
	}
	return f, nil
}

// loadBloom restores the Bloom filter saved by a clean close, or rebuilds
// it from the seen set with a key-only scan.
func (f *frontier) loadBloom(expected uint) error {
	var snap []byte
	clean := false
	err := f.db.Update(func(txn *badger.Txn) error {
		if _, err := txn.Get(keyClean); err == nil {
			clean = true
		}
		if clean {
			if it, err := txn.Get(keyBloom); err == nil {
				snap, _ = it.ValueCopy(nil)
			}
		}
		// Until the next clean close the snapshot is stale.
		if err := txn.Delete(keyClean); err != nil {
			return err
		}
		return txn.Delete(keyBloom)
	})
	if err != nil {
		return fmt.Errorf("loading bloom filter: %w", err)
	}
	if snap != nil {
		b := &bloom.BloomFilter{}
		if _, err := b.ReadFrom(bytes.NewReader(snap)); err == nil && b.Cap() > 0 {
			f.bloom = b
			return nil
		}
	}
	f.bloom = bloom.NewWithEstimates(expected, 0.01)
	return f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefixURL
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(prefixURL); it.ValidForPrefix(prefixURL); it.Next() {
			f.bloom.Add(it.Item().Key()[len(prefixURL):])
		}
		return nil
	})
}

// close saves the Bloom filter and marks the shutdown clean.
func (f *frontier) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var buf bytes.Buffer
	if _, err := f.bloom.WriteTo(&buf); err != nil {
		return err
	}
	wb := f.db.NewWriteBatch()
	defer wb.Cancel()
	if err := wb.Set(keyBloom, buf.Bytes()); err != nil {
		return err
	}
	if err := wb.Set(keyClean, []byte{1}); err != nil {
		return err
	}
	return wb.Flush()
}

func getState(txn *badger.Txn, h [16]byte) (pageState, bool, error) {
	it, err := txn.Get(urlKey(h))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return pageState{}, false, nil
	}
	if err != nil {
		return pageState{}, false, err
	}
	var st pageState
	err = it.Value(func(v []byte) error {
		var derr error
		st, derr = decodePageState(v)
		return derr
	})
	return st, err == nil, err
}

// ensureReady puts host into the ready index at t unless it is there.
func ensureReady(txn *badger.Txn, host string, t time.Time) error {
	if _, err := txn.Get(hostKey(host)); err == nil {
		return nil
	} else if !errors.Is(err, badger.ErrKeyNotFound) {
		return err
	}
	return setReady(txn, host, time.Time{}, t)
}

// setReady moves host in the ready index from old (zero: read it) to t.
func setReady(txn *badger.Txn, host string, old, t time.Time) error {
	if old.IsZero() {
		if it, err := txn.Get(hostKey(host)); err == nil {
			_ = it.Value(func(v []byte) error {
				if len(v) == 8 {
					old = time.Unix(0, int64(beUint64(v)))
				}
				return nil
			})
		}
	}
	if !old.IsZero() {
		if err := txn.Delete(readyKey(old, host)); err != nil {
			return err
		}
	}
	if err := txn.Set(hostKey(host), timeBytes(t)); err != nil {
		return err
	}
	return txn.Set(readyKey(t, host), nil)
}

func beUint64(b []byte) uint64 {
	var v uint64
	for _, x := range b[:8] {
		v = v<<8 | uint64(x)
	}
	return v
}

// addResult says what add did.
type addResult int

const (
	addQueued   addResult = iota // new URL queued
	addSeen                      // already known; in-link count raised
	addRequeued                  // known, not queued, forced back in
)

// add queues e (its URL normalised) unless the URL was seen. With force, a
// seen URL that is not queued is queued again (runtime requests, revisits).
func (f *frontier) add(e entry, u *url.URL, force bool, now time.Time) (addResult, error) {
	host := urlnorm.HostKey(u)
	h := urlHash(e.URL)
	f.mu.Lock()
	defer f.mu.Unlock()
	maybe := f.bloom.Test(h[:])
	res := addQueued
	err := f.db.Update(func(txn *badger.Txn) error {
		var st pageState
		found := false
		if maybe {
			var err error
			st, found, err = getState(txn, h)
			if err != nil {
				return err
			}
		}
		if found {
			if !e.Revisit && st.Inlinks < math.MaxUint32 {
				st.Inlinks++
			}
			if st.Queued != nil {
				res = addSeen
				// Re-key when the importance estimate moves the entry
				// ahead in its host's queue.
				if _, prio, seq, err := parseQueueKey(st.Queued); err == nil {
					if np := priority(min(st.Hops, e.Hops), st.Inlinks); np < prio {
						old, err := txn.Get(st.Queued)
						if err == nil {
							v, err := old.ValueCopy(nil)
							if err != nil {
								return err
							}
							nk := queueKey(host, np, seq)
							if err := txn.Delete(st.Queued); err != nil {
								return err
							}
							if err := txn.Set(nk, v); err != nil {
								return err
							}
							st.Queued = nk
						}
					}
				}
				return txn.Set(urlKey(h), st.encode())
			}
			if !force {
				res = addSeen
				return txn.Set(urlKey(h), st.encode())
			}
			res = addRequeued
			e.Hops = min(e.Hops, st.Hops)
		} else {
			st = pageState{URL: e.URL, Inlinks: 1, Depth: e.Depth, Hops: e.Hops}
			if e.Parent == "" {
				st.Inlinks = 0
			}
		}
		if e.Depth > st.Depth {
			st.Depth = e.Depth
		}
		f.seq++
		k := queueKey(host, priority(e.Hops, st.Inlinks), f.seq)
		if e.Added.IsZero() {
			e.Added = now
		}
		if err := txn.Set(k, e.encode()); err != nil {
			return err
		}
		st.Queued = k
		if err := txn.Set(urlKey(h), st.encode()); err != nil {
			return err
		}
		return ensureReady(txn, host, now)
	})
	if err != nil {
		return 0, fmt.Errorf("queueing %s: %w", e.URL, err)
	}
	if !maybe {
		f.bloom.Add(h[:])
	}
	return res, nil
}

// maxNextScan bounds the empty hosts cleaned per next call.
const maxNextScan = 64

// next checks out the first request of the host that is ready earliest. If
// no host is ready at now, it returns nil and the time the first one will be
// (zero if the frontier is empty).
func (f *frontier) next(now time.Time) (*lease, time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out *lease
	var wait time.Time
	err := f.db.Update(func(txn *badger.Txn) error {
		for range maxNextScan {
			opts := badger.DefaultIteratorOptions
			opts.PrefetchValues = false
			opts.Prefix = prefixReady
			it := txn.NewIterator(opts)
			it.Seek(prefixReady)
			if !it.ValidForPrefix(prefixReady) {
				it.Close()
				return nil
			}
			rk := it.Item().KeyCopy(nil)
			it.Close()
			t, host, err := parseReadyKey(rk)
			if err != nil {
				return txn.Delete(rk)
			}
			if t.After(now) {
				wait = t
				return nil
			}
			qp := queuePrefix(host)
			qo := badger.DefaultIteratorOptions
			qo.PrefetchSize = 1
			qo.Prefix = qp
			qit := txn.NewIterator(qo)
			qit.Seek(qp)
			if !qit.ValidForPrefix(qp) {
				qit.Close()
				// Empty host: leave the index.
				if err := txn.Delete(rk); err != nil {
					return err
				}
				if err := txn.Delete(hostKey(host)); err != nil {
					return err
				}
				continue
			}
			item := qit.Item()
			key := item.KeyCopy(nil)
			v, err := item.ValueCopy(nil)
			qit.Close()
			if err != nil {
				return err
			}
			e, err := decodeEntry(v)
			if err != nil {
				// A corrupt entry must not wedge the host.
				if err := txn.Delete(key); err != nil {
					return err
				}
				continue
			}
			if err := setReady(txn, host, t, now.Add(f.lease)); err != nil {
				return err
			}
			out = &lease{host: host, key: key, entry: e}
			return nil
		}
		return nil
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("frontier next: %w", err)
	}
	if out == nil && wait.IsZero() {
		// Empty scan budget exhausted or frontier empty; try again soon if
		// anything may remain.
		if f.hasReady() {
			wait = now
		}
	}
	return out, wait, nil
}

func (f *frontier) hasReady() bool {
	found := false
	_ = f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefixReady
		it := txn.NewIterator(opts)
		defer it.Close()
		it.Seek(prefixReady)
		found = it.ValidForPrefix(prefixReady)
		return nil
	})
	return found
}

// finish ends a lease. With retry the entry stays queued with its attempt
// count raised; otherwise it leaves the queue. The host becomes ready at
// readyAt.
func (f *frontier) finish(l *lease, retry bool, readyAt time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := urlHash(l.entry.URL)
	err := f.db.Update(func(txn *badger.Txn) error {
		if retry {
			e := l.entry
			e.Attempts++
			if err := txn.Set(l.key, e.encode()); err != nil {
				return err
			}
		} else {
			if err := txn.Delete(l.key); err != nil {
				return err
			}
			st, found, err := getState(txn, h)
			if err != nil {
				return err
			}
			if found && bytes.Equal(st.Queued, l.key) {
				st.Queued = nil
				if err := txn.Set(urlKey(h), st.encode()); err != nil {
					return err
				}
			}
		}
		return setReady(txn, l.host, time.Time{}, readyAt)
	})
	if err != nil {
		return fmt.Errorf("frontier finish: %w", err)
	}
	return nil
}

// postpone makes host ready at t without touching its queue (per-address
// politeness, robots.txt fetch failures).
func (f *frontier) postpone(host string, t time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.db.Update(func(txn *badger.Txn) error { return setReady(txn, host, time.Time{}, t) })
}

// state returns the stored state of a URL.
func (f *frontier) state(u string) (pageState, bool, error) {
	var st pageState
	var found bool
	err := f.db.View(func(txn *badger.Txn) error {
		var err error
		st, found, err = getState(txn, urlHash(u))
		return err
	})
	return st, found, err
}

// update applies fn to the state of u under the frontier lock and stores
// it. It schedules a revisit at revisitAt unless that is zero.
func (f *frontier) update(u string, fn func(*pageState), revisitAt time.Time, e *entry) error {
	h := urlHash(u)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.db.Update(func(txn *badger.Txn) error {
		st, found, err := getState(txn, h)
		if err != nil {
			return err
		}
		if !found {
			st = pageState{URL: u}
			f.bloom.Add(h[:])
		}
		fn(&st)
		if !revisitAt.IsZero() && e != nil {
			if !st.NextVisit.IsZero() {
				if err := txn.Delete(revisitKey(st.NextVisit, h)); err != nil {
					return err
				}
			}
			st.NextVisit = revisitAt
			if err := txn.Set(revisitKey(revisitAt, h), e.encode()); err != nil {
				return err
			}
		}
		return txn.Set(urlKey(h), st.encode())
	})
}

// dueRevisits moves up to n revisits due at now into their host queues.
func (f *frontier) dueRevisits(now time.Time, n int) (int, error) {
	type due struct {
		key []byte
		e   entry
	}
	var list []due
	err := f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixRevisit
		opts.PrefetchSize = min(n, 100)
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(prefixRevisit); it.ValidForPrefix(prefixRevisit) && len(list) < n; it.Next() {
			t, _, err := parseRevisitKey(it.Item().Key())
			if err == nil && t.After(now) {
				break
			}
			d := due{key: it.Item().KeyCopy(nil)}
			if err == nil {
				v, verr := it.Item().ValueCopy(nil)
				if verr == nil {
					d.e, err = decodeEntry(v)
				} else {
					err = verr
				}
			}
			if err != nil {
				d.e.URL = "" // corrupt: drop
			}
			list = append(list, d)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	moved := 0
	for _, d := range list {
		if d.e.URL != "" {
			if u, err := url.Parse(d.e.URL); err == nil {
				d.e.Revisit = true
				d.e.Attempts = 0
				d.e.Added = now
				if _, err := f.add(d.e, u, true, now); err != nil {
					return moved, err
				}
				moved++
			}
		}
		f.mu.Lock()
		err := f.db.Update(func(txn *badger.Txn) error { return txn.Delete(d.key) })
		f.mu.Unlock()
		if err != nil {
			return moved, err
		}
	}
	return moved, nil
}

// queued counts queued requests (for tests and stats; it scans keys).
func (f *frontier) queued() (int, error) {
	n := 0
	err := f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefixQueue
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(prefixQueue); it.ValidForPrefix(prefixQueue); it.Next() {
			n++
		}
		return nil
	})
	return n, err
}
