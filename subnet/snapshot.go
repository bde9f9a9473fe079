package subnet

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/micra-net/micra/internal/codec"
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
	hdr := codec.Encoder(snapMagic)
	hdr.Uvarint(snapVersion)
	hdr.Bytes(t.meta.encode())
	hdr = append(hdr, t.id[:]...)
	hdr.Uvarint(uint64(len(body)))
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
	d := codec.NewDecoder(data, ErrCorruptSnapshot)
	if string(d.Fixed(len(snapMagic))) != snapMagic {
		return nil, errCorrupt("not a micra subnet snapshot (bad magic)")
	}
	if v := d.Uvarint(); v != snapVersion {
		if d.Err() != nil {
			return nil, errCorrupt("truncated header")
		}
		return nil, errCorrupt(fmt.Sprintf("unsupported snapshot version %d (this build reads version %d)", v, snapVersion))
	}
	metaBytes := d.Raw(noLimit)
	var id SnapshotID
	copy(id[:], d.Fixed(len(id)))
	bodyLen := d.Uvarint()
	if d.Err() != nil {
		return nil, errCorrupt("truncated header")
	}
	if bodyLen > MaxSnapshotSize {
		return nil, fmt.Errorf("%w: body of %d bytes exceeds %d", ErrCorruptSnapshot, bodyLen, MaxSnapshotSize)
	}
	meta, err := decodeMeta(metaBytes)
	if err != nil {
		return nil, err
	}
	zr, err := zstd.NewReader(bytes.NewReader(d.Rest()), zstd.WithDecoderMaxMemory(MaxSnapshotSize), zstd.WithDecoderConcurrency(1))
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
	var e codec.Encoder
	e.Varint(m.Built.Unix())
	e.Uvarint(uint64(max(m.BuildTime, 0)))
	e.Uvarint(uint64(len(m.Sources)))
	for _, s := range m.Sources {
		e.Str(s)
	}
	return e
}

func decodeMeta(b []byte) (Meta, error) {
	d := codec.NewDecoder(b, nil)
	var m Meta
	if sec := d.Varint(); sec != 0 {
		m.Built = time.Unix(sec, 0).UTC()
	}
	m.BuildTime = time.Duration(d.Uvarint())
	n := d.Count(noLimit, 1)
	for i := 0; i < n && d.Err() == nil; i++ {
		m.Sources = append(m.Sources, d.Str(noLimit))
	}
	if err := d.Err(); err != nil {
		return Meta{}, errCorrupt("metadata: " + err.Error())
	}
	return m, nil
}

// contentHash returns the snapshot id of t.
func (t *Tree) contentHash() SnapshotID { return sha256.Sum256(t.encodeBody()) }

// encodeBody returns the canonical encoding of t's content.
func (t *Tree) encodeBody() []byte {
	e := make(codec.Encoder, 0, 16*len(t.start)+32*len(t.orgs))
	e = append(e, bodyMagic...)
	for _, tab := range [][]string{t.registries, t.statuses} {
		e.Uvarint(uint64(len(tab)))
		for _, s := range tab {
			e.Str(s)
		}
	}
	e.Uvarint(uint64(len(t.orgs)))
	for _, o := range t.orgs {
		e.Str(o.key)
		e.Str(o.name)
	}
	for _, fam := range [2][2]int{{1, t.n4}, {t.n4 + 1, len(t.start)}} {
		lo, hi := fam[0], fam[1]
		is4 := lo == 1
		e.Uvarint(uint64(hi - lo))
		prev := key{}
		for i := lo; i < hi; i++ {
			putKey(&e, t.start[i].sub(prev), is4)
			prev = t.start[i]
		}
		for i := lo; i < hi; i++ {
			putKey(&e, t.end[i].sub(t.start[i]), is4)
		}
		for i := lo; i < hi; i++ {
			e.Uvarint(uint64(t.attrs[i].org + 1))
		}
		for i := lo; i < hi; i++ {
			e.Uvarint(uint64(t.attrs[i].asn))
		}
		for i := lo; i < hi; i++ {
			e = append(e, t.attrs[i].cc[:]...)
		}
		for i := lo; i < hi; i++ {
			e.Byte(t.attrs[i].reg)
		}
		for i := lo; i < hi; i++ {
			e.Byte(t.attrs[i].status)
		}
		for i := lo; i < hi; i++ {
			e.Byte(byte(t.attrs[i].layer))
		}
	}
	return e
}

