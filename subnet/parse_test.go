package subnet

import (
	"bytes"
	"compress/gzip"
	"context"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// addOne parses one input and returns its report and stage.
func addOne(t *testing.T, in string, opts ...Option) (*InputReport, *stage) {
	t.Helper()
	b, err := NewBuilder(opts...)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := b.Add(context.Background(), "test", strings.NewReader(in), FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	return rep, b.stages[0]
}

func TestDelegatedLines(t *testing.T) {
	const hdr = "2|apnic|20130813|3|19850701|20130812|+1000\n"
	tests := []struct {
		name    string
		line    string
		ranges  []string // as Range.String
		org     string
		cc      string
		skipped string // substring of the reason, "" when the line is good
	}{
		{name: "standard ipv4", line: "apnic|MY|ipv4|202.188.32.0|8192|19961128|allocated", ranges: []string{"202.188.32.0/19"}, cc: "MY"},
		{name: "count not a power of two", line: "arin|US|ipv4|192.0.2.0|768|19961128|assigned", ranges: []string{"192.0.2.0 - 192.0.4.255"}, cc: "US"},
		{name: "ipv6 prefix length", line: "apnic|AU|ipv6|2405:db00::|32|20121130|allocated", ranges: []string{"2405:db00::/32"}, cc: "AU"},
		{name: "extended with opaque-id", line: "ripencc|PS|ipv4|1.178.112.0|4096|20071126|allocated|e773719f-9ae3-4366-9955-724793725bb5", ranges: []string{"1.178.112.0/20"}, cc: "PS", org: "ripencc:e773719f-9ae3-4366-9955-724793725bb5"},
		{name: "available, empty cc and date, 7 fields", line: "lacnic||ipv6|2801:c4:51::|48||available", ranges: []string{"2801:c4:51::/48"}},
		{name: "reserved with trailing bar", line: "apnic||ipv6|2001:df1:3480::|48||reserved|", ranges: []string{"2001:df1:3480::/48"}},
		{name: "extension fields after the opaque-id", line: "afrinic|ZA|ipv4|41.0.0.0|256|20000101|allocated|F36B9F4B|ext1|ext2", ranges: []string{"41.0.0.0/24"}, cc: "ZA", org: "afrinic:F36B9F4B"},
		{name: "asn is counted, not a range", line: "apnic|JP|asn|173|1|20020801|allocated"},
		{name: "reserved asn", line: "arin||asn|212|1||reserved|"},
		{name: "count zero", line: "apnic|AU|ipv4|1.0.0.0|0|20000101|allocated", skipped: "not a positive number"},
		{name: "count runs past the end", line: "apnic|AU|ipv4|255.255.255.0|512|20000101|allocated", skipped: "runs past"},
		{name: "bad address", line: "apnic|AU|ipv4|1.0.0|256|20000101|allocated", skipped: "not an IPv4 address"},
		{name: "ipv6 address as ipv4", line: "apnic|AU|ipv4|2001:db8::|256|20000101|allocated", skipped: "not an IPv4 address"},
		{name: "unaligned ipv6", line: "apnic|AU|ipv6|2001:db8::1|32|20000101|allocated", skipped: "not aligned"},
		{name: "prefix length too long", line: "apnic|AU|ipv6|2001:db8::|129|20000101|allocated", skipped: "0-128"},
		{name: "bad country", line: "apnic|Aus|ipv4|1.0.0.0|256|20000101|allocated", skipped: "country code"},
		{name: "bad date", line: "apnic|AU|ipv4|1.0.0.0|256|2000-01-01|allocated", skipped: "YYYYMMDD"},
		{name: "unknown type", line: "apnic|AU|ipv5|1.0.0.0|256|20000101|allocated", skipped: "ipv5"},
		{name: "too few fields", line: "|3|19990401|arin", skipped: "4 fields"},
		{name: "empty status", line: "apnic|AU|ipv4|1.0.0.0|256|20000101|", skipped: "status"},
		{name: "control character in opaque-id", line: "apnic|AU|ipv4|1.0.0.0|256|20000101|allocated|A\x01B", skipped: "unprintable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep, st := addOne(t, hdr+tc.line+"\n")
			if tc.skipped != "" {
				if rep.Skipped != 1 || len(rep.Issues) != 1 || !strings.Contains(rep.Issues[0].Reason, tc.skipped) {
					t.Fatalf("skipped %d issues %+v, want one containing %q", rep.Skipped, rep.Issues, tc.skipped)
				}
				if rep.Issues[0].Line != 2 || rep.Issues[0].Input != "test" {
					t.Errorf("issue at %s:%d, want test:2", rep.Issues[0].Input, rep.Issues[0].Line)
				}
				return
			}
			if rep.Skipped != 0 {
				t.Fatalf("skipped: %+v", rep.Issues)
			}
			var got []string
			for f, fam := range [][]rec{st.v4, st.v6} {
				for _, r := range fam {
					got = append(got, Range{r.s.addr(f == 0), r.e.addr(f == 0)}.String())
				}
			}
			if !slices.Equal(got, tc.ranges) {
				t.Errorf("ranges %v, want %v", got, tc.ranges)
			}
			tr, _ := build(t, hdr+tc.line+"\n")
			for id := range tr.All() {
				if tr.Parent(id) == None {
					continue
				}
				if n := tr.Node(id); n.Org != tc.org || n.Country != tc.cc {
					t.Errorf("node %+v, want org %q cc %q", n, tc.org, tc.cc)
				}
			}
		})
	}
}

func TestDelegatedFileStructure(t *testing.T) {
	in := strings.Join([]string{
		"# conditions of use",
		"#",
		"2.3|lacnic|20240208|3|19870101|20240208|-0300",
		"lacnic|*|asn|*|1|summary",
		"lacnic|*|ipv4|*|1|summary",
		"lacnic|*|ipv6|*|1|summary",
		"lacnic|BR|asn|27648|1|20000101|allocated|1234",
		"",
		"lacnic|BR|ipv4|200.0.0.0|1024|20000101|allocated|1234",
		"lacnic||ipv6|2801:c4:51::|48||available\r",
	}, "\n")
	rep, _ := addOne(t, in)
	if rep.Version != "2.3" || rep.Registry != "lacnic" || rep.HeaderRecords != 3 || rep.EndDate != "20240208" || rep.Serial != "20240208" {
		t.Errorf("header fields: %+v", rep)
	}
	if want := map[string]int{"asn": 1, "ipv4": 1, "ipv6": 1}; !maps.Equal(rep.Summary, want) || !maps.Equal(rep.Records, want) {
		t.Errorf("summary %v records %v, want %v", rep.Summary, rep.Records, want)
	}
	if rep.Ranges != 2 || rep.Skipped != 0 {
		t.Errorf("ranges %d skipped %d", rep.Ranges, rep.Skipped)
	}
	// IANA's file: the designated registry is in the status column.
	tr, _ := build(t, "2|iana|20190911|2|19830101|20190612|+0000\niana|ZZ|ipv4|1.0.0.0|16777216|20100119|apnic\niana|ZZ|ipv4|0.0.0.0|16777216|19810901|ietf\n")
	if n := tr.Node(tr.Lookup(mustAddr(t, "1.2.3.4"))); n.Registry != "apnic" || n.Layer != LayerIANA || n.Status != "" {
		t.Errorf("IANA block %+v", n)
	}
	if n := tr.Node(tr.Lookup(mustAddr(t, "0.1.2.3"))); n.Registry != "ietf" || n.Status != "reserved" {
		t.Errorf("IETF block %+v", n)
	}
	// A file without a version line is reported, not silently read.
	rep, _ = addOne(t, "apnic|AU|ipv4|1.0.0.0|256|20000101|allocated\n2|apnic|x|y|z|w|v\n")
	if rep.Skipped == 0 {
		t.Error("missing version line not reported")
	}
}

func TestRPSLObjects(t *testing.T) {
	in := `% This is the RIPE Database query service.
% comment lines are ignored

inetnum:        193.0.0.0 - 193.0.7.255
netname:        RIPE-NCC
descr:          RIPE Network Coordination Centre
+               continued description
country:        nl # a comment
org:            org-ncc1-ripe
status:         ASSIGNED PA
mnt-by:         RIPE-NCC-MNT
source:         RIPE # Filtered

inet6num:       2001:67c:2e8::/48
netname:        RIPE-NCC-NET
descr:          RIPE NCC
	tab continuation
country:        NL
status:         ASSIGNED
source:         RIPE-NONAUTH

organisation:   ORG-NCC1-RIPE
org-name:       Reseaux IP Europeens Network Coordination Centre (RIPE NCC)
source:         RIPE

inetnum:        200.3/16
netname:        ABBREVIATED
source:         LACNIC

inetnum:        10.0.0.0/8
source:         RIPE

person:         John Doe
nic-hdl:        JD1-RIPE

inetnum:        10.0.0.1/8
netname:        HOSTBITS

inetnum:        1.0.0.10 - 1.0.0.1
netname:        BACKWARDS

inet6num:       10.0.0.0/8
netname:        WRONGFAMILY

inetnum:        1.1.1.0 - 1.1.1.255
country:        NLD

this line is not an attribute
`
	rep, st := addOne(t, in)
	if want := map[string]int{"inetnum": 6, "inet6num": 2, "organisation": 1, "other": 1}; !maps.Equal(rep.Records, want) {
		t.Errorf("records %v, want %v", rep.Records, want)
	}
	if rep.Skipped != 5 {
		t.Errorf("skipped %d: %+v", rep.Skipped, rep.Issues)
	}
	wantReasons := []string{"host bits", "different families or out of order", "family does not match", "two-letter", "attribute: value"}
	for i, w := range wantReasons {
		if i >= len(rep.Issues) || !strings.Contains(rep.Issues[i].Reason, w) {
			t.Errorf("issue %d = %+v, want it to mention %q", i, rep.Issues, w)
		}
	}
	if len(st.v4) != 3 || len(st.v6) != 1 {
		t.Fatalf("v4 %d v6 %d ranges", len(st.v4), len(st.v6))
	}
	tr, _ := build(t, in)
	n := tr.Node(tr.Lookup(mustAddr(t, "193.0.6.139")))
	if n.Range.String() != "193.0.0.0/21" || n.Org != "org:ORG-NCC1-RIPE" || n.OrgName != "Reseaux IP Europeens Network Coordination Centre (RIPE NCC)" ||
		n.Country != "NL" || n.Status != "assigned pa" || n.Registry != "ripencc" {
		t.Errorf("193.0.6.139 -> %+v", n)
	}
	n = tr.Node(tr.Lookup(mustAddr(t, "2001:67c:2e8::1")))
	if n.Org != "netname:ripencc:RIPE-NCC-NET" || n.OrgName != "RIPE NCC tab continuation" || n.Registry != "ripencc" {
		t.Errorf("2001:67c:2e8::1 -> %+v", n)
	}
	n = tr.Node(tr.Lookup(mustAddr(t, "200.3.200.1")))
	if n.Range.String() != "200.3.0.0/16" || n.Registry != "lacnic" {
		t.Errorf("abbreviated prefix -> %+v", n)
	}
	if n := tr.Node(tr.Lookup(mustAddr(t, "10.1.1.1"))); n.Org != "" || n.Range.String() != "10.0.0.0/8" {
		t.Errorf("object with neither org nor netname -> %+v", n)
	}
}

func TestRPSLLimits(t *testing.T) {
	huge := "inetnum: 1.0.0.0 - 1.0.0.255\n" + strings.Repeat("remarks: x\n", maxObjectLines+1) + "\ninetnum: 2.0.0.0 - 2.0.0.255\n"
	rep, st := addOne(t, huge)
	if rep.Skipped != 1 || len(st.v4) != 1 {
		t.Errorf("oversize object: skipped %d, kept %d; want 1 and 1", rep.Skipped, len(st.v4))
	}
	long := "inetnum: 1.0.0.0 - 1.0.0.255\ndescr: " + strings.Repeat("x", maxLine+10) + "\n\ninetnum: 2.0.0.0 - 2.0.0.255\n"
	rep, st = addOne(t, long)
	if rep.Skipped != 1 || len(st.v4) != 1 {
		t.Errorf("overlong line: skipped %d, kept %d; want 1 and 1", rep.Skipped, len(st.v4))
	}
}

func TestIP2ASNRows(t *testing.T) {
	tests := []struct {
		line    string
		org     string
		asn     uint32
		skipped string
	}{
		{line: `1.0.0.0,1.0.0.255,13335,"Cloudflare, Inc."`, org: "Cloudflare, Inc.", asn: 13335},
		{line: `1.0.4.0,1.0.7.255,38803,Gtelecom Pty Ltd`, org: "Gtelecom Pty Ltd", asn: 38803},
		{line: `2.26.200.0,2.26.215.255,201907,"LLC ""SPUTNIK"""`, org: `LLC "SPUTNIK"`, asn: 201907},
		{line: `2001:db8::,2001:db8::ffff,64500,`, org: "", asn: 64500},
		{line: `1.0.0.0,1.0.0.255,0,`, org: "", asn: 0},
		{line: `1.0.0.0,1.0.0.255,13335`, skipped: "4 comma-separated"},
		{line: `1.0.0.255,1.0.0.0,1,x`, skipped: "ends before"},
		{line: `1.0.0.0,2001:db8::,1,x`, skipped: "mixes families"},
		{line: `1.0.0.0,1.0.0.255,4294967296,x`, skipped: "32-bit"},
		{line: `1.0.0.0,1.0.0.255,1,"unterminated`, skipped: "unterminated"},
		{line: `1.0.0.0,1.0.0.255,1,"a"b`, skipped: "after the closing quote"},
		{line: `1.0.0.0,1.0.0.255,1,a,b`, skipped: "outside quotes"},
		{line: `one,1.0.0.255,1,x`, skipped: "range_start"},
	}
	for _, tc := range tests {
		t.Run(tc.line, func(t *testing.T) {
			b, _ := NewBuilder()
			rep, err := b.Add(context.Background(), "t", strings.NewReader("1.2.3.0,1.2.3.255,1,first\n"+tc.line+"\n"), FormatIP2ASN)
			if err != nil {
				t.Fatal(err)
			}
			if tc.skipped != "" {
				if rep.Skipped != 1 || !strings.Contains(rep.Issues[0].Reason, tc.skipped) {
					t.Fatalf("issues %+v, want %q", rep.Issues, tc.skipped)
				}
				return
			}
			tr, _, err := b.Build()
			if err != nil {
				t.Fatal(err)
			}
			a := mustAddr(t, strings.Split(tc.line, ",")[0])
			n := tr.Node(tr.Lookup(a))
			if n.OrgName != tc.org || n.ASN != tc.asn || n.Layer != LayerASN {
				t.Errorf("node %+v, want org %q asn %d", n, tc.org, tc.asn)
			}
			switch {
			case tc.org != "" && n.Org != "as-org:"+tc.org:
				t.Errorf("org key %q", n.Org)
			case tc.org == "" && tc.asn != 0 && n.Org != "as64500":
				t.Errorf("org key %q, want the ASN", n.Org)
			case tc.org == "" && tc.asn == 0 && n.Org != "":
				t.Errorf("org key %q, want none", n.Org)
			}
		})
	}
}

func TestGzipInput(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte("1.0.0.0,1.0.0.255,13335,\"Cloudflare, Inc.\"\n"))
	zw.Close()
	b, _ := NewBuilder()
	rep, err := b.Add(context.Background(), "x.csv.gz", &buf, FormatAuto)
	if err != nil || rep.Format != FormatIP2ASN || rep.Ranges != 1 {
		t.Fatalf("gzip input: %+v %v", rep, err)
	}
	if _, err := b.Add(context.Background(), "bad.gz", strings.NewReader("\x1f\x8bgarbage"), FormatAuto); err == nil {
		t.Error("corrupt gzip accepted")
	}
}

