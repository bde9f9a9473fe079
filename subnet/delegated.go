package subnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
)

// parser reads one input into a stage.
type parser struct {
	ctx context.Context
	b   *Builder
	st  *stage
	lr  lineReader
}

// skip records a malformed line: an error in strict mode, otherwise a count
// and, for the first few, a detail in the report.
func (p *parser) skip(line int, format string, args ...any) error {
	e := LineError{Input: p.st.report.Name, Line: line, Reason: fmt.Sprintf(format, args...)}
	if p.b.cfg.strict {
		return &e
	}
	rep := p.st.report
	rep.Skipped++
	if len(rep.Issues) < p.b.cfg.maxIssues {
		rep.Issues = append(rep.Issues, e)
	}
	return nil
}

// checkCtx is called every few thousand lines.
func (p *parser) checkCtx() error {
	if p.lr.n&4095 == 0 {
		return p.ctx.Err()
	}
	return nil
}

// line reads the next line and its number: io.EOF at the end, an error
// naming the input and line, or the context's. long says the line was over
// maxLine bytes (and is cut).
func (p *parser) line() (line []byte, n int, long bool, err error) {
	line, err = p.lr.next()
	if errors.Is(err, io.EOF) {
		return nil, p.lr.n, false, err
	}
	if err != nil {
		return nil, p.lr.n, false, fmt.Errorf("%s:%d: %w", p.st.report.Name, p.lr.n+1, err)
	}
	if err := p.checkCtx(); err != nil {
		return nil, p.lr.n, false, err
	}
	return line, p.lr.n, p.lr.tooLong, nil
}

