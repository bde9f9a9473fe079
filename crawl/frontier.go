package crawl

import (
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
	"github.com/micra-net/micra/internal/kv"
)

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
	nOut    atomic.Int64 // links in the outgoing store
	outCap  int64        // at most this many links in the outgoing store
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
	f := &frontier{db: db, seq: uint64(time.Now().UnixNano()), lease: leaseDur, perHost: max(perHost, 1), outCap: defaultOutgoingCap,
		leased: make(map[string]map[string]time.Time), processing: make(map[string]map[string]time.Time),
		parked: make(map[string]bool), queueLow: make(map[string][]byte)}
	err := db.Update(func(txn *badger.Txn) error { return kv.Schema(txn, keySchema, be64(schemaVersion), ErrSchema) })
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
	if err := f.countOut(); err != nil {
		return nil, fmt.Errorf("counting outgoing links: %w", err)
	}
	return f, nil
}

func getState(txn *badger.Txn, h [16]byte) (pageState, bool, error) {
	st, found, err := kv.Decode(txn, urlKey(h), decodePageState)
	return st, found && err == nil, err
}

// delta collects counter changes of one transaction; they are applied only
// once it commits.
type delta struct{ queued, hosts, out int64 }

func (f *frontier) apply(d delta) {
	f.nQueued.Add(d.queued)
	f.nHosts.Add(d.hosts)
	f.nOut.Add(d.out)
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
			if e.Record {
				if err := f.wantRecord(txn, st.Queued); err != nil {
					return 0, err
				}
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

// wantRecord sets the Record flag of the queued entry at key k (a lease
// already taken keeps its copy without it).
func (f *frontier) wantRecord(txn *badger.Txn, k []byte) error {
	v, found, err := kv.Copy(txn, k)
	if err != nil || !found {
		return err
	}
	e, err := decodeEntry(v)
	if err != nil || e.Record {
		return nil
	}
	e.Record = true
	return txn.Set(k, e.encode())
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
	v, found, err := kv.Copy(txn, st.Queued)
	if err != nil || !found {
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

// complete ends the processing of a fetched request in one transaction:
// the entry leaves the queue, fn updates the page's state, a revisit is
// scheduled at revisitAt (unless zero) and the encoded record, if any, is
// stored under a pending key, which it returns, until the batch holding it
// is delivered (deletePending). If next parked the host while its request
// was processed, it becomes ready at the time the fetch set.
func (f *frontier) complete(l *lease, fn func(*pageState), revisitAt time.Time, rev *entry, rec []byte, out []Outlink) (pending []byte, stored int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	readyAt, wasProcessing := f.processing[l.host][string(l.key)]
	f.undoProcessing(l)
	var d delta
	err = f.db.Update(func(txn *badger.Txn) error {
		d, pending = delta{}, nil
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
		var err error
		if stored, err = f.addOutTxn(txn, out, &d); err != nil {
			return err
		}
		if !wasProcessing || !f.parked[l.host] {
			return nil
		}
		return f.setReady(txn, l.host, time.Time{}, readyAt)
	})
	if err != nil {
		f.clearHints()
		return nil, 0, fmt.Errorf("frontier complete: %w", err)
	}
	f.apply(d)
	return pending, stored, nil
}

// counts returns the queued requests and the hosts in the ready index.
func (f *frontier) counts() (queued, hosts int64) {
	return max(f.nQueued.Load(), 0), max(f.nHosts.Load(), 0)
}

// queued counts queued requests (for tests and stats; it scans keys).
func (f *frontier) queued() (int, error) {
	n, err := countKeys(f.db, prefixQueue)
	return int(n), err
}