// TestRealFiles parses every real file in ../shared/data and checks the
// counts against the files' own headers and the data README.
func TestRealFiles(t *testing.T) {
	dir := dataDir(t)
	type counts struct{ asn, ipv4, ipv6 int }
	tests := []struct {
		path     string
		header   int
		found    counts
		complete bool // the records match the header and summary counts
		skipped  int
	}{
		{"rir/2013-08-13/delegated-apnic-latest.gz", 30527, counts{5328, 22143, 3056}, true, 0},
		{"rir/2013-08-13/delegated-arin-latest.gz", 72419, counts{22263, 46593, 3563}, true, 0},
		{"rir/2013-08-13/delegated-lacnic-latest.gz", 12785, counts{3613, 7326, 1846}, true, 0},
		{"rir/2013-08-13/delegated-ripencc-latest.gz", 82928, counts{25813, 49602, 7513}, true, 0},
		{"rir/extended/delegated-afrinic-extended-latest.gz", 19600, counts{4350, 6045, 9205}, true, 0},
		{"rir/extended/delegated-lacnic-extended-latest.gz", 88899, counts{14695, 19802, 54402}, true, 0},
		// A truncated download: the header and summaries describe the full file.
		{"rir/extended/delegated-ripencc-extended-head.gz", 260022, counts{0, 41594, 0}, false, 0},
		// Hand-copied excerpts keep the original header.
		{"rir/extended/delegated-apnic-extended-excerpt.txt", 188309, counts{0, 72, 27}, false, 0},
		{"rir/extended/delegated-arin-extended-excerpt.txt", 205478, counts{51, 62, 0}, false, 0},
		// IANA's file holds its 973 records, then a broken line (1007) and a
		// second, partial copy of the records.
		{"rir/iana/delegated-iana-latest.gz", 973, counts{1194, 1220, 116}, false, 1},
	}
	for _, tc := range tests {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			b, _ := NewBuilder()
			rep, err := b.AddFile(context.Background(), filepath.Join(dir, tc.path), FormatAuto)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Format != FormatDelegated || rep.HeaderRecords != tc.header || rep.Skipped != tc.skipped {
				t.Fatalf("format %v header %d skipped %d (%+v)", rep.Format, rep.HeaderRecords, rep.Skipped, rep.Issues)
			}
			got := counts{rep.Records["asn"], rep.Records["ipv4"], rep.Records["ipv6"]}
			if got != tc.found {
				t.Errorf("records %+v, want %+v", got, tc.found)
			}
			if tc.complete {
				if got.asn+got.ipv4+got.ipv6 != rep.HeaderRecords {
					t.Errorf("records %d, header says %d", got.asn+got.ipv4+got.ipv6, rep.HeaderRecords)
				}
				if want := (counts{rep.Summary["asn"], rep.Summary["ipv4"], rep.Summary["ipv6"]}); got != want {
					t.Errorf("records %+v, summary lines say %+v", got, want)
				}
			}
			if rep.Ranges != got.ipv4+got.ipv6 {
				t.Errorf("ranges %d, want every ipv4 and ipv6 record (%d)", rep.Ranges, got.ipv4+got.ipv6)
			}
		})
	}
	t.Run("iana broken line", func(t *testing.T) {
		b, _ := NewBuilder(Strict())
		_, err := b.AddFile(context.Background(), filepath.Join(dir, "rir/iana/delegated-iana-latest.gz"), FormatAuto)
		if err == nil || !strings.Contains(err.Error(), "delegated-iana-latest.gz:1007: record has 4 fields") {
			t.Errorf("strict import of the IANA file: %v", err)
		}
	})
	t.Run("ip2asn", func(t *testing.T) {
		b, _ := NewBuilder()
		rep, err := b.AddFile(context.Background(), filepath.Join(dir, "ip2asn/asn-ipv4.csv.gz"), FormatAuto)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Format != FormatIP2ASN || rep.Records["ipv4"] != 411961 || rep.Skipped != 0 || rep.Ranges != 411961 {
			t.Errorf("ip2asn: %+v", rep)
		}
	})
}
