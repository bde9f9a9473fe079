package indexer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/results/pb"
)

// retryQueue is a durable retry queue: items kept in badger under one key
// prefix (keys.go: idKey), each under a 16-byte id, as a protobuf message
// of type *T that says when it is due (its NextMs, in Unix milliseconds),
// at most limit of them. The ids are mirrored in memory, so that asking
// whether an item is kept costs no read; the mirror is loaded at start, so
// the queue survives a restart. run takes the due items in rounds, on a
// ticker or at once after kick, until its context ends; what a round does
// with them (send, reschedule, drop) is its caller's.
//
// mu guards the mirror and orders adding and removing items: the methods
// that say so expect the caller to hold it, so that a caller can check
// and change the mirror and the stored items together.
type retryQueue[T any, M queued[T]] struct {
	db     *badger.DB
	prefix []byte
	limit  int
	kicked chan struct{}

	mu  sync.Mutex
	ids map[[16]byte]struct{}
}

// queued is a retryQueue's item: a protobuf message with the time it is
// due, the pointer type of T.
type queued[T any] interface {
	*T
	proto.Message
	GetNextMs() int64
}

// pendingQueue holds the crawl requests waiting for a record (pending.go),
// owedQueue the withholding notices owed (withheld.go).
type (
	pendingQueue = retryQueue[pb.PendingCrawl, *pb.PendingCrawl]
	owedQueue    = retryQueue[pb.WithheldOwed, *pb.WithheldOwed]
)

func newRetryQueue[T any, M queued[T]](db *badger.DB, prefix []byte, limit int) *retryQueue[T, M] {
	return &retryQueue[T, M]{db: db, prefix: prefix, limit: limit, kicked: make(chan struct{}, 1), ids: map[[16]byte]struct{}{}}
}

// load reads the ids of the stored items into the mirror.
func (q *retryQueue[T, M]) load() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: q.prefix})
		defer it.Close()
		for it.Seek(q.prefix); it.ValidForPrefix(q.prefix); it.Next() {
			if id, ok := parseIDKey(q.prefix, it.Item().Key()); ok {
				q.ids[id] = struct{}{}
			}
		}
		return nil
	})
}

// Len returns the number of items kept.
func (q *retryQueue[T, M]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ids)
}

// has reports whether item id is kept. The caller holds q.mu.
func (q *retryQueue[T, M]) has(id [16]byte) bool {
	_, ok := q.ids[id]
	return ok
}

// keep stores the items not kept yet (ids[i] is items[i]'s id), within
// the limit, and returns how many it stored and how many the limit left
// out. On an error the mirror has none of them; some may be stored,
// which the next start loads. The caller holds q.mu.
func (q *retryQueue[T, M]) keep(ids [][16]byte, items []M) (added, lost int, err error) {
	wb := q.db.NewWriteBatch()
	defer wb.Cancel()
	var fresh [][16]byte
	for i, id := range ids {
		if _, ok := q.ids[id]; ok {
			continue
		}
		if len(q.ids)+len(fresh) >= q.limit {
			lost++
			continue
		}
		v, err := proto.Marshal(items[i])
		if err != nil {
			return 0, lost, err
		}
		if err := wb.Set(idKey(q.prefix, id), v); err != nil {
			return 0, lost, err
		}
		fresh = append(fresh, id)
	}
	if err := wb.Flush(); err != nil {
		return 0, lost, err
	}
	for _, id := range fresh {
		q.ids[id] = struct{}{}
	}
	return len(fresh), lost, nil
}

// get reads item id in txn.
func (q *retryQueue[T, M]) get(txn *badger.Txn, id [16]byte) (M, error) {
	it, err := txn.Get(idKey(q.prefix, id))
	if err != nil {
		return nil, err
	}
	m := M(new(T))
	if err := it.Value(func(v []byte) error { return proto.Unmarshal(v, m) }); err != nil {
		return nil, err
	}
	return m, nil
}

