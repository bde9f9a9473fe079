package crawl

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"net/url"
	"sync"
	"sync/atomic"
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
	db      *badger.DB
	mu      sync.Mutex
	bloom   *bloom.BloomFilter
	seq     uint64
	lease   time.Duration
	perHost int
	// leased holds, per host, the queue keys checked out and when each
	// lease expires. It lives in RAM only; the host's stored value marks
	// that it has leases (hostValue), so that opening the frontier after a
	// crash releases them (releaseLeases) instead of letting the host wait
	// for the lease's expiry.
	leased map[string]map[string]time.Time
	// processing holds, per host, the queue keys whose request was fetched
	// and waits for (or is in) processing, with the host's ready time set
	// at the fetch. The entry stays queued until complete removes it with
	// the page's new state and record in one transaction: a crash in
	// between leaves it queued, to be fetched again, not lost. It does not
	// count against perHost.
	processing map[string]map[string]time.Time
	// parked holds the hosts next set aside, ready at a lease's distance,
	// because their only free entries were being processed; complete
	// brings such a host back to the ready time its fetch set. Any other
	// move of the host clears it.
	parked map[string]bool
	// Seek hints. Deleted keys stay in badger's memtables and tables as
	// tombstones until compaction, and an iterator steps over each of them:
	// seeking a host queue or the ready index from its start would cost
	// as much as all the requests and moves ever made. So the frontier
	// remembers lower bounds: no live key of a host's queue sorts before
	// queueLow[host], and no ready-index entry has a time before readyLow.
	// They are lowered whenever a key is written below them and raised to
	// the first live key a scan finds; a failed transaction clears them.
	queueLow map[string][]byte
	readyLow time.Time

	nQueued atomic.Int64 // queue entries, leased ones included
	nHosts  atomic.Int64 // hosts in the ready index
}

// lease is one queued request checked out for fetching. Until finish, putBack
// or the lease's expiry, the request is not handed out again, and a host
// with perHost leases is not handed out at all.
type lease struct {
	host  string
	key   []byte // queue key
	entry entry
}

// openFrontier opens the frontier stored in db. expected sizes the Bloom
// filter, leaseDur bounds how long a checked-out request stays invisible,
// perHost is how many requests of one host may be checked out at once.
// After an unclean shutdown it releases the leases the crash left (see
// releaseLeases): a host that had requests in flight becomes ready at the
// open time plus release(host), its politeness delay (nil: no delay).
func openFrontier(db *badger.DB, expected uint, leaseDur time.Duration, perHost int, release func(host string) time.Duration) (*frontier, error) {
	f := &frontier{db: db, seq: uint64(time.Now().UnixNano()), lease: leaseDur, perHost: max(perHost, 1),
		leased: make(map[string]map[string]time.Time), processing: make(map[string]map[string]time.Time),
		parked: make(map[string]bool), queueLow: make(map[string][]byte)}
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
	leased, err := f.loadSnapshot(expected)
	if err != nil {
		return nil, err
	}
	if err := f.releaseLeases(leased, time.Now(), release); err != nil {
		return nil, err
	}
	return f, nil
}

