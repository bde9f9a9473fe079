package subnet

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
)

// ip2asn parses CSV rows "range_start,range_end,asn,organisation" with no
// header, the organisation quoted (RFC 4180, "" for a quote) when it holds a
// comma. Each row becomes a range of LayerASN whose organisation key is the
// organisation's name, so all the ASNs of one company share it.
func (p *parser) ip2asn() error {
	rep := p.st.report
	var asnKeys map[uint32]int32 // organisation index per ASN for rows without a name
	for {
		line, n, err := p.contentLine()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		row, err := parseASNRow(line)
		if err != nil {
			if err := p.skip(n, "%v", err); err != nil {
				return err
			}
			continue
		}
		r := rec{org: -1, asn: row.asn, line: int32(n), s: keyOf(row.start), e: keyOf(row.end)}
		switch {
		case row.org != "":
			k := "as-org:" + row.org
			r.org = p.b.internOrg(k)
			p.b.nameOrg(k, row.org)
		case row.asn != 0:
			if asnKeys == nil {
				asnKeys = map[uint32]int32{}
			}
			o, ok := asnKeys[row.asn]
			if !ok {
				o = p.b.internOrg("as" + strconv.FormatUint(uint64(row.asn), 10))
				asnKeys[row.asn] = o
			}
			r.org = o
		}
		if row.start.Is4() {
			rep.Records["ipv4"]++
		} else {
			rep.Records["ipv6"]++
		}
		p.add(r, row.start.Is4())
	}
}

type asnRow struct {
	start, end netip.Addr
	asn        uint32
	org        string
}

// parseASNRow parses one CSV row of an ip2asn table.
func parseASNRow(line []byte) (asnRow, error) {
	var row asnRow
	var f [3][]byte
	rest := line
	for i := range f {
		j := bytes.IndexByte(rest, ',')
		if j < 0 {
			return row, fmt.Errorf("want 4 comma-separated fields, got %d", i+1)
		}
		f[i], rest = rest[:j], rest[j+1:]
	}
	var err error
	if row.start, err = netip.ParseAddr(string(f[0])); err != nil || row.start.Zone() != "" {
		return row, fmt.Errorf("range_start %q is not an IP address", f[0])
	}
	if row.end, err = netip.ParseAddr(string(f[1])); err != nil || row.end.Zone() != "" {
		return row, fmt.Errorf("range_end %q is not an IP address", f[1])
	}
	row.start, row.end = row.start.Unmap(), row.end.Unmap()
	if !(Range{Start: row.start, End: row.end}).Valid() {
		return row, fmt.Errorf("range %s - %s mixes families or ends before it starts", row.start, row.end)
	}
	asn, err := strconv.ParseUint(string(f[2]), 10, 32)
	if err != nil {
		return row, fmt.Errorf("asn %q is not a 32-bit number", f[2])
	}
	row.asn = uint32(asn)
	if len(rest) > 0 && rest[0] == '"' {
		var b []byte
		i := 1
		for {
			j := bytes.IndexByte(rest[i:], '"')
			if j < 0 {
				return row, errors.New("organisation: unterminated quote")
			}
			b = append(b, rest[i:i+j]...)
			i += j + 1
			if i < len(rest) && rest[i] == '"' {
				b = append(b, '"')
				i++
				continue
			}
			break
		}
		if i != len(rest) {
			return row, errors.New("organisation: text after the closing quote")
		}
		rest = b
	} else if bytes.IndexByte(rest, ',') >= 0 || bytes.IndexByte(rest, '"') >= 0 {
		return row, errors.New("organisation: a comma or quote outside quotes")
	}
	if !isPrintable(rest) {
		return row, errors.New("organisation: unprintable characters or longer than 256 bytes")
	}
	row.org = string(rest)
	return row, nil
}
