package codec

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// Error is a decoding failure: what is wrong and where.
type Error struct {
	Kind   error  // the sentinel given to NewDecoder, or nil
	Msg    string // what is wrong, e.g. "length 9000 over limit 8192"
	Offset int    // where in the input the failing field starts
}

// Error returns "kind: msg at offset n", or "msg at offset n" without a
// Kind.
func (e *Error) Error() string {
	if e.Kind == nil {
		return fmt.Sprintf("%s at offset %d", e.Msg, e.Offset)
	}
	return fmt.Sprintf("%v: %s at offset %d", e.Kind, e.Msg, e.Offset)
}

// Unwrap returns Kind, so that errors.Is matches the caller's sentinel.
func (e *Error) Unwrap() error { return e.Kind }

// Decoder reads encoded values from untrusted input. Its first failure
// sticks: every later read returns a zero value, and Err and Done return
// that failure. A Decoder is not safe for concurrent use.
type Decoder struct {
	b    []byte // the input not read yet
	size int    // the length of the whole input
	kind error  // what every Error wraps
	err  error
}

// NewDecoder returns a Decoder reading b; its errors wrap kind (nil for
// none).
func NewDecoder(b []byte, kind error) Decoder { return Decoder{b: b, size: len(b), kind: kind} }

// Err returns the first failure, or nil.
func (d *Decoder) Err() error { return d.err }

// Rest returns the input not read yet, without reading it.
func (d *Decoder) Rest() []byte { return d.b }

// Offset returns how many bytes of the input have been read.
func (d *Decoder) Offset() int { return d.size - len(d.b) }

// Fail records a failure found at the current offset, unless one is
// recorded already. Callers use it for values that decode but are not
// valid.
func (d *Decoder) Fail(format string, a ...any) { d.failAt(d.Offset(), format, a...) }

func (d *Decoder) failAt(off int, format string, a ...any) {
	if d.err == nil {
		d.err = &Error{Kind: d.kind, Msg: fmt.Sprintf(format, a...), Offset: off}
	}
}

// Done returns the first failure, or a failure if input is left over.
func (d *Decoder) Done() error {
	if d.err == nil && len(d.b) != 0 {
		d.Fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

// Finish returns v if d has read all its input without a failure, and
// else T's zero value and the failure Done returns: the end of a function
// that decodes one value.
func Finish[T any](d *Decoder, v T) (T, error) {
	if err := d.Done(); err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.Fail("short input")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// Bool reads a byte that must be 0 (false) or 1 (true).
func (d *Decoder) Bool() bool {
	off := d.Offset()
	switch d.Byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.failAt(off, "bad bool")
	return false
}

// Version reads a version byte that must be want; what names the value in
// the failure.
func (d *Decoder) Version(what string, want byte) {
	off := d.Offset()
	if v := d.Byte(); d.err == nil && v != want {
		d.failAt(off, "%s version %d", what, v)
	}
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 { return d.uvarint("uvarint") }

// Varint reads a zig-zag varint.
func (d *Decoder) Varint() int64 {
	ux := d.uvarint("varint")
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

// uvarint reads an unsigned varint; what names it in the failure.
func (d *Decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.Fail("bad %s", what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// Fixed reads n bytes. The result aliases the input; its capacity is n.
func (d *Decoder) Fixed(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.Fail("short input")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// U16 reads 2 bytes, big-endian.
func (d *Decoder) U16() uint16 {
	if p := d.Fixed(2); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

// U64 reads 8 bytes, big-endian.
func (d *Decoder) U64() uint64 {
	if p := d.Fixed(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

// F64 reads a float64 as Encoder.F64 writes it; NaN and the infinities
// fail.
func (d *Decoder) F64() float64 {
	off := d.Offset()
	v := math.Float64frombits(d.U64())
	if math.IsNaN(v) || math.IsInf(v, 0) {
		d.failAt(off, "non-finite number")
		return 0
	}
	return v
}

// Raw reads a length-prefixed byte string of at most limit bytes. The
// result aliases the input; its capacity is its length.
func (d *Decoder) Raw(limit int) []byte {
	off := d.Offset()
	n := d.Uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(max(limit, 0)) {
		d.failAt(off, "length %d over limit %d", n, limit)
		return nil
	}
	if n > uint64(len(d.b)) {
		d.failAt(off, "length %d over the %d bytes left", n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// Str reads a length-prefixed string of at most limit bytes.
func (d *Decoder) Str(limit int) string { return string(d.Raw(limit)) }

// Bytes reads a length-prefixed byte string of at most limit bytes into a
// new slice; an empty one is nil.
func (d *Decoder) Bytes(limit int) []byte {
	r := d.Raw(limit)
	if len(r) == 0 {
		return nil
	}
	return append([]byte(nil), r...)
}

// Count reads the length of a collection: at most limit items, each of
// which takes at least minSize bytes (1 if less) of the input left.
func (d *Decoder) Count(limit, minSize int) int {
	off := d.Offset()
	n := d.Uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(max(limit, 0)) {
		d.failAt(off, "count %d over limit %d", n, limit)
		return 0
	}
	if n > uint64(len(d.b)/max(minSize, 1)) {
		d.failAt(off, "count %d (at least %d bytes each) over the %d bytes left", n, max(minSize, 1), len(d.b))
		return 0
	}
	return int(n)
}

// Time reads a time as Encoder.Time writes it: 0 is the zero time.
func (d *Decoder) Time() time.Time {
	v := d.Varint()
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v)
}

// Dur reads a duration as Encoder.Dur writes it, in microseconds; one
// beyond time.Duration's range fails.
func (d *Decoder) Dur() time.Duration {
	off := d.Offset()
	v := d.Uvarint()
	if v > math.MaxInt64/uint64(time.Microsecond) {
		d.failAt(off, "duration overflow")
		return 0
	}
	return time.Duration(v) * time.Microsecond
}
