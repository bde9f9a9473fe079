package geo

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/micra-net/micra/internal/realdata"
)

func gz(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// readAll reads every row of in.
func readAll(t *testing.T, in []byte, opts ...Option) ([]Row, Stats, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(in), "f.csv", opts...)
	if err != nil {
		return nil, Stats{}, err
	}
	defer r.Close()
	var rows []Row
	for {
		row, err := r.Next()
		if errors.Is(err, io.EOF) {
			return rows, r.Stats(), nil
		}
		if err != nil {
			return rows, r.Stats(), err
		}
		rows = append(rows, row)
	}
}

func TestReaderForms(t *testing.T) {
	dbip := "prefix,country_code,state1,state2,city,postcode,latitude,longitude,timezone\n" +
		"1.0.0.0/24,AU,Queensland,,South Brisbane,,-27.4767,153.017,\n" +
		"1.0.1.0/24,CN,Fujian,,Wenquan,,26.0998,119.297,\n"
	for _, tc := range []struct {
		name string
		in   []byte
		want []Row
	}{
		{"dbip prefixes", []byte(dbip), []Row{
			{Prefix: netip.MustParsePrefix("1.0.0.0/24"), Lat: -27.4767, Lon: 153.017, Country: "AU", City: "South Brisbane", Line: 2},
			{Prefix: netip.MustParsePrefix("1.0.1.0/24"), Lat: 26.0998, Lon: 119.297, Country: "CN", City: "Wenquan", Line: 3},
		}},
		{"gzip detected by content", gz(t, dbip), []Row{
			{Prefix: netip.MustParsePrefix("1.0.0.0/24"), Lat: -27.4767, Lon: 153.017, Country: "AU", City: "South Brisbane", Line: 2},
			{Prefix: netip.MustParsePrefix("1.0.1.0/24"), Lat: 26.0998, Lon: 119.297, Country: "CN", City: "Wenquan", Line: 3},
		}},
		{"ipv4 column, reordered, other columns ignored, quoted comma", []byte(
			"\ufeffName, Longitude ,IPv4,Latitude,City,cc\n" +
				"a,8.68,192.0.2.7,50.11,\"Frankfurt, am Main\",de\n" +
				"\n" +
				"b,-0.12,198.51.100.1,51.5,London,\n"), []Row{
			{Prefix: netip.MustParsePrefix("192.0.2.7/32"), Lat: 50.11, Lon: 8.68, Country: "DE", City: "Frankfurt, am Main", Line: 2},
			{Prefix: netip.MustParsePrefix("198.51.100.1/32"), Lat: 51.5, Lon: -0.12, City: "London", Line: 4},
		}},
		{"aliases, host bits masked, IPv6", []byte(
			"network,lat,lng,ip\n" +
				"10.1.2.3/16,1,2,9.9.9.9\n" +
				"2001:db8::1/32,-1,-2,\n"), []Row{
			{Prefix: netip.MustParsePrefix("10.1.0.0/16"), Lat: 1, Lon: 2, Line: 2},
			{Prefix: netip.MustParsePrefix("2001:db8::/32"), Lat: -1, Lon: -2, Line: 3},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, st, err := readAll(t, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(rows) != fmt.Sprint(tc.want) {
				t.Errorf("rows\n%v\nwant\n%v", rows, tc.want)
			}
			if st.Rows != len(tc.want) || st.Skipped != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestReaderBadRows(t *testing.T) {
	in := "prefix,latitude,longitude,country_code\n" +
		"1.0.0.0/24,1,2,AU\n" + // 2: good
		"1.0.1.0/24,1\n" + // 3: too few fields
		"nonsense,1,2,AU\n" + // 4: bad prefix
		"1.0.2.0/24,91,2,AU\n" + // 5: latitude out of range
		"1.0.3.0/24,1,NaN,AU\n" + // 6: longitude not finite
		"1.0.4.0/24,1,2,AUS\n" + // 7: country code
		"1.0.5.0/24,1,\"2\"x,AU\n" + // 8: bad quoting
		"1.0.6.0/24,-90,180,\n" // 9: good, edges
	rows, st, err := readAll(t, []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Line != 2 || rows[1].Line != 9 {
		t.Fatalf("rows %v", rows)
	}
	if st.Rows != 2 || st.Skipped != 6 || len(st.Examples) != 6 {
		t.Fatalf("stats %+v", st)
	}
	for i, want := range []string{"f.csv:3: 2 fields", "f.csv:4: bad prefix", "f.csv:5: bad latitude", "f.csv:6: bad longitude", "f.csv:7: bad country code", "f.csv:8: extraneous"} {
		if !strings.HasPrefix(st.Examples[i], want) {
			t.Errorf("example %d = %q, want %q...", i, st.Examples[i], want)
		}
	}
	// Strict: the first bad row is an error naming it.
	_, _, err = readAll(t, []byte(in), Strict())
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "f.csv:3:") {
		t.Errorf("strict: %v", err)
	}
}

func TestReaderHeaderAndLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		opts []Option
		want error
		at   string
	}{
		{"empty", "", nil, ErrFormat, "empty"},
		{"no address column", "lat,lon\n1,2\n", nil, ErrFormat, "no address column"},
		{"no longitude", "prefix,latitude\n", nil, ErrFormat, "longitude"},
		{"too many rows", "ip,lat,lon\n1.2.3.4,1,2\n1.2.3.5,1,2\n1.2.3.6,1,2\n", []Option{MaxRows(2)}, ErrLimit, "f.csv:4:"},
		{"too many bytes", "ip,lat,lon\n" + strings.Repeat("1.2.3.4,1,2\n", 100), []Option{MaxBytes(200)}, ErrLimit, "limit"},
		{"a huge line", "ip,lat,lon\n1.2.3.4,1," + strings.Repeat("9", maxLine+10) + "\n", nil, ErrFormat, "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readAll(t, []byte(tc.in), tc.opts...)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.at) {
				t.Errorf("err = %v, want %v with %q", err, tc.want, tc.at)
			}
		})
	}
	if _, err := NewReader(strings.NewReader(""), "x", MaxRows(0)); err == nil {
		t.Error("MaxRows(0) accepted")
	}
}

func TestSample(t *testing.T) {
	var b strings.Builder
	b.WriteString("ipv4,latitude,longitude\n")
	for i := range 100 {
		fmt.Fprintf(&b, "10.0.0.%d,%d,0\n", i, i%90)
	}
	in := []byte(b.String())
	sample := func(n int, seed uint64) []Row {
		r, err := NewReader(bytes.NewReader(in), "s")
		if err != nil {
			t.Fatal(err)
		}
		rows, err := Sample(r, n, seed)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	if a, b := sample(10, 1), sample(10, 1); fmt.Sprint(a) != fmt.Sprint(b) || len(a) != 10 {
		t.Fatalf("not deterministic or wrong size: %d rows", len(a))
	}
	if len(sample(0, 1)) != 100 || len(sample(500, 1)) != 100 {
		t.Error("n <= 0 or n above the rows must return every row")
	}
	// Uniform: over 200 seeds every row is drawn, none far more often
	// than the expected 20 times.
	count := map[int]int{}
	for seed := range uint64(200) {
		rows := sample(10, seed)
		for i, r := range rows {
			if i > 0 && rows[i-1].Line >= r.Line {
				t.Fatal("rows not in file order")
			}
			count[r.Line]++
		}
	}
	for line := 2; line <= 101; line++ {
		if c := count[line]; c == 0 || c > 45 {
			t.Errorf("line %d drawn %d times of 200, want about 20", line, c)
		}
	}
}

func TestAddr(t *testing.T) {
	for _, p := range []string{"10.0.0.0/24", "10.0.0.0/31", "10.0.0.7/32", "10.0.0.0/30", "1.0.0.0/8", "2001:db8::/32", "2001:db8::/64", "2001:db8::/120"} {
		pfx := netip.MustParsePrefix(p)
		row := Row{Prefix: pfx}
		seen := map[netip.Addr]bool{}
		for seed := range uint64(200) {
			a := row.Addr(seed)
			if !pfx.Contains(a) || a.Is4() != pfx.Addr().Is4() {
				t.Fatalf("%s: %s outside", p, a)
			}
			if host := pfx.Addr().BitLen() - pfx.Bits(); host >= 2 {
				last := netip.PrefixFrom(pfx.Addr(), pfx.Bits())
				if a == last.Addr() || (host < 64 && a == lastAddr(pfx)) {
					t.Fatalf("%s: network or broadcast address %s", p, a)
				}
			}
			seen[a] = true
		}
		if row.Addr(3) != row.Addr(3) {
			t.Errorf("%s: not deterministic", p)
		}
		if pfx.Bits() < 30 && len(seen) < 100 {
			t.Errorf("%s: only %d distinct addresses over 200 seeds", p, len(seen))
		}
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// dataFile returns the DB-IP file, skipping without it unless CI is set.
func dataFile(t testing.TB) string {
	t.Helper()
	if raceEnabled {
		t.Skip("real-data tests run without -race")
	}
	const rel = "geo/dbip-city-lite-ipv4-2026-06.prefix.csv.gz"
	return filepath.Join(realdata.Need(t, rel), rel)
}

func TestDBIP(t *testing.T) {
	path := dataFile(t)
	r, err := Open(path, Strict())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	first, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	want := Row{Prefix: netip.MustParsePrefix("1.0.0.0/24"), Lat: -27.4767, Lon: 153.017, Country: "AU", City: "South Brisbane", Line: 2}
	if first != want {
		t.Errorf("first row %+v, want %+v", first, want)
	}
	n := 1
	for ; n < 200_000; n++ {
		if _, err := r.Next(); err != nil {
			t.Fatalf("row %d: %v", n+1, err)
		}
	}
	if st := r.Stats(); st.Rows != n || st.Skipped != 0 {
		t.Errorf("stats %+v", st)
	}
}

func BenchmarkReadDBIP(b *testing.B) {
	path := dataFile(b)
	for b.Loop() {
		r, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		rows, err := Sample(r, 1000, 1)
		r.Close()
		if err != nil || len(rows) != 1000 {
			b.Fatal(err, len(rows))
		}
	}
}

func BenchmarkRead(b *testing.B) {
	var s strings.Builder
	s.WriteString("prefix,country_code,state1,state2,city,postcode,latitude,longitude,timezone\n")
	for i := range 10000 {
		fmt.Fprintf(&s, "%d.%d.%d.0/24,AU,Queensland,,South Brisbane,,-27.4767,153.017,\n", 1+i>>16, i>>8&255, i&255)
	}
	in := []byte(s.String())
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := NewReader(bytes.NewReader(in), "b")
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	}
}
