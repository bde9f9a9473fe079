// The URL-seen set, page states and revisits.

package crawl

import (
	"bytes"
	"net/url"
	"time"

	"github.com/dgraph-io/badger/v4"
)

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
