// Opening the frontier after a stop or a crash: the Bloom filter's snapshot,
// the counts, and the release of leases a crash left.

package crawl

import (
	"bytes"
	"fmt"
	"math"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/dgraph-io/badger/v4"
	"github.com/micra-net/micra/internal/codec"
)

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
		eachKey(txn, prefixURL, prefixURL, func(k []byte) bool { f.bloom.Add(k[len(prefixURL):]); return true })
		return nil
	})
}

func (f *frontier) restoreCounts(b []byte) bool {
	if b == nil {
		return false
	}
	d := newDecoder(b)
	if d.Byte() != 1 {
		return false
	}
	q, h := d.Uvarint(), d.Uvarint()
	if d.Done() != nil || q > math.MaxInt64 || h > math.MaxInt64 {
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
		eachKey(txn, prefix, prefix, func([]byte) bool { n++; return true })
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
	var counts codec.Encoder
	counts.Byte(1)
	counts.Uvarint(uint64(max(f.nQueued.Load(), 0)))
	counts.Uvarint(uint64(max(f.nHosts.Load(), 0)))
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
	if err := wb.Set(keyCounts, counts); err != nil {
		return err
	}
	if err := wb.Set(keyClean, []byte{1}); err != nil {
		return err
	}
	return wb.Flush()
}

// eachKey calls f with each key under prefix from from on, in order, until
// f returns false, with a key-only scan. The key is valid only during f.
func eachKey(txn *badger.Txn, prefix, from []byte, f func(k []byte) bool) {
	opts := badger.DefaultIteratorOptions
	opts.PrefetchValues = false
	opts.Prefix = prefix
	it := txn.NewIterator(opts)
	defer it.Close()
	for it.Seek(from); it.ValidForPrefix(prefix); it.Next() {
		if !f(it.Item().Key()) {
			return
		}
	}
}
