package subnet

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/klauspost/compress/zstd"
)

// Snapshot file layout (all integers unsigned varints unless noted):
//
//	magic        8 bytes "MICRASN\n"
//	version      1
//	meta length, meta   build metadata, not covered by the id
//	id           32 bytes: SHA-256 of the uncompressed body
//	body length  bytes of the uncompressed body
//	body         one zstd frame
//
// The body is the canonical encoding of the tree, column by column so that
// it compresses well:
//
//	"MSB1"
//	registries   count, then strings (length, bytes), sorted
//	statuses     count, then strings, sorted
//	orgs         count, then (key, name) string pairs, sorted by key
//	IPv4 nodes, then IPv6 nodes, each family as:
//	  count of nodes below the root, then per column, node by node in preorder:
//	  start - previous start; end - start  (IPv6: high and low 64 bits each)
//	  org index + 1 (0 for none); asn; country (2 raw bytes); registry index
//	  (1 byte); status index (1 byte); layer (1 byte)
const (
	snapMagic   = "MICRASN\n"
	snapVersion = 1
	bodyMagic   = "MSB1"

	// MaxSnapshotSize bounds the decompressed body of a snapshot in bytes.
	// The full real data set encodes to about 15 MB.
	MaxSnapshotSize = 1 << 30
)

// Meta is a snapshot's build metadata. It is not part of the snapshot id.
type Meta struct {
	Built     time.Time     // when the tree was built, UTC, whole seconds
	BuildTime time.Duration // how long building took
	Sources   []string      // input names in the order they were added
}

// WriteSnapshot writes t in the snapshot format to w.
func (t *Tree) WriteSnapshot(w io.Writer) error {
	body := t.encodeBody()
	var hdr []byte
	hdr = append(hdr, snapMagic...)
	hdr = binary.AppendUvarint(hdr, snapVersion)
	meta := t.meta.encode()
	hdr = binary.AppendUvarint(hdr, uint64(len(meta)))
	hdr = append(hdr, meta...)
	hdr = append(hdr, t.id[:]...)
	hdr = binary.AppendUvarint(hdr, uint64(len(body)))
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return err
	}
	if _, err := zw.Write(body); err != nil {
		return errors.Join(err, zw.Close())
	}
	return zw.Close()
}

// ReadSnapshot reads a snapshot written by WriteSnapshot, verifying its
// structure and its id. The input is untrusted: any inconsistency is an
// error wrapping ErrCorruptSnapshot.
func ReadSnapshot(r io.Reader) (*Tree, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSnapshotSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSnapshotSize {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, MaxSnapshotSize)
	}
	return DecodeSnapshot(data)
}

