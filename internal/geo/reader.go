package geo

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/klauspost/compress/gzip"

	"github.com/micra-net/micra/internal/check"
)

// Defaults and bounds of a Reader.
const (
	// DefaultMaxRows bounds the data rows of a file (DB-IP City Lite IPv4
	// has 6.3 million).
	DefaultMaxRows = 50_000_000
	// DefaultMaxBytes bounds the decompressed bytes of a file (DB-IP City
	// Lite IPv4 is 383 MB).
	DefaultMaxBytes = 4 << 30
	// maxLine bounds one line: real rows are under 200 bytes. A longer line
	// stops the reading with an error; it cannot be skipped without
	// holding it.
	maxLine = 64 << 10
	// maxExamples is how many skipped rows Stats keeps.
	maxExamples = 10
)

// Row is one usable row of a geolocation file.
type Row struct {
	Prefix  netip.Prefix // masked (host bits cleared); a one-address row is a /32 (or /128)
	Lat     float64      // degrees, finite, in [-90, 90]
	Lon     float64      // degrees, finite, in [-180, 180]
	Country string       // ISO 3166 alpha-2 upper-cased, "" when absent
	City    string       // as written, "" when absent
	Line    int          // 1-based line number of the row in the (decompressed) file
}

// Stats reports what a Reader read so far.
type Stats struct {
	Rows     int      // usable rows returned
	Skipped  int      // malformed rows skipped
	Examples []string // the first 10 skipped rows as "name:line: reason"
}

// Option configures a Reader.
type Option func(*config) error

type config struct {
	strict   bool
	maxRows  int
	maxBytes int64
}

// Strict makes a malformed row an error (naming file:line and why)
// instead of being skipped.
func Strict() Option { return func(c *config) error { c.strict = true; return nil } }

// MaxRows bounds the data rows of a file: one more is an error wrapping
// ErrLimit (default DefaultMaxRows).
func MaxRows(n int) Option {
	return func(c *config) error { return check.Set(&c.maxRows, n, check.Positive("max rows", n)) }
}

// MaxBytes bounds the decompressed bytes of a file: more is an error
// wrapping ErrLimit (default DefaultMaxBytes).
func MaxBytes(n int64) Option {
	return func(c *config) error { return check.Set(&c.maxBytes, n, check.Positive("max bytes", n)) }
}

// columns are the positions of the columns a Reader uses; -1 when absent.
type columns struct {
	addr     int
	isPrefix bool
	lat, lon int
	cc, city int
	need     int // fields a row must have: the highest position used + 1
}

// Header names and their aliases, matched case-insensitively.
var (
	prefixNames  = []string{"prefix", "network", "cidr"}
	addrNames    = []string{"ipv4", "ip", "address"}
	latNames     = []string{"latitude", "lat"}
	lonNames     = []string{"longitude", "lon", "lng"}
	countryNames = []string{"country_code", "cc", "country_iso_code"}
	cityNames    = []string{"city", "city_name"}
)

// Reader reads the rows of a geolocation CSV file: a header row, then data
// rows. It is not safe for concurrent use.
type Reader struct {
	name   string
	cfg    config
	closer func() error
	cr     *csv.Reader
	col    columns
	stats  Stats
	rows   int // data rows read, usable or not
	err    error
}

// Open opens the file at path and calls NewReader; Close closes the file.
func Open(path string, opts ...Option) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r, err := NewReader(f, path, opts...)
	if err != nil {
		f.Close()
		return nil, err
	}
	inner := r.closer
	r.closer = func() error { return errors.Join(inner(), f.Close()) }
	return r, nil
}

// NewReader reads the header row of r. name is used in messages
// ("name:line: reason"). gzip is detected by its magic bytes, not by the
// name. It fails, wrapping ErrFormat, when the header has no address
// column (prefix, network or cidr; or ipv4, ip or address) or lacks
// latitude or longitude.
func NewReader(r io.Reader, name string, opts ...Option) (*Reader, error) {
	cfg := config{maxRows: DefaultMaxRows, maxBytes: DefaultMaxBytes}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	gr := &Reader{name: name, cfg: cfg, closer: func() error { return nil }}
	br := bufio.NewReaderSize(r, 256<<10)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: reading gzip header: %v", name, ErrFormat, err)
		}
		gr.closer = zr.Close
		src = zr
	}
	src = &boundReader{r: src, left: cfg.maxBytes, name: name}
	gr.cr = csv.NewReader(bufio.NewReaderSize(src, 256<<10))
	gr.cr.FieldsPerRecord = -1
	gr.cr.ReuseRecord = true
	header, err := gr.cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("%s: %w: empty, no header row", name, ErrFormat)
		} else {
			err = gr.wrap(err)
		}
		return nil, errors.Join(err, gr.closer())
	}
	if gr.col, err = findColumns(header); err != nil {
		return nil, errors.Join(fmt.Errorf("%s:1: %w", name, err), gr.closer())
	}
	return gr, nil
}

// findColumns locates the columns a Reader uses in a header row.
func findColumns(header []string) (columns, error) {
	c := columns{addr: -1, lat: -1, lon: -1, cc: -1, city: -1}
	pfx, ip := -1, -1
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
		set := func(dst *int, names []string) {
			if *dst < 0 && contains(names, h) {
				*dst = i
			}
		}
		set(&pfx, prefixNames)
		set(&ip, addrNames)
		set(&c.lat, latNames)
		set(&c.lon, lonNames)
		set(&c.cc, countryNames)
		set(&c.city, cityNames)
	}
	switch {
	case pfx >= 0:
		c.addr, c.isPrefix = pfx, true
	case ip >= 0:
		c.addr = ip
	default:
		return c, fmt.Errorf("%w: header has no address column (prefix, network, cidr, ipv4, ip or address)", ErrFormat)
	}
	if c.lat < 0 || c.lon < 0 {
		return c, fmt.Errorf("%w: header lacks a latitude or longitude column", ErrFormat)
	}
	c.need = max(c.addr, c.lat, c.lon, c.cc, c.city) + 1
	return c, nil
}

