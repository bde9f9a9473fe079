package crawl

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-net/micra/crawl/internal/urlnorm"
	"github.com/micra-net/micra/internal/codec"
)

// The outgoing store holds the links the Router did not keep: links of
// other nodes' subnets and links whose owner the node does not know yet.
// A page's links are stored in the transaction that completes the page (its
// new state and its pending record), so a crash loses none; they stay until
// the node reports them handed on (Handed), which it does once their owner
// acknowledged them. The store is bounded by OutgoingCap: links beyond it
// are dropped and counted in Stats.Dropped.
//
// The dispatcher hands off queued requests too, when the Router is a
// Disowner that disowns their address: such a request leaves its host's
// queue and enters the store in one transaction (handOff), so that a crash
// finds it in one of the two. Its URL stays in the seen set, so the link is
// marked (again) for Keep to queue it again should the node own it after
// all. A request that finds the store full stays queued.

// Outlink is one stored link waiting to be handed to another node.
type Outlink struct {
	Request
	// Addr is the address the link's host resolved to when the page was
	// processed: the node routes by it without resolving the host again.
	Addr netip.Addr
	hops int // distance from the request that introduced it (entry.Hops)
	// again marks a request handed off from the frontier: its URL is in
	// the seen set, so Keep queues it even though it was seen.
	again bool
	key   []byte
}

// outlinkVersion is the first byte of a stored outlink's value. Version 2
// appends a flags byte (outlinkAgain) to version 1, which decodes with no
// flags set.
const outlinkVersion = 2

// outlinkAgain is the flag of a stored outlink whose Outlink.again is set.
const outlinkAgain = 1

func (o *Outlink) encode() []byte {
	var w codec.Encoder
	w.Byte(outlinkVersion)
	w.Str(o.Link)
	w.Str(o.ParentLink)
	w.Varint(int64(o.Depth))
	w.Uvarint(uint64(len(o.Owners)))
	for _, s := range o.Owners {
		w.Str(s)
	}
	a, _ := o.Addr.MarshalBinary()
	w.Bytes(a)
	w.Uvarint(uint64(max(o.hops, 0)))
	var flags byte
	if o.again {
		flags |= outlinkAgain
	}
	w.Byte(flags)
	return w
}

// decodeOutlink decodes a stored outlink's value; it never panics.
func decodeOutlink(b []byte) (Outlink, error) {
	d := newDecoder(b)
	var o Outlink
	v := d.Byte()
	if d.Err() == nil && v != 1 && v != outlinkVersion {
		return o, fmt.Errorf("%w: outlink version %d", ErrCorruptValue, v)
	}
	o.Link = d.Str(urlnorm.MaxLength)
	o.ParentLink = d.Str(urlnorm.MaxLength)
	o.Depth = int(max(min(d.Varint(), 1<<16), -1))
	if n := d.Count(maxRecOwners, 1); n > 0 {
		o.Owners = make([]string, n)
		for i := range o.Owners {
			o.Owners[i] = d.Str(256)
		}
	}
	if a := d.Bytes(16); d.Err() == nil {
		if err := o.Addr.UnmarshalBinary(a); err != nil || !o.Addr.IsValid() {
			d.Fail("outlink address %x", a)
		}
	}
	o.hops = int(min(d.Uvarint(), 1<<16))
	if v >= 2 {
		flags := d.Byte()
		if flags&^outlinkAgain != 0 {
			d.Fail("outlink flags %#x", flags)
		}
		o.again = flags&outlinkAgain != 0
	}
	if err := d.Done(); err != nil {
		return Outlink{}, err
	}
	if o.Link == "" {
		return Outlink{}, fmt.Errorf("%w: outlink without a link", ErrCorruptValue)
	}
	return o, nil
}

func outlinkKey(seq uint64) []byte { return cat(prefixOut, be64(seq)) }

