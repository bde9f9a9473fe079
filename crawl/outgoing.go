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
)

// The outgoing store holds the links the Router did not keep: links of
// other nodes' subnets and links whose owner the node does not know yet.
// A page's links are stored in the transaction that completes the page (its
// new state and its pending record), so a crash loses none; they stay until
// the node reports them handed on (Handed), which it does once their owner
// acknowledged them. The store is bounded by OutgoingCap: links beyond it
// are dropped and counted in Stats.Dropped.

// Outlink is one stored link waiting to be handed to another node.
type Outlink struct {
	Request
	// Addr is the address the link's host resolved to when the page was
	// processed: the node routes by it without resolving the host again.
	Addr netip.Addr
	hops int // distance from the request that introduced it (entry.Hops)
	key  []byte
}

// outlinkVersion is the first byte of a stored outlink's value.
const outlinkVersion = 1

func (o *Outlink) encode() []byte {
	var w encoder
	w.byte(outlinkVersion)
	w.str(o.Link)
	w.str(o.ParentLink)
	w.varint(int64(o.Depth))
	w.uvarint(uint64(len(o.Owners)))
	for _, s := range o.Owners {
		w.str(s)
	}
	a, _ := o.Addr.MarshalBinary()
	w.bytes(a)
	w.uvarint(uint64(max(o.hops, 0)))
	return w.b
}

// decodeOutlink decodes a stored outlink's value; it never panics.
func decodeOutlink(b []byte) (Outlink, error) {
	d := decoder{b: b}
	var o Outlink
	if v := d.byte(); d.err == nil && v != outlinkVersion {
		return o, fmt.Errorf("%w: outlink version %d", ErrCorruptValue, v)
	}
	o.Link = d.str(urlnorm.MaxLength)
	o.ParentLink = d.str(urlnorm.MaxLength)
	o.Depth = int(max(min(d.varint(), 1<<16), -1))
	if n := d.count(maxRecOwners, 1); n > 0 {
		o.Owners = make([]string, n)
		for i := range o.Owners {
			o.Owners[i] = d.str(256)
		}
	}
	if a := d.bytes(16); d.err == nil {
		if err := o.Addr.UnmarshalBinary(a); err != nil || !o.Addr.IsValid() {
			d.fail("outlink address %x", a)
		}
	}
	o.hops = int(min(d.uvarint(), 1<<16))
	if err := d.done(); err != nil {
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
// the Router had kept them: a link seen before is not queued again. It
// deletes them from the store once they are queued.
func (c *Crawler) Keep(links ...Outlink) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	es := make([]entry, 0, len(links))
	us := make([]*url.URL, 0, len(links))
	for _, l := range links {
		u, err := url.Parse(l.Link)
		if err != nil || u.Host == "" {
			c.stats.dropped.Add(1)
			continue
		}
		es = append(es, entry{URL: u.String(), Parent: l.ParentLink, Depth: max(l.Depth, 0), Hops: l.hops, Owners: l.Owners})
		us = append(us, u)
	}
	if len(es) > 0 {
		if _, err := c.front.addBatch(es, us, false, time.Now()); err != nil {
			return err
		}
		c.poke()
	}
	_, err := c.front.deleteOut(outKeys(links))
	return err
}
