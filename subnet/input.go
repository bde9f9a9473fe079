package subnet

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// Format is the format of an input to the Builder.
type Format uint8

// Input formats.
const (
	FormatAuto      Format = iota // detect from the content
	FormatDelegated               // RIR statistics exchange format, standard or extended, and IANA's file
	FormatRPSL                    // RPSL objects (inetnum, inet6num, organisation)
	FormatIP2ASN                  // CSV rows range_start,range_end,asn,organisation
)

var formatNames = []string{"auto", "delegated", "rpsl", "ip2asn"}

// String returns the format's name as accepted by ParseFormat.
func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("format(%d)", f)
}

// ParseFormat parses a format name: auto, delegated, rpsl or ip2asn.
func ParseFormat(s string) (Format, error) {
	for i, n := range formatNames {
		if strings.EqualFold(s, n) {
			return Format(i), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want one of %s)", ErrUnknownFormat, s, strings.Join(formatNames, ", "))
}

// maxLine bounds one line of any input. Real lines are under 300 bytes;
// longer ones are reported as malformed and skipped.
const maxLine = 64 << 10

// sniffLen is how much of an input format detection looks at.
const sniffLen = 64 << 10

// openInput wraps r: it decompresses gzip transparently (detected by its
// magic bytes, not the file name), bounds the decompressed size to limit,
// and detects the format when f is FormatAuto.
func openInput(name string, r io.Reader, f Format, limit int64) (*bufio.Reader, Format, func() error, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	closer := func() error { return nil }
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, 0, nil, fmt.Errorf("%s: reading gzip header: %w", name, err)
		}
		closer = zr.Close
		br = bufio.NewReaderSize(zr, 256<<10)
	}
	br = bufio.NewReaderSize(&limitedReader{r: br, n: limit, limit: limit, name: name}, 256<<10)
	if f == FormatAuto {
		head, err := br.Peek(sniffLen)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
			return nil, 0, nil, errors.Join(fmt.Errorf("%s: %w", name, err), closer())
		}
		f = detect(head)
		if f == FormatAuto && hasContent(head) {
			return nil, 0, nil, errors.Join(fmt.Errorf("%s: %w: not a delegated file, RPSL or an ip2asn CSV", name, ErrUnknownFormat), closer())
		}
	}
	return br, f, closer, nil
}

// detect guesses the format from the first content line of head.
func detect(head []byte) Format {
	for len(head) > 0 {
		line := head
		if i := bytes.IndexByte(head, '\n'); i >= 0 {
			line, head = head[:i], head[i+1:]
		} else {
			head = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' || line[0] == '%' {
			continue
		}
		if i := bytes.IndexByte(line, '|'); i > 0 && (isVersion(string(line[:i])) || bytes.Count(line, []byte{'|'}) >= 5) {
			return FormatDelegated
		}
		if i := bytes.IndexByte(line, ','); i > 0 {
			if _, err := netip.ParseAddr(string(line[:i])); err == nil {
				return FormatIP2ASN
			}
		}
		if i := bytes.IndexByte(line, ':'); i > 0 && isAttrName(line[:i]) {
			return FormatRPSL
		}
		return FormatAuto
	}
	return FormatAuto
}

// hasContent reports whether head has a line that is neither blank nor a
// comment. An input without one (an RPSL dump of a registry with no
// objects, say) is empty, whatever its format.
func hasContent(head []byte) bool {
	for _, line := range bytes.Split(head, []byte{'\n'}) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' && line[0] != '%' {
			return true
		}
	}
	return false
}

// isVersion reports whether s looks like a delegated file's format version
// ("2", "2.3").
func isVersion(s string) bool {
	if s == "" || len(s) > 8 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && s[i] != '.' {
			return false
		}
	}
	return s[0] != '.'
}

func isAttrName(b []byte) bool {
	if len(b) > 64 {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// limitedReader fails with ErrTooLarge once more than n bytes were read.
type limitedReader struct {
	r        io.Reader
	n, limit int64
	name     string
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		// Allow the reader to report a clean EOF right at the limit.
		var one [1]byte
		if n, err := l.r.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%s: %w: more than %d bytes after decompression", l.name, ErrTooLarge, l.limit)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// lineReader yields the lines of an input without their line terminators,
// numbering them from 1. A line longer than maxLine is yielded as nil with
// tooLong set, and its remainder is skipped.
type lineReader struct {
	r       *bufio.Reader
	n       int
	tooLong bool
	buf     []byte
}

// next returns the next line, or io.EOF after the last one.
func (l *lineReader) next() ([]byte, error) {
	l.tooLong = false
	l.buf = l.buf[:0]
	for {
		chunk, err := l.r.ReadSlice('\n')
		if len(l.buf)+len(chunk) > maxLine {
			l.tooLong = true
		} else {
			l.buf = append(l.buf, chunk...)
		}
		switch {
		case err == nil:
			l.n++
			return l.trim(), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(l.buf) == 0 && !l.tooLong {
				return nil, io.EOF
			}
			l.n++
			return l.trim(), nil
		default:
			return nil, err
		}
	}
}

func (l *lineReader) trim() []byte {
	if l.tooLong {
		return nil
	}
	b := l.buf
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}
