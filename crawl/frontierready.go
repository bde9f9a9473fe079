// The ready index and leases: which host may be fetched next, and the life
// of a checked-out request until its page is complete.

package crawl

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

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
			var rk []byte
			eachKey(txn, prefixReady, f.readySeek(), func(k []byte) bool { rk = bytes.Clone(k); return false })
			if rk == nil {
				return nil
			}
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

// maxNextScan bounds the hosts examined per next call.
const maxNextScan = 64

// firstFree returns the first entry of host's queue whose key is not in
// held, and moves the host's seek hint to the first live entry.
func (f *frontier) firstFree(txn *badger.Txn, host string, held map[string]time.Time) ([]byte, []byte, error) {
	qp := queuePrefix(host)
	qo := badger.DefaultIteratorOptions
	qo.PrefetchSize = min(len(held)+1, 100)
	qo.Prefix = qp
	it := txn.NewIterator(qo)
	defer it.Close()
	first := true
	for it.Seek(f.queueStart(host)); it.ValidForPrefix(qp); it.Next() {
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

// queueStart is where a scan of host's queue starts: its seek hint, or
// the queue's prefix. The caller holds mu.
func (f *frontier) queueStart(host string) []byte {
	if low, ok := f.queueLow[host]; ok {
		return low
	}
	return queuePrefix(host)
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
		eachKey(txn, prefixReady, f.readySeek(), func([]byte) bool { found = true; return false })
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
	var d delta
	err := f.db.Update(func(txn *badger.Txn) error {
		if retry {
			e := l.entry
			e.Attempts++
			if err := txn.Set(l.key, e.encode()); err != nil {
				return err
			}
		} else if err := f.dequeueTxn(txn, l, &d); err != nil {
			return err
		}
		return f.setReady(txn, l.host, time.Time{}, readyAt)
	})
	if err != nil {
		return fmt.Errorf("frontier finish: %w", err)
	}
	f.apply(d)
	return nil
}

// dequeueTxn takes the leased request l out of its host's queue in txn,
// for good: its URL stays in the seen set, marked as queued no more. The
// caller holds mu.
func (f *frontier) dequeueTxn(txn *badger.Txn, l *lease, d *delta) error {
	if _, err := txn.Get(l.key); err == nil {
		d.queued--
	} else if !errors.Is(err, badger.ErrKeyNotFound) {
		return err
	}
	if err := txn.Delete(l.key); err != nil {
		return err
	}
	h := urlHash(l.entry.URL)
	st, found, err := getState(txn, h)
	if err != nil {
		return err
	}
	if found && bytes.Equal(st.Queued, l.key) {
		st.Queued = nil
		return txn.Set(urlKey(h), st.encode())
	}
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

// readyHosts counts the hosts whose ready time has come at now, by a
// key-only scan of the ready index that stops at the first future time.
func (f *frontier) readyHosts(now time.Time) (int64, error) {
	var n int64
	limit := timeBytes(now)
	f.mu.Lock()
	from := f.readySeek()
	f.mu.Unlock()
	err := f.db.View(func(txn *badger.Txn) error {
		eachKey(txn, prefixReady, from, func(k []byte) bool {
			if len(k) < len(prefixReady)+8 || bytes.Compare(k[len(prefixReady):len(prefixReady)+8], limit) > 0 {
				return false
			}
			n++
			return true
		})
		return nil
	})
	return n, err
}