// decodeBody decodes the canonical encoding and rebuilds the derived arrays.
func decodeBody(body []byte) (*Tree, error) {
	d := codec.NewDecoder(body, ErrCorruptSnapshot)
	if string(d.Fixed(len(bodyMagic))) != bodyMagic {
		return nil, errCorrupt("bad body magic")
	}
	t := &Tree{}
	for _, tab := range []*[]string{&t.registries, &t.statuses} {
		n := d.Count(noLimit, 1)
		if n > 256 {
			return nil, errCorrupt("more than 256 registries or statuses")
		}
		for i := 0; i < n && d.Err() == nil; i++ {
			*tab = append(*tab, d.Str(noLimit))
		}
	}
	if d.Err() == nil && (len(t.registries) == 0 || len(t.statuses) == 0) {
		return nil, errCorrupt("empty registry or status table")
	}
	n := d.Count(noLimit, 2)
	t.orgs = make([]org, 0, n)
	for i := 0; i < n && d.Err() == nil; i++ {
		o := org{key: d.Str(noLimit), name: d.Str(noLimit)}
		if o.key == "" || (i > 0 && t.orgs[i-1].key >= o.key) {
			return nil, errCorrupt("organisation keys empty or not strictly sorted")
		}
		t.orgs = append(t.orgs, o)
	}
	for f := 0; f < 2 && d.Err() == nil; f++ {
		is4 := f == 0
		minNode := 9 // bytes per node at least, all columns together
		if !is4 {
			minNode = 11
		}
		n := d.Count(noLimit, minNode)
		if d.Err() != nil {
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
			delta := readKey(&d, is4)
			s := prev.add(delta)
			if s.less(prev) || maxKey(is4).less(s) {
				d.Fail("start beyond the address family")
			}
			t.start[i], prev = s, s
		}
		for i := base + 1; i <= base+n; i++ {
			size := readKey(&d, is4)
			e := t.start[i].add(size)
			if e.less(t.start[i]) || maxKey(is4).less(e) {
				d.Fail("end beyond the address family")
			}
			t.end[i] = e
		}
		for i := base + 1; i <= base+n; i++ {
			o := d.Uvarint()
			if o > uint64(len(t.orgs)) {
				d.Fail("organisation index out of range")
			}
			t.attrs[i].org = int32(o) - 1
		}
		for i := base + 1; i <= base+n; i++ {
			a := d.Uvarint()
			if a > 1<<32-1 {
				d.Fail("asn out of range")
			}
			t.attrs[i].asn = uint32(a)
		}
		for i := base + 1; i <= base+n; i++ {
			copy(t.attrs[i].cc[:], d.Fixed(2))
		}
		for i := base + 1; i <= base+n; i++ {
			t.attrs[i].reg = d.Byte()
			if int(t.attrs[i].reg) >= len(t.registries) {
				d.Fail("registry index out of range")
			}
		}
		for i := base + 1; i <= base+n; i++ {
			t.attrs[i].status = d.Byte()
			if int(t.attrs[i].status) >= len(t.statuses) {
				d.Fail("status index out of range")
			}
		}
		for i := base + 1; i <= base+n; i++ {
			l := Layer(d.Byte())
			if l == LayerRoot || l >= numLayers {
				d.Fail("unknown layer")
			}
			t.attrs[i].layer = l
		}
	}
	if err := d.Done(); err != nil {
		return nil, err
	}
	if err := t.finish(); err != nil {
		return nil, err
	}
	return t, nil
}

// noLimit bounds a count or a length by the input left alone.
const noLimit = math.MaxInt

// putKey appends a column value of a node: the high 64 bits of an IPv6
// key and then the low ones, or an IPv4 key alone.
func putKey(e *codec.Encoder, k key, is4 bool) {
	if !is4 {
		e.Uvarint(k.hi)
	}
	e.Uvarint(k.lo)
}

// readKey reads what putKey wrote; an IPv4 value over 32 bits fails.
func readKey(d *codec.Decoder, is4 bool) key {
	var k key
	if !is4 {
		k.hi = d.Uvarint()
	}
	k.lo = d.Uvarint()
	if is4 && k.lo > 1<<32-1 {
		d.Fail("IPv4 value out of range")
	}
	return k
}
