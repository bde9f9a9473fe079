package subnet

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
)

// fuzzParse adds data as one input of format f and, when that succeeds,
// builds: neither may panic, and a parsed input must always build.
func fuzzParse(t *testing.T, data []byte, f Format) {
	b, err := NewBuilder(MaxInputSize(1<<20), MaxRanges(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Add(context.Background(), "fuzz", bytes.NewReader(data), f); err != nil {
		return
	}
	tr, _, err := b.Build()
	if err != nil {
		t.Fatalf("parsed input failed to build: %v", err)
	}
	// The canonical encoding round-trips (the zstd layer around it is
	// tested elsewhere and too slow to run per input here).
	back, err := decodeBody(tr.encodeBody())
	if err != nil || back.contentHash() != tr.ID() {
		t.Fatalf("snapshot body round trip: %v", err)
	}
}

func FuzzDelegated(f *testing.F) {
	f.Add([]byte("2|apnic|20130813|3|19850701|20130812|+1000\napnic|*|ipv4|*|1|summary\napnic|MY|ipv4|202.188.32.0|8192|19961128|allocated\napnic|AU|ipv6|2405:db00::|32|20121130|allocated|A9\n"))
	f.Add([]byte("2.3|lacnic|20240208|1|19870101|20240208|-0300\nlacnic||ipv6|2801:c4:51::|48||available\narin||asn|212|1||reserved|\n"))
	f.Add([]byte("2|iana|20190911|973|19830101|20190612|+0000\niana|ZZ|ipv4|1.0.0.0|16777216|20100119|apnic\n|3|19990401|arin\n"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzParse(t, data, FormatDelegated) })
}

func FuzzRPSL(f *testing.F) {
	f.Add([]byte(figure72))
	f.Add([]byte("inetnum: 200.3/16\nnetname: X\n+ more\n\tmore\norg: ORG-A\n\norganisation: ORG-A\norg-name: A\n\ninet6num: 2001:db8::/32\ncountry: nl # c\n"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzParse(t, data, FormatRPSL) })
}

func FuzzIP2ASN(f *testing.F) {
	f.Add([]byte("1.0.0.0,1.0.0.255,13335,\"Cloudflare, Inc.\"\n1.0.4.0,1.0.7.255,38803,Gtelecom Pty Ltd\n2.26.200.0,2.26.215.255,201907,\"LLC \"\"SPUTNIK\"\"\"\n"))
	f.Add([]byte("2001:db8::,2001:db8::ffff,64500,\n"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzParse(t, data, FormatIP2ASN) })
}

func FuzzSnapshot(f *testing.F) {
	tr, _ := build(f, figure72, "2|apnic|1|1|19700101|20130812|+1000\napnic|AU|ipv6|2405:db00::|32|20121130|allocated|A91\n")
	var buf bytes.Buffer
	if err := tr.WriteSnapshot(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(snapMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		back, err := DecodeSnapshot(data)
		if err != nil {
			return
		}
		if back.contentHash() != back.ID() {
			t.Fatal("decoded tree does not match its id")
		}
		for id := range back.All() {
			back.Node(id)
		}
	})
}

// FuzzBuild turns bytes into overlapping ranges of every layer in a small
// space and checks that the builder always resolves them into a tree.
func FuzzBuild(f *testing.F) {
	f.Add([]byte{0, 0, 16, 0, 1, 8, 16, 1, 2, 4, 40, 2, 3, 12, 3, 3})
	f.Add([]byte{1, 0, 255, 0, 1, 128, 255, 1, 1, 64, 100, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var iana, rirOld, rirNew, rpsl, asn strings.Builder
		iana.WriteString("2|iana|1|0|19700101|20190911|+0000\n")
		rirOld.WriteString("2|ripencc|1|0|19700101|20130812|+0200\n")
		rirNew.WriteString("2|ripencc|1|0|19700101|20260720|+0200\n")
		for i := 0; i+3 < len(data) && i < 4*200; i += 4 {
			start := 256*int(data[i+3]&1) + int(data[i+1])
			size := int(data[i+2]) + 1
			if start+size > 768 {
				size = 768 - start
			}
			s := fmt.Sprintf("10.0.%d.%d", start/256, start%256)
			end := start + size - 1
			e := fmt.Sprintf("10.0.%d.%d", end/256, end%256)
			switch data[i] % 5 {
			case 0:
				fmt.Fprintf(&iana, "iana|ZZ|ipv4|%s|%d|19930501|ripencc\n", s, size)
			case 1:
				fmt.Fprintf(&rirOld, "ripencc|NL|ipv4|%s|%d|20000101|allocated\n", s, size)
			case 2:
				fmt.Fprintf(&rirNew, "ripencc|DE|ipv4|%s|%d|20000101|assigned|O%d\n", s, size, data[i+3]>>1)
			case 3:
				fmt.Fprintf(&rpsl, "inetnum: %s - %s\norg: ORG-%d\n\n", s, e, data[i+3]>>1)
			case 4:
				fmt.Fprintf(&asn, "%s,%s,%d,Org %d\n", s, e, data[i+3], data[i+3]>>2)
			}
		}
		b, _ := NewBuilder(Strict())
		for _, in := range []string{iana.String(), rirOld.String(), rirNew.String(), rpsl.String(), asn.String()} {
			if in == "" {
				continue
			}
			if _, err := b.Add(context.Background(), "fuzz", strings.NewReader(in), FormatAuto); err != nil {
				t.Fatalf("generated input rejected: %v\n%s", err, in)
			}
		}
		if _, _, err := b.Build(); err != nil {
			t.Fatal(err)
		}
	})
}
