// The frontier's stored values: queue entries, page states and host values,
// and their codecs.

package crawl

import (
	"crypto/sha256"
	"math"
	"time"

	"github.com/micra-net/micra/crawl/internal/urlnorm"
	"github.com/micra-net/micra/internal/codec"
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
	var w codec.Encoder
	w.Byte(1)
	w.Str(e.URL)
	w.Str(e.Parent)
	w.Uvarint(uint64(max(e.Depth, 0)))
	w.Uvarint(uint64(max(e.Hops, 0)))
	w.Uvarint(uint64(len(e.Owners)))
	for _, o := range e.Owners {
		w.Str(o)
	}
	w.Uvarint(uint64(max(e.Attempts, 0)))
	w.Bool(e.Revisit)
	w.Time(e.Added)
	if e.Record {
		w.Bool(true)
	}
	return w
}

func (p *pageState) encode() []byte {
	var w codec.Encoder
	w.Byte(1)
	w.Str(p.URL)
	w.Bytes(p.Queued)
	w.Uvarint(uint64(p.Inlinks))
	w.Uvarint(uint64(max(p.Depth, 0)))
	w.Uvarint(uint64(max(p.Hops, 0)))
	w.Str(p.ETag)
	w.Str(p.LastModified)
	w.U64(p.BodyHash)
	w.U64(p.Digest)
	w.Bool(p.Indexed)
	w.Uvarint(uint64(p.Visits))
	w.Uvarint(uint64(p.Changes))
	w.Time(p.FirstVisit)
	w.Time(p.LastVisit)
	w.Dur(p.Interval)
	w.Time(p.NextVisit)
	return w
}

func decodeEntry(b []byte) (entry, error) {
	d := newDecoder(b)
	var e entry
	d.Version("entry", 1)
	e.URL = d.Str(urlnorm.MaxLength)
	e.Parent = d.Str(urlnorm.MaxLength)
	e.Depth = int(min(d.Uvarint(), 1<<16))
	e.Hops = int(min(d.Uvarint(), 1<<16))
	if n := d.Count(maxRecOwners, 1); n > 0 {
		e.Owners = make([]string, n)
		for i := range e.Owners {
			e.Owners[i] = d.Str(256)
		}
	}
	e.Attempts = int(min(d.Uvarint(), 1<<16))
	e.Revisit = d.Bool()
	e.Added = d.Time()
	if len(d.Rest()) > 0 && d.Err() == nil {
		if e.Record = d.Bool(); d.Err() == nil && !e.Record {
			d.Fail("a stored false record flag")
		}
	}
	return e, d.Done()
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
	d := newDecoder(b)
	var p pageState
	d.Version("page state", 1)
	p.URL = d.Str(urlnorm.MaxLength)
	p.Queued = d.Bytes(1024)
	if len(p.Queued) == 0 {
		p.Queued = nil
	}
	p.Inlinks = uint32(min(d.Uvarint(), math.MaxUint32))
	p.Depth = int(min(d.Uvarint(), 1<<16))
	p.Hops = int(min(d.Uvarint(), 1<<16))
	p.ETag = d.Str(1024)
	p.LastModified = d.Str(256)
	p.BodyHash = d.U64()
	p.Digest = d.U64()
	p.Indexed = d.Bool()
	p.Visits = uint32(min(d.Uvarint(), math.MaxUint32))
	p.Changes = uint32(min(d.Uvarint(), math.MaxUint32))
	p.FirstVisit = d.Time()
	p.LastVisit = d.Time()
	p.Interval = d.Dur()
	p.NextVisit = d.Time()
	return p, d.Done()
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
