package codec

import (
	"encoding/binary"
	"math"
	"time"
)

// Encoder appends encoded values to a byte slice. The zero value is an
// empty encoding; Encoder(b) appends to b. An Encoder is a []byte, so it
// is returned or stored as one without a conversion.
type Encoder []byte

// Byte appends v.
func (e *Encoder) Byte(v byte) { *e = append(*e, v) }

// Bool appends 1 for true and 0 for false.
func (e *Encoder) Bool(v bool) {
	if v {
		e.Byte(1)
	} else {
		e.Byte(0)
	}
}

// Uvarint appends v as an unsigned varint.
func (e *Encoder) Uvarint(v uint64) { *e = binary.AppendUvarint(*e, v) }

// Varint appends v as a zig-zag varint.
func (e *Encoder) Varint(v int64) { *e = binary.AppendVarint(*e, v) }

// U16 appends v as 2 bytes, big-endian.
func (e *Encoder) U16(v uint16) { *e = binary.BigEndian.AppendUint16(*e, v) }

// U64 appends v as 8 bytes, big-endian.
func (e *Encoder) U64(v uint64) { *e = binary.BigEndian.AppendUint64(*e, v) }

// F64 appends v's IEEE 754 bits as U64 does.
func (e *Encoder) F64(v float64) { e.U64(math.Float64bits(v)) }

// Str appends s's length as an unsigned varint and then s.
func (e *Encoder) Str(s string) { e.Uvarint(uint64(len(s))); *e = append(*e, s...) }

// Bytes appends p's length as an unsigned varint and then p.
func (e *Encoder) Bytes(p []byte) { e.Uvarint(uint64(len(p))); *e = append(*e, p...) }

// Time appends t as a varint of Unix nanoseconds, 0 for the zero time.
// Decoder.Time reads an instant at the Unix epoch as the zero time.
func (e *Encoder) Time(t time.Time) {
	if t.IsZero() {
		e.Varint(0)
		return
	}
	e.Varint(t.UnixNano())
}

// Dur appends d in whole microseconds as an unsigned varint; a negative d
// is written as 0.
func (e *Encoder) Dur(d time.Duration) { e.Uvarint(uint64(max(d, 0) / time.Microsecond)) }
