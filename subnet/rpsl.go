package subnet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// Limits on one RPSL object. Real inetnum objects have a few dozen lines.
const (
	maxObjectLines = 4096
	maxObjectBytes = 1 << 20
)

// rpslObject is one RPSL object being read: its first line number and the
// attributes used by the hierarchy (the first occurrence of each).
type rpslObject struct {
	line    int
	class   string
	primary string // the value of the class attribute
	attrs   map[string]string
	nlines  int
	nbytes  int
	bad     string // why the object is malformed, if it is
	last    string // the attribute a continuation line extends
}

// rpslUsed lists the attributes the hierarchy reads; others are ignored.
var rpslUsed = map[string]bool{
	"netname": true, "descr": true, "country": true, "org": true,
	"status": true, "source": true, "org-name": true,
}

// rpsl parses RPSL objects (as in the RIRs' bulk WHOIS files): objects
// separated by blank lines, "attribute: value" lines, continuation lines
// starting with a space, a tab or '+', and '%' or '#' comment lines. It
// takes inetnum and inet6num objects as ranges and organisation objects as
// names for the organisation keys; other classes are counted and ignored.
func (p *parser) rpsl() error {
	var obj *rpslObject
	flush := func() error {
		if obj == nil {
			return nil
		}
		o := obj
		obj = nil
		return p.rpslObject(o)
	}
	for {
		line, n, long, err := p.line()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if long {
			if obj != nil {
				obj.bad = fmt.Sprintf("line %d longer than %d bytes", n, maxLine)
			} else if err := p.skip(n, "line longer than %d bytes", maxLine); err != nil {
				return err
			}
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			if err := flush(); err != nil {
				return err
			}
			continue
		}
		if line[0] == '%' || line[0] == '#' {
			continue
		}
		if obj != nil {
			obj.nlines++
			obj.nbytes += len(line)
			if obj.bad == "" && (obj.nlines > maxObjectLines || obj.nbytes > maxObjectBytes) {
				obj.bad = fmt.Sprintf("object longer than %d lines or %d bytes", maxObjectLines, maxObjectBytes)
			}
		}
		if line[0] == ' ' || line[0] == '\t' || line[0] == '+' {
			if obj == nil {
				if err := p.skip(n, "continuation line outside an object"); err != nil {
					return err
				}
				continue
			}
			if v, ok := obj.attrs[obj.last]; ok && obj.bad == "" {
				obj.attrs[obj.last] = v + " " + string(bytes.TrimSpace(line[1:]))
			}
			continue
		}
		i := bytes.IndexByte(line, ':')
		if i <= 0 || !isAttrName(line[:i]) {
			if obj == nil {
				if err := p.skip(n, "expected \"attribute: value\""); err != nil {
					return err
				}
				continue
			}
			if obj.bad == "" {
				obj.bad = fmt.Sprintf("line %d: expected \"attribute: value\"", n)
			}
			continue
		}
		name := strings.ToLower(string(line[:i]))
		value := string(bytes.TrimSpace(line[i+1:]))
		if obj == nil {
			obj = &rpslObject{line: n, class: name, primary: value, attrs: map[string]string{}, nlines: 1, nbytes: len(line)}
			obj.last = ""
			continue
		}
		obj.last = ""
		if rpslUsed[name] {
			if _, seen := obj.attrs[name]; !seen {
				obj.attrs[name] = value
				obj.last = name
			}
		}
	}
	return flush()
}