func contains(names []string, h string) bool {
	for _, n := range names {
		if n == h {
			return true
		}
	}
	return false
}

// Close releases the Reader (and the file, for Open). It is safe to call
// more than once.
func (r *Reader) Close() error {
	c := r.closer
	r.closer = func() error { return nil }
	return c()
}

// Stats reports what was read so far.
func (r *Reader) Stats() Stats {
	s := r.stats
	s.Examples = append([]string(nil), s.Examples...)
	return s
}

// Next returns the next usable row, or io.EOF after the last. A malformed
// row is skipped and counted (an error wrapping ErrFormat under Strict).
// After an error other than a skipped row's, Next keeps returning it.
func (r *Reader) Next() (Row, error) {
	for r.err == nil {
		rec, err := r.cr.Read()
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) && !errors.Is(err, errLongLine) && !errors.Is(err, ErrLimit) {
				// A quoting error: the row is malformed, the reader can
				// go on with the next line.
				if serr := r.skip(pe.StartLine, pe.Err.Error()); serr != nil {
					return Row{}, serr
				}
				continue
			}
			r.err = r.wrap(err)
			break
		}
		line, _ := r.cr.FieldPos(0)
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue // a blank line
		}
		r.rows++
		if r.rows > r.cfg.maxRows {
			r.err = fmt.Errorf("%s:%d: %w: more than %d rows", r.name, line, ErrLimit, r.cfg.maxRows)
			break
		}
		row, reason := r.parse(rec)
		if reason != "" {
			if err := r.skip(line, reason); err != nil {
				return Row{}, err
			}
			continue
		}
		row.Line = line
		r.stats.Rows++
		return row, nil
	}
	return Row{}, r.err
}

// skip counts a malformed row, or fails under Strict.
func (r *Reader) skip(line int, reason string) error {
	msg := fmt.Sprintf("%s:%d: %s", r.name, line, reason)
	if r.cfg.strict {
		r.err = fmt.Errorf("%s:%d: %w: %s", r.name, line, ErrFormat, reason)
		return r.err
	}
	r.stats.Skipped++
	if len(r.stats.Examples) < maxExamples {
		r.stats.Examples = append(r.stats.Examples, msg)
	}
	return nil
}

// wrap names the file in a reading error.
func (r *Reader) wrap(err error) error {
	if errors.Is(err, io.EOF) {
		return io.EOF
	}
	if errors.Is(err, errLongLine) {
		line, _ := r.cr.FieldPos(0)
		return fmt.Errorf("%s: %w: a line after line %d is longer than %d bytes", r.name, ErrFormat, line, maxLine)
	}
	if errors.Is(err, ErrLimit) {
		return err
	}
	return fmt.Errorf("%s: %w", r.name, err)
}

// parse turns a record into a Row, or says why it is malformed.
func (r *Reader) parse(rec []string) (Row, string) {
	c := &r.col
	if len(rec) < c.need {
		return Row{}, fmt.Sprintf("%d fields, want at least %d", len(rec), c.need)
	}
	var row Row
	a := strings.TrimSpace(rec[c.addr])
	if c.isPrefix {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return Row{}, fmt.Sprintf("bad prefix %q", clip(a))
		}
		row.Prefix = p.Masked()
	} else {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" {
			return Row{}, fmt.Sprintf("bad address %q", clip(a))
		}
		ip = ip.Unmap()
		row.Prefix = netip.PrefixFrom(ip, ip.BitLen())
	}
	var ok bool
	if row.Lat, ok = coord(rec[c.lat], 90); !ok {
		return Row{}, fmt.Sprintf("bad latitude %q", clip(rec[c.lat]))
	}
	if row.Lon, ok = coord(rec[c.lon], 180); !ok {
		return Row{}, fmt.Sprintf("bad longitude %q", clip(rec[c.lon]))
	}
	if c.cc >= 0 {
		cc := strings.TrimSpace(rec[c.cc])
		if cc != "" && (len(cc) != 2 || !letter(cc[0]) || !letter(cc[1])) {
			return Row{}, fmt.Sprintf("bad country code %q", clip(cc))
		}
		row.Country = strings.ToUpper(cc)
	}
	if c.city >= 0 {
		row.City = strings.TrimSpace(rec[c.city])
	}
	return row, ""
}

// coord parses a coordinate within ±limit degrees.
func coord(s string, limit float64) (float64, bool) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < -limit || v > limit {
		return 0, false
	}
	return v, true
}

func letter(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' }

// clip shortens a field for a message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// errLongLine is returned by boundReader for a line over maxLine bytes.
var errLongLine = errors.New("line too long")

// boundReader bounds the bytes read (ErrLimit) and the length of a line
// (errLongLine), so that no input makes a Reader hold unbounded memory.
type boundReader struct {
	r    io.Reader
	left int64
	run  int // bytes since the last newline
	name string
}

func (b *boundReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, fmt.Errorf("%s: %w: more than its decompressed byte limit", b.name, ErrLimit)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	for i := 0; i < n; {
		j := bytes.IndexByte(p[i:n], '\n')
		if j < 0 {
			b.run += n - i
			break
		}
		if b.run+j > maxLine {
			return n, errLongLine
		}
		b.run = 0
		i += j + 1
	}
	if b.run > maxLine {
		return n, errLongLine
	}
	return n, err
}