// addOutTxn stores links in txn, as many as the cap leaves room for; the
// caller holds mu. It returns how many it stored.
func (f *frontier) addOutTxn(txn *badger.Txn, out []Outlink, d *delta) (int, error) {
	room := f.outCap - f.nOut.Load() - d.out
	n := 0
	for i := range out {
		if int64(n) >= room {
			break
		}
		f.seq++
		if err := txn.Set(outlinkKey(f.seq), out[i].encode()); err != nil {
			return n, err
		}
		n++
	}
	d.out += int64(n)
	return n, nil
}

// handOff ends the lease l of a request that this node no longer crawls:
// in one transaction the request leaves its host's queue, as finish does
// without retry, o enters the outgoing store and the host becomes ready at
// readyAt. If the store is full, the request stays queued, as putBack
// leaves it, and its host becomes ready at retryAt. It reports whether o
// was stored.
func (f *frontier) handOff(l *lease, o Outlink, readyAt, retryAt time.Time) (stored bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.undoLease(l)
	var d delta
	err = f.db.Update(func(txn *badger.Txn) error {
		d, stored = delta{}, false
		n, err := f.addOutTxn(txn, []Outlink{o}, &d)
		if err != nil {
			return err
		}
		if n == 0 {
			return f.setReady(txn, l.host, time.Time{}, retryAt)
		}
		stored = true
		if err := f.dequeueTxn(txn, l, &d); err != nil {
			return err
		}
		return f.setReady(txn, l.host, time.Time{}, readyAt)
	})
	if err != nil {
		f.clearHints()
		return false, fmt.Errorf("frontier hand-off: %w", err)
	}
	f.apply(d)
	return stored, nil
}

// addOut stores links in their own transaction (links that are not part of
// a page's completion: a sitemap named by robots.txt); it returns how many
// it stored.
func (f *frontier) addOut(out []Outlink) (int, error) {
	if len(out) == 0 {
		return 0, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var d delta
	var n int
	err := f.db.Update(func(txn *badger.Txn) error {
		var err error
		n, err = f.addOutTxn(txn, out, &d)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("storing outgoing links: %w", err)
	}
	f.apply(d)
	return n, nil
}

// outgoing returns up to n stored links whose keys sort after after
// (nil: from the oldest). A value that does not decode is deleted and
// counted in bad.
func (f *frontier) outgoing(after []byte, n int) (out []Outlink, bad int, err error) {
	var corrupt [][]byte
	err = f.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.Prefix = prefixOut
		opts.PrefetchSize = min(n, 100)
		it := txn.NewIterator(opts)
		defer it.Close()
		if after == nil {
			it.Seek(prefixOut)
		} else if it.Seek(after); it.ValidForPrefix(prefixOut) && bytes.Equal(it.Item().Key(), after) {
			it.Next()
		}
		for ; it.ValidForPrefix(prefixOut) && len(out) < n; it.Next() {
			k := it.Item().KeyCopy(nil)
			var o Outlink
			err := it.Item().Value(func(v []byte) error {
				var derr error
				o, derr = decodeOutlink(v)
				return derr
			})
			if err != nil {
				corrupt = append(corrupt, k)
				continue
			}
			o.key = k
			out = append(out, o)
		}
		return nil
	})
	if err == nil && len(corrupt) > 0 {
		_, err = f.deleteOut(corrupt)
	}
	return out, len(corrupt), err
}

// deleteOut deletes stored links by key and returns how many it deleted;
// keys already gone are skipped.
func (f *frontier) deleteOut(keys [][]byte) (deleted int64, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), addChunk)]
		keys = keys[len(chunk):]
		var n int64
		err := f.db.Update(func(txn *badger.Txn) error {
			n = 0
			for _, k := range chunk {
				if len(k) != len(prefixOut)+8 || !bytes.HasPrefix(k, prefixOut) {
					continue
				}
				if _, err := txn.Get(k); err != nil {
					if errors.Is(err, badger.ErrKeyNotFound) {
						continue
					}
					return err
				}
				if err := txn.Delete(k); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return deleted, fmt.Errorf("deleting outgoing links: %w", err)
		}
		f.nOut.Add(-n)
		deleted += n
	}
	return deleted, nil
}

