package crawl

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// encoder and decoder implement the compact binary encoding of stored values
// and records: unsigned varints, zig-zag varints, length-prefixed strings.
// Every value starts with a version byte. The decoder never panics and
// never allocates more than its input justifies: each length is checked
// against both a per-field limit and the remaining input.

type encoder struct{ b []byte }

func (e *encoder) byte(v byte)         { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64)    { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)      { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) u64(v uint64)        { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *encoder) str(s string)        { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) bytes(p []byte)      { e.uvarint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *encoder) time(t time.Time)    { e.varint(unixOrZero(t)) }
func (e *encoder) dur(d time.Duration) { e.uvarint(uint64(max(d, 0) / time.Microsecond)) }
func (e *encoder) f64(v float64)       { e.u64(math.Float64bits(v)) }
func (e *encoder) bool(v bool) {
	if v {
		e.byte(1)
	} else {
		e.byte(0)
	}
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorruptValue, fmt.Sprintf(format, a...))
	}
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("short input")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u64() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("short input")
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) raw(limit int) []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(limit) || n > uint64(len(d.b)) {
		d.fail("length %d over limit", n)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str(limit int) string { return string(d.raw(limit)) }

func (d *decoder) bytes(limit int) []byte {
	r := d.raw(limit)
	if r == nil {
		return nil
	}
	return append([]byte(nil), r...)
}

func (d *decoder) time() time.Time {
	v := d.varint()
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v)
}

func (d *decoder) dur() time.Duration {
	v := d.uvarint()
	if v > math.MaxInt64/uint64(time.Microsecond) {
		d.fail("duration overflow")
		return 0
	}
	return time.Duration(v) * time.Microsecond
}

func (d *decoder) f64() float64 { return math.Float64frombits(d.u64()) }

func (d *decoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail("bad bool")
	return false
}

// count reads a collection length, bounded by limit and by the input left
// (each element takes at least minSize bytes).
func (d *decoder) count(limit, minSize int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(limit) || n*uint64(minSize) > uint64(len(d.b)) {
		d.fail("count %d over limit", n)
		return 0
	}
	return int(n)
}

// done fails if input is left over.
func (d *decoder) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}