// contentLine reads the next line that is neither blank nor a '#' comment,
// trimmed, skipping (and reporting) lines over maxLine bytes; io.EOF at the
// end.
func (p *parser) contentLine() ([]byte, int, error) {
	for {
		line, n, long, err := p.line()
		if err != nil {
			return nil, n, err
		}
		if long {
			if err := p.skip(n, "line longer than %d bytes", maxLine); err != nil {
				return nil, n, err
			}
			continue
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		return line, n, nil
	}
}

// add appends a parsed range of the given family to the stage.
func (p *parser) add(r rec, is4 bool) {
	if is4 {
		p.st.v4 = append(p.st.v4, r)
	} else {
		p.st.v6 = append(p.st.v6, r)
	}
}

// delegated parses the RIR statistics exchange format: an optional block of
// comment lines, one version line, summary lines and records, in the
// standard (7 fields) or extended (8 fields: opaque-id, then optional
// extensions) form. IANA's file has the same shape with the designated
// registry in the status column.
func (p *parser) delegated() error {
	rep := p.st.report
	sawVersion := false
	for {
		line, n, err := p.contentLine()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		var fields [16][]byte
		nf := splitFields(line, '|', fields[:])
		f := fields[:min(nf, len(fields))]
		if !sawVersion {
			// The first content line must be the version line:
			// version|registry|serial|records|startdate|enddate|UTCoffset
			if nf != 7 || !isVersion(string(f[0])) {
				if err := p.skip(n, "expected the version line \"version|registry|serial|records|startdate|enddate|UTCoffset\""); err != nil {
					return err
				}
				sawVersion = true // parse the rest as records anyway
				continue
			}
			sawVersion = true
			rep.Version = string(f[0])
			rep.Registry = string(f[1])
			rep.Serial = string(f[2])
			rep.EndDate = string(f[5])
			if c, err := strconv.Atoi(string(f[3])); err == nil && c >= 0 {
				rep.HeaderRecords = c
			} else if err := p.skip(n, "version line: record count %q is not a number", f[3]); err != nil {
				return err
			}
			if rep.Registry == "iana" {
				p.st.layer = LayerIANA
			}
			p.st.date = rep.EndDate
			continue
		}
		// Summary: registry|*|type|*|count|summary
		if nf == 6 && string(f[5]) == "summary" {
			c, err := strconv.Atoi(string(f[4]))
			if err != nil || c < 0 {
				if err := p.skip(n, "summary line: count %q is not a number", f[4]); err != nil {
					return err
				}
				continue
			}
			if rep.Summary == nil {
				rep.Summary = map[string]int{}
			}
			rep.Summary[string(f[2])] = c
			continue
		}
		if nf < 7 || nf > len(fields) {
			if err := p.skip(n, "record has %d fields, want 7 or 8 (registry|cc|type|start|value|date|status[|opaque-id])", nf); err != nil {
				return err
			}
			continue
		}
		if err := p.delegatedRecord(n, f); err != nil {
			return err
		}
	}
	if !sawVersion {
		return p.skip(p.lr.n, "no version line")
	}
	return nil
}

// delegatedRecord parses registry|cc|type|start|value|date|status[|opaque-id[|...]].
func (p *parser) delegatedRecord(n int, f [][]byte) error {
	registry, cc, typ, start, value, date, status := f[0], f[1], f[2], f[3], f[4], f[5], f[6]
	if !isLowerWord(registry) {
		return p.skip(n, "registry %q is not a lowercase name", registry)
	}
	var ccb [2]byte
	switch {
	case len(cc) == 0:
	case len(cc) == 2 && isUpper(cc[0]) && isUpper(cc[1]):
		ccb = [2]byte{cc[0], cc[1]}
	default:
		return p.skip(n, "country code %q is not two capital letters", cc)
	}
	if len(date) != 0 && !isDigits(date, 8) {
		return p.skip(n, "date %q is not YYYYMMDD", date)
	}
	if !isLowerWord(status) {
		return p.skip(n, "status %q is not a lowercase word", status)
	}
	rep := p.st.report
	r := rec{org: -1, cc: ccb, line: int32(n)}
	is4 := false
	switch string(typ) {
	case "asn":
		if _, err := strconv.ParseUint(string(start), 10, 32); err != nil {
			return p.skip(n, "asn %q is not a number", start)
		}
		rep.Records["asn"]++
		return nil
	case "ipv4":
		a, err := netip.ParseAddr(string(start))
		if err != nil || !a.Is4() {
			return p.skip(n, "start %q is not an IPv4 address", start)
		}
		c, err := strconv.ParseUint(string(value), 10, 64)
		if err != nil || c == 0 {
			return p.skip(n, "ipv4 count %q is not a positive number", value)
		}
		s := keyOf(a)
		if c-1 > maxKey(true).lo-s.lo {
			return p.skip(n, "ipv4 range %s + %d runs past 255.255.255.255", a, c)
		}
		r.s, r.e = s, key{lo: s.lo + c - 1}
		is4 = true
		rep.Records["ipv4"]++
	case "ipv6":
		a, err := netip.ParseAddr(string(start))
		if err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" {
			return p.skip(n, "start %q is not an IPv6 address", start)
		}
		bitsN, err := strconv.Atoi(string(value))
		if err != nil || bitsN < 0 || bitsN > 128 {
			return p.skip(n, "ipv6 prefix length %q is not 0-128", value)
		}
		pfx := netip.PrefixFrom(a, bitsN)
		if pfx.Masked().Addr() != a {
			return p.skip(n, "ipv6 start %s is not aligned to /%d", a, bitsN)
		}
		rg := RangeOf(pfx)
		r.s, r.e = keyOf(rg.Start), keyOf(rg.End)
		rep.Records["ipv6"]++
	default:
		return p.skip(n, "type %q is not asn, ipv4 or ipv6", typ)
	}
	reg, st := string(registry), string(status)
	if p.st.layer == LayerIANA {
		// IANA's file names the designated registry in the status column.
		reg = st
		st = ""
		if reg == "ietf" || reg == "iana" {
			st = "reserved"
		}
	}
	if len(f) > 7 && len(f[7]) > 0 {
		if !isPrintable(f[7]) {
			return p.skip(n, "opaque-id %q has unprintable characters", f[7])
		}
		r.org = p.b.internOrg(string(registry) + ":" + string(f[7]))
	}
	var ok bool
	if r.reg, ok = p.b.internReg(reg); !ok {
		return p.skip(n, "too many distinct registries")
	}
	if r.status, ok = p.b.internStatus(st); !ok {
		return p.skip(n, "too many distinct statuses")
	}
	p.add(r, is4)
	return nil
}

// splitFields splits line at sep into out and returns the number of fields,
// which may exceed len(out) (the extra ones are not stored).
func splitFields(line []byte, sep byte, out [][]byte) int {
	n := 0
	for {
		i := bytes.IndexByte(line, sep)
		if i < 0 {
			if n < len(out) {
				out[n] = line
			}
			return n + 1
		}
		if n < len(out) {
			out[n] = line[:i]
		}
		n++
		line = line[i+1:]
	}
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }

func isDigits(b []byte, n int) bool {
	if len(b) != n {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func isLowerWord(b []byte) bool {
	if len(b) == 0 || len(b) > 32 {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func isPrintable(b []byte) bool {
	if len(b) > 256 {
		return false
	}
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}
