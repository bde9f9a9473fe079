package codec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"
)

var errTest = errors.New("corrupt test value")

func TestRoundTrip(t *testing.T) {
	now := time.Unix(1732270000, 123456789)
	var e Encoder
	e.Byte(7)
	e.Bool(true)
	e.Bool(false)
	e.Uvarint(math.MaxUint64)
	e.Varint(math.MinInt64)
	e.U16(0xbeef)
	e.U64(0xdeadbeefcafef00d)
	e.F64(-2.5)
	e.Str("héllo")
	e.Bytes([]byte{1, 2, 3})
	e.Bytes(nil)
	e.Time(now)
	e.Time(time.Time{})
	e.Dur(1500 * time.Microsecond)
	e.Dur(-time.Second)
	e = append(e, 'x', 'y')

	d := NewDecoder(e, errTest)
	got := []any{d.Byte(), d.Bool(), d.Bool(), d.Uvarint(), d.Varint(), d.U16(), d.U64(), d.F64(), d.Str(16), d.Bytes(3), d.Bytes(0),
		d.Time(), d.Time(), d.Dur(), d.Dur(), string(d.Fixed(2))}
	want := []any{byte(7), true, false, uint64(math.MaxUint64), int64(math.MinInt64), uint16(0xbeef), uint64(0xdeadbeefcafef00d), -2.5, "héllo", []byte{1, 2, 3}, []byte(nil),
		time.Unix(0, now.UnixNano()), time.Time{}, 1500 * time.Microsecond, time.Duration(0), "xy"}
	if err := d.Done(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	if d.Offset() != len(e) || len(d.Rest()) != 0 {
		t.Fatalf("offset %d of %d, %d bytes left", d.Offset(), len(e), len(d.Rest()))
	}
}

// TestEncoderAppends: Encoder(b) appends to b, and an Encoder is a []byte.
func TestEncoderAppends(t *testing.T) {
	e := Encoder([]byte("ab"))
	e.Str("c")
	var b []byte = e
	if !bytes.Equal(b, []byte{'a', 'b', 1, 'c'}) {
		t.Fatalf("%q", b)
	}
}

func TestDecoderFailures(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		read func(d *Decoder)
		msg  string
	}{
		{"byte", nil, func(d *Decoder) { d.Byte() }, "short input at offset 0"},
		{"bool", []byte{2}, func(d *Decoder) { d.Bool() }, "bad bool at offset 0"},
		{"version", []byte{1, 3}, func(d *Decoder) { d.Byte(); d.Version("entry", 1) }, "entry version 3 at offset 1"},
		{"uvarint truncated", []byte{0x80}, func(d *Decoder) { d.Uvarint() }, "bad uvarint at offset 0"},
		{"uvarint overflow", bytes.Repeat([]byte{0xff}, 11), func(d *Decoder) { d.Uvarint() }, "bad uvarint at offset 0"},
		{"varint", []byte{5, 0x80}, func(d *Decoder) { d.Byte(); d.Varint() }, "bad varint at offset 1"},
		{"fixed", []byte{1, 2, 3}, func(d *Decoder) { d.Fixed(4) }, "short input at offset 0"},
		{"u64", []byte{1, 2, 3, 4, 5, 6, 7}, func(d *Decoder) { d.U64() }, "short input at offset 0"},
		{"u16", []byte{9, 1}, func(d *Decoder) { d.Byte(); d.U16() }, "short input at offset 1"},
		{"nan", []byte{0x7f, 0xf8, 0, 0, 0, 0, 0, 1}, func(d *Decoder) { d.F64() }, "non-finite number at offset 0"},
		{"inf", []byte{0, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0}, func(d *Decoder) { d.Byte(); d.F64() }, "non-finite number at offset 1"},
		{"length over limit", []byte{0, 5, 'a', 'b', 'c', 'd', 'e'}, func(d *Decoder) { d.Byte(); d.Str(4) }, "length 5 over limit 4 at offset 1"},
		{"length over input", []byte{5, 'a', 'b'}, func(d *Decoder) { d.Raw(10) }, "length 5 over the 2 bytes left at offset 0"},
		{"count over limit", []byte{3, 0, 0, 0}, func(d *Decoder) { d.Count(2, 1) }, "count 3 over limit 2 at offset 0"},
		{"count over input", []byte{3, 0, 0, 0, 0, 0}, func(d *Decoder) { d.Count(10, 2) }, "count 3 (at least 2 bytes each) over the 5 bytes left at offset 0"},
		{"duration", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, func(d *Decoder) { d.Dur() }, "duration overflow at offset 0"},
		{"trailing", []byte{1, 2, 3}, func(d *Decoder) { d.Byte() }, "2 trailing bytes at offset 1"},
		{"fail", []byte{0xe8, 0x07}, func(d *Decoder) {
			if s := d.Uvarint(); s > 999 {
				d.Fail("status %d", s)
			}
		}, "status 1000 at offset 2"},
		{"first failure sticks", []byte{}, func(d *Decoder) { d.Byte(); d.Fail("later") }, "short input at offset 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecoder(tt.in, errTest)
			tt.read(&d)
			err := d.Done()
			if !errors.Is(err, errTest) {
				t.Fatalf("err = %v, want one wrapping %v", err, errTest)
			}
			if want := "corrupt test value: " + tt.msg; err.Error() != want {
				t.Fatalf("err = %q, want %q", err, want)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Offset > len(tt.in) {
				t.Fatalf("err %v is no *Error within the input", err)
			}
		})
	}
}