// DecodeSnapshot decodes a snapshot held in memory; see ReadSnapshot.
func DecodeSnapshot(data []byte) (*Tree, error) {
	d := decoder{b: data}
	if string(d.bytes(len(snapMagic))) != snapMagic {
		return nil, errCorrupt("not a micra subnet snapshot (bad magic)")
	}
	if v := d.uvarint(); v != snapVersion {
		if d.err != nil {
			return nil, errCorrupt("truncated header")
		}
		return nil, errCorrupt(fmt.Sprintf("unsupported snapshot version %d (this build reads version %d)", v, snapVersion))
	}
	metaBytes := d.bytes(d.length())
	var id SnapshotID
	copy(id[:], d.bytes(len(id)))
	bodyLen := d.uvarint()
	if d.err != nil {
		return nil, errCorrupt("truncated header")
	}
	if bodyLen > MaxSnapshotSize {
		return nil, fmt.Errorf("%w: body of %d bytes exceeds %d", ErrCorruptSnapshot, bodyLen, MaxSnapshotSize)
	}
	meta, err := decodeMeta(metaBytes)
	if err != nil {
		return nil, err
	}
	zr, err := zstd.NewReader(bytes.NewReader(d.b), zstd.WithDecoderMaxMemory(MaxSnapshotSize), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	body := make([]byte, bodyLen)
	if _, err := io.ReadFull(zr, body); err != nil {
		return nil, fmt.Errorf("%w: body: %v", ErrCorruptSnapshot, err)
	}
	var extra [1]byte
	if n, err := zr.Read(extra[:]); n != 0 || (err != nil && !errors.Is(err, io.EOF)) {
		return nil, errCorrupt("data after the body")
	}
	if sha256.Sum256(body) != id {
		return nil, errCorrupt("content does not match the snapshot id")
	}
	t, err := decodeBody(body)
	if err != nil {
		return nil, err
	}
	t.id = id
	t.meta = meta
	return t, nil
}

func (m Meta) encode() []byte {
	var b []byte
	b = binary.AppendVarint(b, m.Built.Unix())
	b = binary.AppendUvarint(b, uint64(max(m.BuildTime, 0)))
	b = binary.AppendUvarint(b, uint64(len(m.Sources)))
	for _, s := range m.Sources {
		b = appendString(b, s)
	}
	return b
}

func decodeMeta(b []byte) (Meta, error) {
	d := decoder{b: b}
	var m Meta
	if sec := d.varint(); sec != 0 {
		m.Built = time.Unix(sec, 0).UTC()
	}
	m.BuildTime = time.Duration(d.uvarint())
	n := d.count(1)
	for i := 0; i < n && d.err == nil; i++ {
		m.Sources = append(m.Sources, d.string())
	}
	if d.err != nil {
		return Meta{}, errCorrupt("metadata: " + d.err.Error())
	}
	return m, nil
}

// contentHash returns the snapshot id of t.
func (t *Tree) contentHash() SnapshotID { return sha256.Sum256(t.encodeBody()) }

// encodeBody returns the canonical encoding of t's content.
func (t *Tree) encodeBody() []byte {
	b := make([]byte, 0, 16*len(t.start)+32*len(t.orgs))
	b = append(b, bodyMagic...)
	for _, tab := range [][]string{t.registries, t.statuses} {
		b = binary.AppendUvarint(b, uint64(len(tab)))
		for _, s := range tab {
			b = appendString(b, s)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(t.orgs)))
	for _, o := range t.orgs {
		b = appendString(b, o.key)
		b = appendString(b, o.name)
	}
	for _, fam := range [2][2]int{{1, t.n4}, {t.n4 + 1, len(t.start)}} {
		lo, hi := fam[0], fam[1]
		is4 := lo == 1
		b = binary.AppendUvarint(b, uint64(hi-lo))
		prev := key{}
		for i := lo; i < hi; i++ {
			b = appendKey(b, t.start[i].sub(prev), is4)
			prev = t.start[i]
		}
		for i := lo; i < hi; i++ {
			b = appendKey(b, t.end[i].sub(t.start[i]), is4)
		}
		for i := lo; i < hi; i++ {
			b = binary.AppendUvarint(b, uint64(t.attrs[i].org+1))
		}
		for i := lo; i < hi; i++ {
			b = binary.AppendUvarint(b, uint64(t.attrs[i].asn))
		}
		for i := lo; i < hi; i++ {
			b = append(b, t.attrs[i].cc[:]...)
		}
		for i := lo; i < hi; i++ {
			b = append(b, t.attrs[i].reg)
		}
		for i := lo; i < hi; i++ {
			b = append(b, t.attrs[i].status)
		}
		for i := lo; i < hi; i++ {
			b = append(b, byte(t.attrs[i].layer))
		}
	}
	return b
}

// decodeBody decodes the canonical encoding and rebuilds the derived arrays.
func decodeBody(body []byte) (*Tree, error) {
	d := decoder{b: body}
	if string(d.bytes(len(bodyMagic))) != bodyMagic {
		return nil, errCorrupt("bad body magic")
	}
	t := &Tree{}
	for _, tab := range []*[]string{&t.registries, &t.statuses} {
		n := d.count(1)
		if n > 256 {
			return nil, errCorrupt("more than 256 registries or statuses")
		}
		for i := 0; i < n && d.err == nil; i++ {
			*tab = append(*tab, d.string())
		}
	}
	if d.err == nil && (len(t.registries) == 0 || len(t.statuses) == 0) {
		return nil, errCorrupt("empty registry or status table")
	}
	n := d.count(2)
	t.orgs = make([]org, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		o := org{key: d.string(), name: d.string()}
		if o.key == "" || (i > 0 && t.orgs[i-1].key >= o.key) {
			return nil, errCorrupt("organisation keys empty or not strictly sorted")
		}
		t.orgs = append(t.orgs, o)
	}
	for f := 0; f < 2 && d.err == nil; f++ {
		is4 := f == 0
		minNode := 9 // bytes per node at least, all columns together
		if !is4 {
			minNode = 11
		}
		n := d.count(minNode)
		if d.err != nil {
			break
		}
		base := len(t.start)
		if is4 {
			t.n4 = n + 1
		}
		// The root of the family.
		t.start = append(t.start, key{})
		t.end = append(t.end, maxKey(is4))
		t.attrs = append(t.attrs, attr{org: -1, layer: LayerRoot})
		t.start = append(t.start, make([]key, n)...)
		t.end = append(t.end, make([]key, n)...)
		t.attrs = append(t.attrs, make([]attr, n)...)
		prev := key{}
		for i := base + 1; i <= base+n; i++ {
			delta := d.key(is4)
			s := prev.add(delta)
			if s.less(prev) || maxKey(is4).less(s) {
				d.fail("start beyond the address family")
			}
			t.start[i], prev = s, s
		}
		for i := base + 1; i <= base+n; i++ {
			size := d.key(is4)
			e := t.start[i].add(size)
			if e.less(t.start[i]) || maxKey(is4).less(e) {
				d.fail("end beyond the address family")
			}
			t.end[i] = e
		}
		for i := base + 1; i <= base+n; i++ {
			o := d.uvarint()
			if o > uint64(len(t.orgs)) {
				d.fail("organisation index out of range")
			}
			t.attrs[i].org = int32(o) - 1
		}
		for i := base + 1; i <= base+n; i++ {
			a := d.uvarint()
			if a > 1<<32-1 {
				d.fail("asn out of range")
			}
			t.attrs[i].asn = uint32(a)
		}
		for i := base + 1; i <= base+n; i++ {
			copy(t.attrs[i].cc[:], d.bytes(2))
		}
		for i := base + 1; i <= base+n; i++ {
			t.attrs[i].reg = d.byte()
			if int(t.attrs[i].reg) >= len(t.registries) {
				d.fail("registry index out of range")
			}
		}
		for i := base + 1; i <= base+n; i++ {
			t.attrs[i].status = d.byte()
			if int(t.attrs[i].status) >= len(t.statuses) {
				d.fail("status index out of range")
			}
		}
		for i := base + 1; i <= base+n; i++ {
			l := Layer(d.byte())
			if l == LayerRoot || l >= numLayers {
				d.fail("unknown layer")
			}
			t.attrs[i].layer = l
		}
	}
	if d.err != nil {
		return nil, errCorrupt(d.err.Error())
	}
	if len(d.b) != 0 {
		return nil, errCorrupt("trailing bytes after the body")
	}
	if err := t.finish(); err != nil {
		return nil, err
	}
	return t, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendKey(b []byte, k key, is4 bool) []byte {
	if !is4 {
		b = binary.AppendUvarint(b, k.hi)
	}
	return binary.AppendUvarint(b, k.lo)
}

// decoder reads from untrusted bytes; the first error sticks and later
// reads return zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(msg string) {
	if d.err == nil {
		d.err = errors.New(msg)
	}
	d.b = nil
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong varint")
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
		d.fail("truncated or overlong varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a count of items that take at least minBytes each, rejecting
// counts the remaining input cannot hold.
func (d *decoder) count(minBytes int) int {
	v := d.uvarint()
	if d.err == nil && v > uint64(len(d.b)/minBytes) {
		d.fail("count larger than the remaining data")
		return 0
	}
	return int(v)
}

// length reads a byte length that must fit in the remaining input.
func (d *decoder) length() int { return d.count(1) }

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail("truncated")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	b := d.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (d *decoder) string() string { return string(d.bytes(d.length())) }

func (d *decoder) key(is4 bool) key {
	var k key
	if !is4 {
		k.hi = d.uvarint()
	}
	k.lo = d.uvarint()
	if is4 && k.lo > 1<<32-1 {
		d.fail("IPv4 value out of range")
	}
	return k
}
