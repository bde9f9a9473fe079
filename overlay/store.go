package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-net/micra/internal/kv"
	"github.com/micra-net/micra/overlay/pb"
)

// store is the overlay's view of badger: shard headers and entries under
// Prefix. Methods are safe for concurrent use; writes to one shard are
// serialised by the shard's lock in the coordinator.
type store struct {
	db   *badger.DB
	gens *shardGens
}

func newStore(db *badger.DB) store { return store{db: db, gens: &shardGens{m: map[[32]byte]uint64{}}} }

// shardGens counts the changes to each shard's entries, so that what is
// derived from them can be kept until they change (ownerIndex). A count
// moves after the change is committed: whoever reads a count and then the
// entries sees at least that change.
type shardGens struct {
	mu sync.Mutex
	m  map[[32]byte]uint64
}

// gen returns the count of changes to key's entries so far.
func (s store) gen(key [32]byte) uint64 {
	s.gens.mu.Lock()
	defer s.gens.mu.Unlock()
	return s.gens.m[key]
}

// changed counts a change to key's entries.
func (s store) changed(key [32]byte) {
	s.gens.mu.Lock()
	s.gens.m[key]++
	s.gens.mu.Unlock()
}

// errSchema: the store was written by a build with another layout.
var errSchema = errors.New("unsupported overlay store schema")

func (s store) checkSchema() error {
	return s.db.Update(func(txn *badger.Txn) error {
		return kv.Schema(txn, schemaKey(), []byte{schemaVersion}, errSchema)
	})
}

func (s store) loadMeta(key [32]byte) (*pb.ShardMeta, error) {
	var m pb.ShardMeta
	var found bool
	err := s.db.View(func(txn *badger.Txn) (err error) {
		found, err = kv.Proto(txn, shardMetaKey(key), &m)
		return err
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("loading shard header: %w", err)
	case !found:
		return nil, nil
	}
	return &m, nil
}

func (s store) saveMeta(key [32]byte, m *pb.ShardMeta) error {
	b, err := proto.Marshal(m)
	if err != nil {
		return err
	}
	return s.db.Update(func(txn *badger.Txn) error { return txn.Set(shardMetaKey(key), b) })
}

// allMetas returns the header of every shard held, by shard key (shards
// of other snapshots included: the key names the snapshot).
func (s store) allMetas() (map[[32]byte]*pb.ShardMeta, error) {
	out := map[[32]byte]*pb.ShardMeta{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: allShardsPrefix()})
		defer it.Close()
		for it.Seek(allShardsPrefix()); it.ValidForPrefix(allShardsPrefix()); it.Next() {
			k := it.Item().Key()
			enc, ok := bytes.CutSuffix(bytes.TrimPrefix(k, allShardsPrefix()), []byte("/meta"))
			if !ok {
				continue
			}
			raw, err := b32.DecodeString(string(enc))
			if err != nil || len(raw) != 32 {
				continue
			}
			var m pb.ShardMeta
			if err := it.Item().Value(func(v []byte) error { return proto.Unmarshal(v, &m) }); err != nil {
				return err
			}
			out[[32]byte(raw)] = &m
		}
		return nil
	})
	return out, err
}