// loadSnapshot restores the Bloom filter and the queue counters saved by a
// clean close, or rebuilds them with scans. After an unclean shutdown it
// also returns the hosts whose stored value says they had leases (at most
// maxRelease of them).
func (f *frontier) loadSnapshot(expected uint) ([]leasedHost, error) {
	var snap, counts []byte
	clean := false
	err := f.db.Update(func(txn *badger.Txn) error {
		if _, err := txn.Get(keyClean); err == nil {
			clean = true
		}
		if clean {
			if it, err := txn.Get(keyCounts); err == nil {
				counts, _ = it.ValueCopy(nil)
			}
		}
		// Until the next clean close the snapshot is stale: read and
		// delete its chunks in order.
		var chunks [][]byte
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixBloom
		it := txn.NewIterator(opts)
		for it.Seek(prefixBloom); it.ValidForPrefix(prefixBloom); it.Next() {
			if clean {
				v, err := it.Item().ValueCopy(nil)
				if err != nil {
					it.Close()
					return err
				}
				snap = append(snap, v...)
			}
			chunks = append(chunks, it.Item().KeyCopy(nil))
		}
		it.Close()
		for _, k := range append(chunks, keyClean, keyBloom, keyCounts) {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading frontier snapshot: %w", err)
	}
	var leased []leasedHost
	if !clean {
		// Only a crash leaves leases: Close ends every lease before the
		// frontier is closed. The host values are 8 or 16 bytes, so
		// reading them costs little more than the key-only count.
		var h int64
		if leased, h, err = scanHosts(f.db); err != nil {
			return nil, fmt.Errorf("scanning hosts: %w", err)
		}
		f.nHosts.Store(h)
	}
	if !f.restoreCounts(counts) {
		q, err := countKeys(f.db, prefixQueue)
		if err != nil {
			return nil, fmt.Errorf("counting queue: %w", err)
		}
		f.nQueued.Store(q)
	}
	if snap != nil {
		b := &bloom.BloomFilter{}
		if _, err := b.ReadFrom(bytes.NewReader(snap)); err == nil && b.Cap() > 0 {
			f.bloom = b
			return leased, nil
		}
	}
	f.bloom = bloom.NewWithEstimates(expected, 0.01)
	return leased, f.db.View(func(txn *badger.Txn) error {
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

func (f *frontier) restoreCounts(b []byte) bool {
	if b == nil {
		return false
	}
	d := decoder{b: b}
	if d.byte() != 1 {
		return false
	}
	q, h := d.uvarint(), d.uvarint()
	if d.done() != nil || q > math.MaxInt64 || h > math.MaxInt64 {
		return false
	}
	f.nQueued.Store(int64(q))
	f.nHosts.Store(int64(h))
	return true
}

// countKeys counts the keys under prefix with a key-only scan.
func countKeys(db *badger.DB, prefix []byte) (int64, error) {
	var n int64
	err := db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefix
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			n++
		}
		return nil
	})
	return n, err
}

// leasedHost is a host whose stored value says it had requests leased.
type leasedHost struct {
	host        string
	ready, base time.Time
}

// maxRelease bounds the leased hosts one open releases. A crash leaves at
// most about as many as there are fetch workers; past the bound (a
// frontier of another configuration, say) a host waits for its lease's
// expiry, as before leases were marked.
const maxRelease = 1 << 16

// scanHosts counts the hosts of the ready index and returns those whose
// value marks leases in flight.
func scanHosts(db *badger.DB) ([]leasedHost, int64, error) {
	var out []leasedHost
	var n int64
	err := db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixHost
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(prefixHost); it.ValidForPrefix(prefixHost); it.Next() {
			n++
			if len(out) >= maxRelease || it.Item().ValueSize() != hostValueLeased {
				continue
			}
			host, err := decodeHostPart(it.Item().Key()[len(prefixHost):])
			if err != nil {
				continue
			}
			_ = it.Item().Value(func(v []byte) error {
				if ready, base, leased, ok := parseHostValue(v); ok && leased {
					out = append(out, leasedHost{host: host, ready: ready, base: base})
				}
				return nil
			})
		}
		return nil
	})
	return out, n, err
}

