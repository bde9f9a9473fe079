package geo

import (
	"bytes"
	"errors"
	"io"
	"math"
	"testing"
)

func FuzzReader(f *testing.F) {
	seeds := []string{
		"prefix,country_code,state1,state2,city,postcode,latitude,longitude,timezone\n1.0.0.0/24,AU,Queensland,,South Brisbane,,-27.4767,153.017,\n",
		"ipv4,latitude,longitude,city\n192.0.2.1,50.1,8.6,\"Frankfurt, am Main\"\n\n198.51.100.9,-91,0,x\n",
		"network,lat,lng,cc\n2001:db8::/32,1,2,de\nnonsense,1,2,XX\n10.0.0.1/8,NaN,1,\n",
		"prefix,latitude,longitude\n1.0.0.0/24,1,\"2\"x\n\"unterminated\n",
		"lat,lon\n1,2\n",
	}
	for _, s := range seeds {
		f.Add([]byte(s), false)
		f.Add(gz(f, s), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, strict bool) {
		opts := []Option{MaxRows(10_000), MaxBytes(1 << 20)}
		if strict {
			opts = append(opts, Strict())
		}
		r, err := NewReader(bytes.NewReader(in), "fuzz", opts...)
		if err != nil {
			return
		}
		defer r.Close()
		n := 0
		for {
			row, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				if _, again := r.Next(); again == nil {
					t.Fatal("Next succeeded after an error")
				}
				break
			}
			n++
			if !row.Prefix.IsValid() || row.Prefix != row.Prefix.Masked() {
				t.Fatalf("invalid or unmasked prefix %v", row.Prefix)
			}
			if math.IsNaN(row.Lat) || math.Abs(row.Lat) > 90 || math.IsNaN(row.Lon) || math.Abs(row.Lon) > 180 {
				t.Fatalf("coordinates %v, %v", row.Lat, row.Lon)
			}
			if len(row.Country) != 0 && len(row.Country) != 2 {
				t.Fatalf("country %q", row.Country)
			}
			if a := row.Addr(uint64(n)); !row.Prefix.Contains(a) {
				t.Fatalf("Addr %v outside %v", a, row.Prefix)
			}
		}
		st := r.Stats()
		if st.Rows != n || len(st.Examples) > maxExamples || len(st.Examples) > st.Skipped || (strict && st.Skipped != 0) {
			t.Fatalf("stats %+v after %d rows", st, n)
		}
	})
}