// dropShard deletes a shard's header and entries.
func (s store) dropShard(key [32]byte) error {
	defer s.changed(key)
	prefix := shardPrefix(key)
	for {
		keys, err := kv.Keys(s.db, prefix, 1000)
		if err != nil || len(keys) == 0 {
			return err
		}
		if err := s.db.Update(func(txn *badger.Txn) error {
			for _, k := range keys {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
}

func (s store) getEntry(key [32]byte, kind pb.Entry_Kind, ekey []byte) (*pb.Entry, error) {
	var e pb.Entry
	var found bool
	err := s.db.View(func(txn *badger.Txn) (err error) {
		found, err = kv.Proto(txn, shardEntryKey(key, int32(kind), ekey), &e)
		return err
	})
	if err != nil || !found {
		return nil, err
	}
	return &e, nil
}

// entryNewer reports whether a supersedes b: a higher epoch, then a higher
// sequence number, then, for entries two coordinators wrote at one epoch
// and sequence number (views of the closest peers that differed), the
// larger value. The order is total, so every replica keeps the same one of
// two such entries whichever reached it first.
func entryNewer(a, b *pb.Entry) bool {
	if a.GetEpoch() != b.GetEpoch() {
		return a.GetEpoch() > b.GetEpoch()
	}
	if a.GetSeq() != b.GetSeq() {
		return a.GetSeq() > b.GetSeq()
	}
	return bytes.Compare(a.GetValue(), b.GetValue()) > 0
}

// putEntries stores each entry unless the stored one is at least as new, and
// returns how many it stored. Entries are independent (each is merged by
// entryNewer on its own), so a list larger than one badger transaction
// holds (a shard's whole state in a sync, on a node with small memtables)
// is committed in parts.
func (s store) putEntries(key [32]byte, entries []*pb.Entry) (int, error) {
	n := 0
	defer func() {
		if n > 0 {
			s.changed(key)
		}
	}()
	for len(entries) > 0 {
		done := 0 // entries this transaction took
		stored := 0
		err := s.db.Update(func(txn *badger.Txn) error {
			for _, e := range entries {
				k := shardEntryKey(key, int32(e.GetKind()), e.GetKey())
				it, err := txn.Get(k)
				switch {
				case err == nil:
					var old pb.Entry
					if err := it.Value(func(v []byte) error { return proto.Unmarshal(v, &old) }); err == nil && !entryNewer(e, &old) {
						done++
						continue
					}
				case !errors.Is(err, badger.ErrKeyNotFound):
					return err
				}
				b, err := proto.Marshal(e)
				if err != nil {
					return err
				}
				if err := txn.Set(k, b); err != nil {
					if errors.Is(err, badger.ErrTxnTooBig) && done > 0 {
						return nil // commit what fits; the rest goes in the next
					}
					return err
				}
				done++
				stored++
			}
			return nil
		})
		if err != nil {
			return n, err
		}
		n += stored
		entries = entries[done:]
	}
	return n, nil
}

// scan calls fn for each entry of the shard, of one kind or of all kinds
// (kind 0), in key order, until fn returns false.
func (s store) scan(key [32]byte, kind pb.Entry_Kind, fn func(*pb.Entry) bool) error {
	return s.scanPrefix(key, kind, nil, fn)
}

// scanPrefix is scan over the entries of one kind (not UNKNOWN) whose
// entry keys start with entryPrefix, and possibly others: the badger keys
// hold the entry keys in base32, whose characters of only the prefix's
// whole 5-bit groups are the prefix's own, so the caller still checks each
// entry's key. It reads a shard's probes of one range, or of the ranges in
// one block of addresses, without decoding all of the shard's.
func (s store) scanPrefix(key [32]byte, kind pb.Entry_Kind, entryPrefix []byte, fn func(*pb.Entry) bool) error {
	prefix := shardEntriesPrefix(key)
	if kind != pb.Entry_UNKNOWN {
		prefix = shardKindPrefix(key, int32(kind))
		if len(entryPrefix) > 0 {
			prefix = append(prefix, b32.EncodeToString(entryPrefix)[:len(entryPrefix)*8/5]...)
		}
	}
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
			var e pb.Entry
			if err := it.Item().Value(func(v []byte) error { return proto.Unmarshal(v, &e) }); err != nil {
				return err
			}
			if !fn(&e) {
				return nil
			}
		}
		return nil
	})
}

// count returns the number of the shard's entries of one kind, counting no
// further than limit.
func (s store) count(key [32]byte, kind pb.Entry_Kind, limit int) (int, error) {
	prefix := shardKindPrefix(key, int32(kind))
	n := 0
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Seek(prefix); it.ValidForPrefix(prefix) && n < limit; it.Next() {
			n++
		}
		return nil
	})
	return n, err
}

// getDeputy returns the tally of p this node keeps as the deputy of shard
// key's coordinator, nil when there is none.
func (s store) getDeputy(key [32]byte, p peer.ID) ([]byte, error) {
	var out []byte
	err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(deputyKey(key, p))
		if err != nil {
			return err
		}
		out, err = it.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	}
	return out, err
}

// putDeputy stores a deputy's tally of p for ttl.
func (s store) putDeputy(key [32]byte, p peer.ID, v []byte, ttl time.Duration) error {
	return s.db.Update(func(txn *badger.Txn) error {
		return txn.SetEntry(badger.NewEntry(deputyKey(key, p), v).WithTTL(ttl))
	})
}

// scanDeputies calls fn with each tally this node keeps as a deputy until
// fn returns false.
func (s store) scanDeputies(fn func(v []byte) bool) error {
	p := deputyPrefix()
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: p, PrefetchValues: true})
		defer it.Close()
		for it.Seek(p); it.ValidForPrefix(p); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if !fn(v) {
				return nil
			}
		}
		return nil
	})
}

// putSelfWithheld keeps, until ttl ends, that this node gave up the subnet
// of range key rk on its deputy's verdict.
func (s store) putSelfWithheld(rk []byte, ttl time.Duration) error {
	return s.db.Update(func(txn *badger.Txn) error {
		return txn.SetEntry(badger.NewEntry(selfWithheldKey(rk), nil).WithTTL(ttl))
	})
}

// scanSelfWithheld calls fn with the range key of each subnet putSelfWithheld
// keeps and when it expires.
func (s store) scanSelfWithheld(fn func(rk []byte, until time.Time)) error {
	p := selfWithheldPrefix()
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: p})
		defer it.Close()
		for it.Seek(p); it.ValidForPrefix(p); it.Next() {
			rk, err := b32.DecodeString(string(it.Item().Key()[len(p):]))
			if err != nil {
				continue // not one of ours
			}
			fn(rk, time.Unix(int64(it.Item().ExpiresAt()), 0))
		}
		return nil
	})
}