// countOut counts the stored links (at open; a key-only scan).
func (f *frontier) countOut() error {
	n, err := countKeys(f.db, prefixOut)
	f.nOut.Store(n)
	return err
}

// defaultOutgoingCap is OutgoingCap's default.
const defaultOutgoingCap = 1 << 20

// Outgoing returns up to n links of the outgoing store, oldest first,
// starting after the link after (the zero Outlink: from the oldest), so that
// a caller pages through the store with the last link of the previous call.
// Links stay stored until Handed. A stored value that does not decode is
// deleted and counted in Stats.Dropped. Safe for concurrent use.
func (c *Crawler) Outgoing(after Outlink, n int) ([]Outlink, error) {
	if n <= 0 {
		return nil, nil
	}
	out, bad, err := c.front.outgoing(after.key, n)
	if bad > 0 {
		c.stats.dropped.Add(int64(bad))
		c.log.Error("undecodable outgoing links deleted", "count", bad)
	}
	return out, err
}

// Handed deletes links from the outgoing store once they are handed on:
// acknowledged by the node that owns them, or queued by this node's own
// crawler. Links handed before are skipped. It counts in Stats.Forwarded.
func (c *Crawler) Handed(links ...Outlink) error {
	n, err := c.front.deleteOut(outKeys(links))
	c.stats.forwarded.Add(n)
	return err
}

// Discard deletes links from the outgoing store that can never be handed
// on (their owner's protocol refuses them); it counts in Stats.Dropped.
func (c *Crawler) Discard(links ...Outlink) error {
	n, err := c.front.deleteOut(outKeys(links))
	c.stats.dropped.Add(n)
	return err
}

// outKeys returns the store keys of links (links not read from the store
// have none).
func outKeys(links []Outlink) [][]byte {
	keys := make([][]byte, 0, len(links))
	for _, l := range links {
		if l.key != nil {
			keys = append(keys, l.key)
		}
	}
	return keys
}

// OutgoingStored returns a channel that receives a value after links were
// stored in the outgoing store (one value for any number of stores since
// the last receive): the node's forwarder waits on it.
func (c *Crawler) OutgoingStored() <-chan struct{} { return c.outWake }

// Keep queues links of the outgoing store that the node found to be its own
// (their subnet was delegated to it after the page was processed), as if
// the Router had kept them: a link seen before is not queued again. A link
// the dispatcher handed off (see Disowner) was seen, by this crawler: it is
// queued again unless it is queued still. Links must be passed as Outgoing
// returned them, which marks both kinds. Keep deletes them from the store
// once they are queued.
func (c *Crawler) Keep(links ...Outlink) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	// [0]: links from pages, [1]: requests handed off, queued with force.
	var es [2][]entry
	var us [2][]*url.URL
	for _, l := range links {
		u, err := url.Parse(l.Link)
		if err != nil || u.Host == "" {
			c.stats.dropped.Add(1)
			continue
		}
		i := 0
		if l.again {
			i = 1
		}
		// A handed-off request was counted as an in-link when it was
		// first queued: it comes back as a revisit does, not counted again.
		e := entry{URL: u.String(), Parent: l.ParentLink, Depth: max(l.Depth, 0), Hops: l.hops, Owners: l.Owners, Revisit: l.again}
		es[i] = append(es[i], e)
		us[i] = append(us[i], u)
	}
	now := time.Now()
	for i, force := range []bool{false, true} {
		if len(es[i]) == 0 {
			continue
		}
		if _, err := c.front.addBatch(es[i], us[i], force, now); err != nil {
			return err
		}
		c.poke()
	}
	_, err := c.front.deleteOut(outKeys(links))
	return err
}