// releaseLeases ends the leases a crash left on hosts: the requests they
// had checked out were not fetched (or their fetch was cut when the process
// died), so they are simply queued again. Each host becomes ready at now
// plus delay(host), the politeness owed after its last request, which
// ended at the latest when the process died, before now; or later if its
// ready time without the leases (base) is later. Without this a host
// would wait for its lease's expiry, minutes. It costs one write per
// released host, at open only.
func (f *frontier) releaseLeases(hosts []leasedHost, now time.Time, delay func(string) time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(hosts) > 0 {
		n := min(len(hosts), addChunk)
		err := f.db.Update(func(txn *badger.Txn) error {
			for _, h := range hosts[:n] {
				t := now
				if delay != nil {
					t = t.Add(max(delay(h.host), 0))
				}
				if h.base.After(t) {
					t = h.base
				}
				if err := f.setReady(txn, h.host, h.ready, t); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			f.clearHints()
			return fmt.Errorf("releasing leases: %w", err)
		}
		hosts = hosts[n:]
	}
	return nil
}

// bloomChunk is the size of one stored chunk of the Bloom filter snapshot.
const bloomChunk = 256 << 10

// close saves the Bloom filter and the counters and marks the shutdown
// clean.
func (f *frontier) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var buf bytes.Buffer
	if _, err := f.bloom.WriteTo(&buf); err != nil {
		return err
	}
	var counts encoder
	counts.byte(1)
	counts.uvarint(uint64(max(f.nQueued.Load(), 0)))
	counts.uvarint(uint64(max(f.nHosts.Load(), 0)))
	wb := f.db.NewWriteBatch()
	defer wb.Cancel()
	// In chunks: badger refuses large values in memory mode, and a filter
	// for millions of URLs is megabytes.
	for i, b := uint32(0), buf.Bytes(); len(b) > 0; i++ {
		n := min(len(b), bloomChunk)
		if err := wb.Set(bloomChunkKey(i), b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	if err := wb.Set(keyCounts, counts.b); err != nil {
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

// delta collects counter changes of one transaction; they are applied only
// once it commits.
type delta struct{ queued, hosts int64 }

func (f *frontier) apply(d delta) {
	f.nQueued.Add(d.queued)
	f.nHosts.Add(d.hosts)
}

// ensureReady puts host into the ready index at t unless it is there.
func (f *frontier) ensureReady(txn *badger.Txn, host string, t time.Time, d *delta) error {
	if _, err := txn.Get(hostKey(host)); err == nil {
		return nil
	} else if !errors.Is(err, badger.ErrKeyNotFound) {
		return err
	}
	d.hosts++
	return f.setReady(txn, host, time.Time{}, t)
}

// setReady moves host in the ready index from old (zero: read it) to t.
// Its stored value marks whether the host has leases now (f.leased), with
// base, its ready time without them: t where no lease is behind t.
func (f *frontier) setReady(txn *badger.Txn, host string, old, t time.Time) error {
	return f.setReadyBase(txn, host, old, t, t)
}

// setReadyBase is setReady for a t that a lease sets (its expiry): base is
// the time the host would be ready without its leases.
func (f *frontier) setReadyBase(txn *badger.Txn, host string, old, t, base time.Time) error {
	delete(f.parked, host)
	if t.Before(f.readyLow) {
		f.readyLow = t
	}
	if old.IsZero() {
		if it, err := txn.Get(hostKey(host)); err == nil {
			_ = it.Value(func(v []byte) error {
				old, _, _, _ = parseHostValue(v)
				return nil
			})
		}
	}
	if !old.IsZero() {
		if err := txn.Delete(readyKey(old, host)); err != nil {
			return err
		}
	}
	if err := txn.Set(hostKey(host), hostValue(t, base, len(f.leased[host]) > 0)); err != nil {
		return err
	}
	return txn.Set(readyKey(t, host), nil)
}

// Host values: the ready time (8 bytes), followed while requests of the
// host are leased by base (8 bytes), its ready time without the leases.
// The mark costs no write of its own: every lease and every end of one
// rewrites the host's value anyway, to move it in the ready index.
const (
	hostValueFree   = 8
	hostValueLeased = 16
)

func hostValue(ready, base time.Time, leased bool) []byte {
	b := timeBytes(ready)
	if leased {
		b = append(b, timeBytes(base)...)
	}
	return b
}

// parseHostValue decodes a host value; ok is false for a malformed one.
func parseHostValue(v []byte) (ready, base time.Time, leased, ok bool) {
	if len(v) != hostValueFree && len(v) != hostValueLeased {
		return time.Time{}, time.Time{}, false, false
	}
	ready = time.Unix(0, int64(beUint64(v)&math.MaxInt64))
	if len(v) == hostValueLeased {
		base = time.Unix(0, int64(beUint64(v[8:])&math.MaxInt64))
		return ready, base, true, true
	}
	return ready, ready, false, true
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
	res, err := f.addBatch([]entry{e}, []*url.URL{u}, force, now)
	if err != nil {
		return 0, err
	}
	return res[0], nil
}

// addChunk is how many requests addBatch writes in one transaction: each
// costs at most about 8 KiB of writes (two values holding URLs of at most
// 2 KiB), so a chunk stays well inside badger's transaction limits even
// with small memtables. Larger transactions are split on ErrTxnTooBig.
const addChunk = 64

// addBatch adds the requests es (URLs us) as add does, in few transactions:
// the links of one page cost one commit instead of one each.
func (f *frontier) addBatch(es []entry, us []*url.URL, force bool, now time.Time) ([]addResult, error) {
	res := make([]addResult, len(es))
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 0; i < len(es); {
		n := min(addChunk, len(es)-i)
		for {
			var d delta
			err := f.db.Update(func(txn *badger.Txn) error {
				for j := i; j < i+n; j++ {
					r, err := f.addTxn(txn, es[j], us[j], force, now, &d)
					if err != nil {
						return fmt.Errorf("queueing %s: %w", es[j].URL, err)
					}
					res[j] = r
				}
				return nil
			})
			if err != nil {
				f.clearHints()
			}
			if errors.Is(err, badger.ErrTxnTooBig) && n > 1 {
				n /= 2
				continue
			}
			if err != nil {
				return nil, err
			}
			f.apply(d)
			break
		}
		i += n
	}
	return res, nil
}

// addTxn is add inside txn; the caller holds mu. The URL enters the Bloom
// filter at once so that a duplicate later in the same transaction finds
// it; if the transaction fails, that only adds a false positive.
func (f *frontier) addTxn(txn *badger.Txn, e entry, u *url.URL, force bool, now time.Time, d *delta) (addResult, error) {
	host := urlnorm.HostKey(u)
	h := urlHash(e.URL)
	var st pageState
	found := false
	if f.bloom.Test(h[:]) {
		var err error
		if st, found, err = getState(txn, h); err != nil {
			return 0, err
		}
	} else {
		f.bloom.Add(h[:])
	}
	if found {
		if !e.Revisit && st.Inlinks < math.MaxUint32 {
			st.Inlinks++
		}
		if st.Queued != nil {
			// Re-key when the importance estimate moves the entry ahead
			// in its host's queue, unless it is being fetched right now.
			if err := f.rekey(txn, host, &st, e.Hops); err != nil {
				return 0, err
			}
			return addSeen, txn.Set(urlKey(h), st.encode())
		}
		if !force {
			return addSeen, txn.Set(urlKey(h), st.encode())
		}
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
		return 0, err
	}
	f.lowerQueue(host, k)
	d.queued++
	st.Queued = k
	if err := txn.Set(urlKey(h), st.encode()); err != nil {
		return 0, err
	}
	if err := f.ensureReady(txn, host, now, d); err != nil {
		return 0, err
	}
	if found {
		return addRequeued, nil
	}
	return addQueued, nil
}

// rekey moves the queued entry of st to the priority its hops and in-links
// now give it, if that is ahead of where it is and it is not leased.
func (f *frontier) rekey(txn *badger.Txn, host string, st *pageState, hops int) error {
	_, prio, seq, err := parseQueueKey(st.Queued)
	if err != nil {
		return nil
	}
	np := priority(min(st.Hops, hops), st.Inlinks)
	if np >= prio {
		return nil
	}
	if _, busy := f.leased[host][string(st.Queued)]; busy {
		return nil
	}
	if _, busy := f.processing[host][string(st.Queued)]; busy {
		return nil
	}
	old, err := txn.Get(st.Queued)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil
	} else if err != nil {
		return err
	}
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
	f.lowerQueue(host, nk)
	st.Queued = nk
	return nil
}

// maxNextScan bounds the hosts examined per next call.
const maxNextScan = 64

// next checks out the first request of the host that is ready earliest and
// not yet leased. If no host is ready at now, it returns nil and the time
// the first one will be (zero if the frontier is empty).
func (f *frontier) next(now time.Time) (*lease, time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out *lease
	var wait time.Time
	var d delta
	err := f.db.Update(func(txn *badger.Txn) error {
		for range maxNextScan {
			opts := badger.DefaultIteratorOptions
			opts.PrefetchValues = false
			opts.Prefix = prefixReady
			it := txn.NewIterator(opts)
			it.Seek(f.readySeek())
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
			f.readyLow = t // the first live entry
			if t.After(now) {
				wait = t
				return nil
			}
			held := f.leased[host]
			var expires time.Time
			for k, exp := range held {
				if !exp.After(now) {
					delete(held, k) // expired: the request may go out again
				} else if expires.IsZero() || exp.Before(expires) {
					expires = exp
				}
			}
			key, v, err := f.firstFree(txn, host, held)
			if err != nil {
				return err
			}
			if key == nil {
				if len(held) > 0 {
					// Every queued request of the host is in flight; a
					// finish makes it ready again.
					if err := f.setReadyBase(txn, host, t, expires, t); err != nil {
						return err
					}
					continue
				}
				if len(f.processing[host]) > 0 {
					// Its last requests are being processed: complete
					// makes it ready again; should it never come (a
					// failed transaction), the lease's time brings the
					// host back rather than leaving its entries
					// outside the index.
					if err := f.setReady(txn, host, t, now.Add(f.lease)); err != nil {
						return err
					}
					f.parked[host] = true
					continue
				}
				// Empty host: leave the index.
				delete(f.leased, host)
				delete(f.queueLow, host)
				if err := txn.Delete(rk); err != nil {
					return err
				}
				if err := txn.Delete(hostKey(host)); err != nil {
					return err
				}
				d.hosts--
				continue
			}
			e, err := decodeEntry(v)
			if err != nil {
				// A corrupt entry must not wedge the host.
				if err := txn.Delete(key); err != nil {
					return err
				}
				d.queued--
				continue
			}
			if held == nil {
				held = make(map[string]time.Time, 1)
				f.leased[host] = held
			}
			held[string(key)] = now.Add(f.lease)
			readyAt := now // more requests of this host may go out
			if len(held) >= f.perHost {
				readyAt = now.Add(f.lease)
			}
			out = &lease{host: host, key: key, entry: e}
			return f.setReadyBase(txn, host, t, readyAt, t)
		}
		return nil
	})
	if err != nil {
		f.undoLease(out) // the transaction did not commit
		f.clearHints()
		return nil, time.Time{}, fmt.Errorf("frontier next: %w", err)
	}
	f.apply(d)
	if out == nil && wait.IsZero() {
		// Empty scan budget exhausted or frontier empty; try again soon if
		// anything may remain.
		if f.hasReady() {
			wait = now
		}
	}
	return out, wait, nil
}

// firstFree returns the first entry of host's queue whose key is not in
// held, and moves the host's seek hint to the first live entry.
func (f *frontier) firstFree(txn *badger.Txn, host string, held map[string]time.Time) ([]byte, []byte, error) {
	qp := queuePrefix(host)
	qo := badger.DefaultIteratorOptions
	qo.PrefetchSize = min(len(held)+1, 100)
	qo.Prefix = qp
	it := txn.NewIterator(qo)
	defer it.Close()
	from := qp
	if low, ok := f.queueLow[host]; ok {
		from = low
	}
	first := true
	for it.Seek(from); it.ValidForPrefix(qp); it.Next() {
		item := it.Item()
		if first {
			f.setQueueLow(host, item.KeyCopy(nil))
			first = false
		}
		if _, busy := held[string(item.Key())]; busy {
			continue
		}
		if _, busy := f.processing[host][string(item.Key())]; busy {
			continue
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return nil, nil, err
		}
		return item.KeyCopy(nil), v, nil
	}
	return nil, nil, nil
}

// maxQueueHints bounds queueLow; past it the hints start over, which only
// costs scans from the start of each queue once.
const maxQueueHints = 1 << 16

func (f *frontier) setQueueLow(host string, k []byte) {
	if _, ok := f.queueLow[host]; !ok && len(f.queueLow) >= maxQueueHints {
		clear(f.queueLow)
	}
	f.queueLow[host] = k
}

// lowerQueue notes that key k was written in host's queue.
func (f *frontier) lowerQueue(host string, k []byte) {
	if low, ok := f.queueLow[host]; ok && bytes.Compare(k, low) < 0 {
		f.queueLow[host] = k
	}
}

// readySeek is where a scan of the ready index starts.
func (f *frontier) readySeek() []byte {
	if f.readyLow.IsZero() {
		return prefixReady
	}
	return cat(prefixReady, timeBytes(f.readyLow))
}

// clearHints forgets the seek hints after a failed transaction, whose
// writes may have lowered or raised them wrongly.
func (f *frontier) clearHints() {
	clear(f.queueLow)
	f.readyLow = time.Time{}
}

// undoLease forgets a lease whose transaction did not commit.
func (f *frontier) undoLease(l *lease) {
	if l == nil {
		return
	}
	if held := f.leased[l.host]; held != nil {
		delete(held, string(l.key))
		if len(held) == 0 {
			delete(f.leased, l.host)
		}
	}
}

// hasReady reports whether the ready index has entries; the caller holds mu.
func (f *frontier) hasReady() bool {
	found := false
	_ = f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefixReady
		it := txn.NewIterator(opts)
		defer it.Close()
		it.Seek(f.readySeek())
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
	f.undoLease(l)
	h := urlHash(l.entry.URL)
	var d delta
	err := f.db.Update(func(txn *badger.Txn) error {
		if retry {
			e := l.entry
			e.Attempts++
			if err := txn.Set(l.key, e.encode()); err != nil {
				return err
			}
		} else {
			if _, err := txn.Get(l.key); err == nil {
				d.queued--
			} else if !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
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
		return f.setReady(txn, l.host, time.Time{}, readyAt)
	})
	if err != nil {
		return fmt.Errorf("frontier finish: %w", err)
	}
	f.apply(d)
	return nil
}

// putBack returns a lease unused (per-address politeness said not yet): the
// request stays queued as it was and its host becomes ready at t.
func (f *frontier) putBack(l *lease, t time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.undoLease(l)
	err := f.db.Update(func(txn *badger.Txn) error { return f.setReady(txn, l.host, time.Time{}, t) })
	if err != nil {
		return fmt.Errorf("frontier put back: %w", err)
	}
	return nil
}

// fetched ends the lease of a request whose response goes on to
// processing: the host becomes ready at readyAt, as after finish, but the
// entry stays queued, invisible to next, until complete.
func (f *frontier) fetched(l *lease, readyAt time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.undoLease(l)
	p := f.processing[l.host]
	if p == nil {
		p = make(map[string]time.Time, 1)
		f.processing[l.host] = p
	}
	p[string(l.key)] = readyAt
	err := f.db.Update(func(txn *badger.Txn) error { return f.setReady(txn, l.host, time.Time{}, readyAt) })
	if err != nil {
		f.undoProcessing(l)
		return fmt.Errorf("frontier fetched: %w", err)
	}
	return nil
}

func (f *frontier) undoProcessing(l *lease) {
	if p := f.processing[l.host]; p != nil {
		delete(p, string(l.key))
		if len(p) == 0 {
			delete(f.processing, l.host)
		}
	}
}

// complete ends the processing of a fetched request in one transaction:
// the entry leaves the queue, fn updates the page's state, a revisit is
// scheduled at revisitAt (unless zero) and the encoded record, if any, is
// stored under a pending key, which it returns, until the batch holding it
// is delivered (deletePending). If next parked the host while its request
// was processed, it becomes ready at the time the fetch set.
func (f *frontier) complete(l *lease, fn func(*pageState), revisitAt time.Time, rev *entry, rec []byte) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	readyAt, wasProcessing := f.processing[l.host][string(l.key)]
	f.undoProcessing(l)
	var d delta
	var pending []byte
	err := f.db.Update(func(txn *badger.Txn) error {
		if _, err := txn.Get(l.key); err == nil {
			d.queued--
			if err := txn.Delete(l.key); err != nil {
				return err
			}
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		if err := f.updateTxn(txn, l.entry.URL, fn, revisitAt, rev, l.key); err != nil {
			return err
		}
		if rec != nil {
			f.seq++
			pending = pendingKey(f.seq)
			if err := txn.Set(pending, rec); err != nil {
				return err
			}
		}
		if !wasProcessing || !f.parked[l.host] {
			return nil
		}
		return f.setReady(txn, l.host, time.Time{}, readyAt)
	})
	if err != nil {
		f.clearHints()
		return nil, fmt.Errorf("frontier complete: %w", err)
	}
	f.apply(d)
	return pending, nil
}

// pendingRecords calls fn with each stored pending record, oldest first,
// until fn returns false.
func (f *frontier) pendingRecords(fn func(key, rec []byte) bool) error {
	return f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixPending
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(prefixPending); it.ValidForPrefix(prefixPending); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if !fn(it.Item().KeyCopy(nil), v) {
				return nil
			}
		}
		return nil
	})
}

// deletePending deletes the pending records of a delivered batch.
func (f *frontier) deletePending(keys [][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	wb := f.db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			return err
		}
	}
	return wb.Flush()
}

// counts returns the queued requests and the hosts in the ready index.
func (f *frontier) counts() (queued, hosts int64) {
	return max(f.nQueued.Load(), 0), max(f.nHosts.Load(), 0)
}

// readyHosts counts the hosts whose ready time has come at now, by a
// key-only scan of the ready index that stops at the first future time.
func (f *frontier) readyHosts(now time.Time) (int64, error) {
	var n int64
	limit := timeBytes(now)
	f.mu.Lock()
	from := f.readySeek()
	f.mu.Unlock()
	err := f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = prefixReady
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Seek(from); it.ValidForPrefix(prefixReady); it.Next() {
			k := it.Item().Key()
			if len(k) < len(prefixReady)+8 || bytes.Compare(k[len(prefixReady):len(prefixReady)+8], limit) > 0 {
				break
			}
			n++
		}
		return nil
	})
	return n, err
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
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.db.Update(func(txn *badger.Txn) error { return f.updateTxn(txn, u, fn, revisitAt, e, nil) })
}