func TestAfterFailure(t *testing.T) {
	d := NewDecoder([]byte{0x80}, nil)
	d.Uvarint()
	if d.Byte() != 0 || d.Uvarint() != 0 || d.Varint() != 0 || d.U64() != 0 || d.Str(10) != "" || d.Bytes(10) != nil ||
		d.Count(10, 1) != 0 || !d.Time().IsZero() || d.Dur() != 0 || d.Bool() || d.Fixed(0) != nil {
		t.Fatal("a read after a failure returned a value")
	}
	if err := d.Err(); err == nil || err.Error() != "bad uvarint at offset 0" {
		t.Fatalf("err = %v", err)
	}
	if errors.Unwrap(d.Err()) != nil {
		t.Fatal("an error without a kind unwraps to something")
	}
}

// TestAliasing: Raw and Fixed alias the input with their length as
// capacity, so that appending to them cannot overwrite what follows;
// Bytes copies.
func TestAliasing(t *testing.T) {
	in := []byte{2, 'a', 'b', 'c', 'd', 2, 'e', 'f'}
	d := NewDecoder(in, nil)
	r := d.Raw(2)
	f := d.Fixed(2)
	b := d.Bytes(2)
	if cap(r) != 2 || cap(f) != 2 || &r[0] != &in[1] || &f[0] != &in[3] {
		t.Fatal("Raw or Fixed does not alias the input with a capped capacity")
	}
	b[0] = 'z'
	if in[6] != 'e' {
		t.Fatal("Bytes aliases the input")
	}
	_ = append(r, 'x')
	if in[3] != 'c' {
		t.Fatal("appending to Raw's result wrote into the input")
	}
}

