// The frontier's stored values: queue entries, page states and host values,
// and their codecs.

package crawl

import (
	"crypto/sha256"
	"fmt"
	"math"
	"time"

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
	// Record: make a record of the page even if it has not changed
	// (Request.Record). Stored as a trailing byte, only when set, so
	// entries stored before it decode as they were.
	Record bool
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
	if e.Record {
		w.bool(true)
	}
	return w.b
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
	if len(d.b) > 0 && d.err == nil {
		if e.Record = d.bool(); d.err == nil && !e.Record {
			d.fail("a stored false record flag")
		}
	}
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