// updateTxn is update inside txn; the caller holds mu. A state whose queue
// key is dequeued (non-nil) is no longer queued.
func (f *frontier) updateTxn(txn *badger.Txn, u string, fn func(*pageState), revisitAt time.Time, e *entry, dequeued []byte) error {
	h := urlHash(u)
	st, found, err := getState(txn, h)
	if err != nil {
		return err
	}
	if !found {
		st = pageState{URL: u}
		f.bloom.Add(h[:])
	}
	if dequeued != nil && bytes.Equal(st.Queued, dequeued) {
		st.Queued = nil
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

// known reports whether URL u (normalised) is in the seen set.
func (f *frontier) known(u string) bool {
	if u == "" {
		return false
	}
	h := urlHash(u)
	f.mu.Lock()
	maybe := f.bloom.Test(h[:])
	f.mu.Unlock()
	if !maybe {
		return false
	}
	_, found, err := f.state(u)
	return err == nil && found
}

// markSeen puts the URLs us (normalised) into the seen set without
// queueing them, in one transaction; URLs already seen are left as they
// are. It serves URLs met only as hops of a redirect chain.
func (f *frontier) markSeen(us []string) error {
	if len(us) == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.db.Update(func(txn *badger.Txn) error {
		for _, u := range us {
			h := urlHash(u)
			if f.bloom.Test(h[:]) {
				if _, found, err := getState(txn, h); err != nil || found {
					if err != nil {
						return err
					}
					continue
				}
			}
			f.bloom.Add(h[:])
			st := pageState{URL: u}
			if err := txn.Set(urlKey(h), st.encode()); err != nil {
				return err
			}
		}
		return nil
	})
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