// FuzzDecoder reads fuzzed input with a fuzzed sequence of reads. It must
// never panic nor read past the input; a failure must wrap the kind and
// lie within the input; what decodes must encode again to input that
// decodes to the same values.
func FuzzDecoder(f *testing.F) {
	var e Encoder
	e.Byte(1)
	e.Str("abc")
	e.Uvarint(300)
	e.Varint(-5)
	e.Time(time.Unix(5, 6))
	e.Dur(time.Second)
	e.U64(42)
	e.F64(0.5)
	e.Bool(true)
	f.Add([]byte{0, 8, 2, 3, 11, 12, 6, 7, 1}, []byte(e))
	f.Add([]byte{9, 4, 5, 10}, []byte{3, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, ops, in []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		// Varint reads what encoding/binary reads.
		if v, n := binary.Varint(in); n > 0 {
			d := NewDecoder(in, errTest)
			if got := d.Varint(); got != v || d.Offset() != n {
				t.Fatalf("Varint %d at %d, encoding/binary %d at %d", got, d.Offset(), v, n)
			}
		}
		d := NewDecoder(in, errTest)
		vals := readAll(&d, ops)
		if d.Offset() < 0 || d.Offset() > len(in) {
			t.Fatalf("offset %d of %d", d.Offset(), len(in))
		}
		if err := d.Err(); err != nil {
			var ce *Error
			if !errors.Is(err, errTest) || !errors.As(err, &ce) || ce.Offset < 0 || ce.Offset > len(in) {
				t.Fatalf("err %v", err)
			}
			return
		}
		var again Encoder
		writeAll(&again, vals)
		d2 := NewDecoder(again, errTest)
		vals2 := readAll(&d2, ops)
		if err := d2.Done(); err != nil {
			t.Fatalf("re-decoding %x: %v", []byte(again), err)
		}
		if !reflect.DeepEqual(vals, vals2) {
			t.Fatalf("values %v decode again as %v", vals, vals2)
		}
	})
}

// readAll reads one value for each op, as op%13 chooses.
func readAll(d *Decoder, ops []byte) []any {
	vals := make([]any, len(ops))
	for i, op := range ops {
		switch op % 13 {
		case 0:
			vals[i] = d.Byte()
		case 1:
			vals[i] = d.Bool()
		case 2:
			vals[i] = d.Uvarint()
		case 3:
			vals[i] = d.Varint()
		case 4:
			vals[i] = d.U16()
		case 5:
			vals[i] = fixed64(d.U64())
		case 6:
			vals[i] = d.F64()
		case 7:
			vals[i] = d.Str(int(op))
		case 8:
			vals[i] = d.Bytes(int(op))
		case 9:
			n := d.Count(int(op), 2)
			vals[i] = counted{n, fixedBytes(d.Fixed(2 * n))}
		case 10:
			vals[i] = fixedBytes(d.Fixed(int(op % 5)))
		case 11:
			vals[i] = d.Time()
		case 12:
			vals[i] = d.Dur()
		}
	}
	return vals
}

// writeAll writes what readAll read.
func writeAll(e *Encoder, vals []any) {
	for _, v := range vals {
		switch v := v.(type) {
		case byte:
			e.Byte(v)
		case bool:
			e.Bool(v)
		case uint64:
			e.Uvarint(v)
		case int64:
			e.Varint(v)
		case uint16:
			e.U16(v)
		case float64:
			e.F64(v)
		case []byte:
			e.Bytes(v)
		case counted:
			e.Uvarint(uint64(v.n))
			*e = append(*e, v.items...)
		case time.Time:
			e.Time(v)
		case time.Duration:
			e.Dur(v)
		case fixed64:
			e.U64(uint64(v))
		case fixedBytes:
			*e = append(*e, v...)
		case string:
			e.Str(v)
		}
	}
}

// The values of U64 and Fixed, told apart from Uvarint's and Bytes', and
// a Count with the 2-byte items it counts.
type (
	fixed64    uint64
	fixedBytes string
	counted    struct {
		n     int
		items fixedBytes
	}
)

func TestFinish(t *testing.T) {
	d := NewDecoder([]byte{3}, errTest)
	if v, err := Finish(&d, d.Str(8)); !errors.Is(err, errTest) || v != "" {
		t.Fatalf("v %q, err %v; want the failure", v, err)
	}
	d = NewDecoder([]byte{3}, errTest)
	if v, err := Finish(&d, d.Byte()); err != nil || v != 3 {
		t.Fatalf("v %d, err %v", v, err)
	}
	d = NewDecoder([]byte{3, 4}, errTest)
	if v, err := Finish(&d, d.Byte()); !errors.Is(err, errTest) || v != 0 {
		t.Fatalf("v %d, err %v; want the zero value and a trailing-bytes failure", v, err)
	}
}