// set stores m as item id in txn; the mirror is not changed, so id is
// one kept already.
func (q *retryQueue[T, M]) set(txn *badger.Txn, id [16]byte, m M) error {
	v, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return txn.Set(idKey(q.prefix, id), v)
}

// update applies f to item id in txn and stores it; one that is not
// there (or does not decode) is left alone.
func (q *retryQueue[T, M]) update(txn *badger.Txn, id [16]byte, f func(M)) error {
	m, err := q.get(txn, id)
	if err != nil {
		return nil
	}
	f(m)
	return q.set(txn, id, m)
}

// updateAll applies f(i, item) to each item ids[i] and stores it, in
// transactions of at most most items; an item that is not there is left
// alone. On an error it stops: the items of the transactions before are
// updated. The caller holds q.mu.
func (q *retryQueue[T, M]) updateAll(ids [][16]byte, most int, f func(i int, m M)) error {
	for done := 0; done < len(ids); {
		n := min(len(ids)-done, most)
		err := q.db.Update(func(txn *badger.Txn) error {
			for i := done; i < done+n; i++ {
				if err := q.update(txn, ids[i], func(m M) { f(i, m) }); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		done += n
	}
	return nil
}

// change applies f to item id and stores it, in a transaction of its own,
// when the item is kept, and reports whether it is.
func (q *retryQueue[T, M]) change(id [16]byte, f func(M)) (kept bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.has(id) {
		return false, nil
	}
	return true, q.db.Update(func(txn *badger.Txn) error { return q.update(txn, id, f) })
}

// drop removes item id when it is kept.
func (q *retryQueue[T, M]) drop(id [16]byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.has(id) {
		return nil
	}
	return q.remove([][16]byte{id})
}

// save stores m as item id, kept already, in a transaction of its own.
func (q *retryQueue[T, M]) save(id [16]byte, m M) error {
	return q.db.Update(func(txn *badger.Txn) error { return q.set(txn, id, m) })
}

// remove deletes the items ids, stored and from the mirror. The caller
// holds q.mu.
func (q *retryQueue[T, M]) remove(ids [][16]byte) error {
	if len(ids) == 0 {
		return nil
	}
	err := q.db.Update(func(txn *badger.Txn) error {
		for _, id := range ids {
			if err := txn.Delete(idKey(q.prefix, id)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range ids {
		delete(q.ids, id)
	}
	return nil
}

// dueAt returns up to most of the items due at now (NextMs ≤ now) with
// their ids, in key order. Items that do not decode are passed over.
func (q *retryQueue[T, M]) dueAt(now time.Time, most int) (ids [][16]byte, items []M, err error) {
	err = q.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: q.prefix, PrefetchValues: true})
		defer it.Close()
		for it.Seek(q.prefix); it.ValidForPrefix(q.prefix) && len(items) < most; it.Next() {
			id, ok := parseIDKey(q.prefix, it.Item().Key())
			if !ok {
				continue
			}
			m := M(new(T))
			if it.Item().Value(func(v []byte) error { return proto.Unmarshal(v, m) }) != nil {
				continue
			}
			if m.GetNextMs() <= now.UnixMilli() {
				ids, items = append(ids, id), append(items, m)
			}
		}
		return nil
	})
	return ids, items, err
}

// kick has run start a round now, or as soon as the one running ends.
func (q *retryQueue[T, M]) kick() {
	select {
	case q.kicked <- struct{}{}:
	default:
	}
}

// run calls round every interval and after each kick until ctx ends.
func (q *retryQueue[T, M]) run(ctx context.Context, every time.Duration, round func(ctx context.Context)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-q.kicked:
		case <-ctx.Done():
			return
		}
		round(ctx)
	}
}

// closedDB reports whether err says the database is closed: the indexer is
// shutting down, and a write it could not make is not worth a warning.
func closedDB(err error) bool { return errors.Is(err, badger.ErrDBClosed) }