// rpslObject turns one complete object into a range or an organisation name.
func (p *parser) rpslObject(o *rpslObject) error {
	rep := p.st.report
	switch o.class {
	case "inetnum", "inet6num":
		rep.Records[o.class]++
	case "organisation":
		rep.Records["organisation"]++
		if o.bad != "" {
			return p.skip(o.line, "organisation object: %s", o.bad)
		}
		if name := o.attrs["org-name"]; name != "" && isPrintable([]byte(name)) {
			p.b.nameOrg("org:"+strings.ToUpper(stripComment(o.primary)), name)
		}
		return nil
	default:
		rep.Records["other"]++
		return nil
	}
	if o.bad != "" {
		return p.skip(o.line, "%s object: %s", o.class, o.bad)
	}
	rg, err := parseRPSLRange(o.class, stripComment(o.primary))
	if err != nil {
		return p.skip(o.line, "%s %q: %v", o.class, o.primary, err)
	}
	r := rec{org: -1, line: int32(o.line), s: keyOf(rg.Start), e: keyOf(rg.End)}
	if cc := stripComment(o.attrs["country"]); cc != "" {
		cc = strings.ToUpper(cc)
		if len(cc) != 2 || !isUpper(cc[0]) || !isUpper(cc[1]) {
			return p.skip(o.line, "country %q is not a two-letter code", cc)
		}
		r.cc = [2]byte{cc[0], cc[1]}
	}
	reg := rpslRegistry(stripComment(o.attrs["source"]))
	var ok bool
	if r.reg, ok = p.b.internReg(reg); !ok {
		return p.skip(o.line, "too many distinct registries")
	}
	status := strings.ToLower(stripComment(o.attrs["status"]))
	if !isPrintable([]byte(status)) || len(status) > 64 {
		return p.skip(o.line, "status %q is not printable text", status)
	}
	if r.status, ok = p.b.internStatus(status); !ok {
		return p.skip(o.line, "too many distinct statuses")
	}
	switch orgH, net := stripComment(o.attrs["org"]), stripComment(o.attrs["netname"]); {
	case orgH != "":
		if !isPrintable([]byte(orgH)) {
			return p.skip(o.line, "org %q has unprintable characters", orgH)
		}
		r.org = p.b.internOrg("org:" + strings.ToUpper(orgH))
	case net != "":
		if !isPrintable([]byte(net)) {
			return p.skip(o.line, "netname %q has unprintable characters", net)
		}
		k := "netname:" + reg + ":" + strings.ToUpper(net)
		r.org = p.b.internOrg(k)
		if d := o.attrs["descr"]; isPrintable([]byte(d)) {
			p.b.nameOrg(k, d)
		}
	}
	p.add(r, rg.Start.Is4())
	return nil
}

// parseRPSLRange parses an inetnum ("a.b.c.d - e.f.g.h", a CIDR prefix, or
// the abbreviated prefix form "200.3/16") or an inet6num (a prefix, or a
// range "a - b").
func parseRPSLRange(class, v string) (Range, error) {
	if a, b, ok := strings.Cut(v, "-"); ok && !strings.Contains(b, "/") {
		s, err1 := netip.ParseAddr(strings.TrimSpace(a))
		e, err2 := netip.ParseAddr(strings.TrimSpace(b))
		if err := errors.Join(err1, err2); err != nil {
			return Range{}, errors.New("not a range of two addresses")
		}
		r := Range{Start: s, End: e}
		if !r.Valid() {
			return Range{}, errors.New("start and end are of different families or out of order")
		}
		if (class == "inetnum") != s.Is4() {
			return Range{}, errors.New("address family does not match the object class")
		}
		return r, nil
	}
	if class == "inetnum" {
		v = expandV4Prefix(v)
	}
	pfx, err := netip.ParsePrefix(v)
	if err != nil {
		return Range{}, errors.New("not a range or a prefix")
	}
	if (class == "inetnum") != pfx.Addr().Is4() {
		return Range{}, errors.New("address family does not match the object class")
	}
	if pfx.Masked() != pfx {
		return Range{}, fmt.Errorf("prefix has host bits set (did you mean %s?)", pfx.Masked())
	}
	return RangeOf(pfx), nil
}

// expandV4Prefix turns "200.3/16" into "200.3.0.0/16"; other input is
// returned unchanged.
func expandV4Prefix(v string) string {
	addr, bits, ok := strings.Cut(v, "/")
	if !ok {
		return v
	}
	if n := strings.Count(addr, "."); n < 3 && addr != "" {
		addr += strings.Repeat(".0", 3-n)
	}
	return addr + "/" + bits
}

// stripComment removes an RPSL end-of-line comment and surrounding space.
func stripComment(v string) string {
	if i := strings.IndexByte(v, '#'); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v)
}

// rpslRegistry maps an RPSL source ("RIPE", "APNIC", "RIPE-NONAUTH") to a
// registry name as used by the delegated files.
func rpslRegistry(source string) string {
	s := strings.ToLower(source)
	if i := strings.IndexByte(s, '-'); i > 0 {
		s = s[:i]
	}
	switch s {
	case "ripe":
		return "ripencc"
	case "":
		return ""
	}
	if !isLowerWord([]byte(s)) {
		return ""
	}
	return s
}
