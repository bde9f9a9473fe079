package worldmap

import (
	"regexp"
	"strings"
	"testing"
)

func TestLand(t *testing.T) {
	d := Land()
	if len(d) < 10000 || !strings.HasPrefix(d, "M") || !strings.HasSuffix(d, "Z") {
		t.Fatalf("land path of %d bytes: %.40s…", len(d), d)
	}
	// Only move, line and close commands, with coordinates in the map.
	if bad := regexp.MustCompile(`[^MLZ0-9. -]`).FindString(d); bad != "" {
		t.Fatalf("unexpected %q in the path", bad)
	}
	for _, n := range regexp.MustCompile(`[0-9.]+`).FindAllString(d, -1) {
		if len(n) > 5 || strings.Count(n, ".") > 1 {
			t.Fatalf("coordinate %q", n)
		}
	}
}

func TestCountry(t *testing.T) {
	for cc, box := range map[string][4]float64{ // longitude and latitude bounds
		"DE": {5, 16, 47, 56}, "US": {-125, -66, 24, 50}, "JP": {128, 146, 30, 46},
		"AU": {112, 155, -44, -10}, "BR": {-74, -34, -34, 6}, "CY": {32, 35, 34, 36},
	} {
		x, y, ok := Country(cc)
		lon, lat := x-180, 90-y
		if !ok || lon < box[0] || lon > box[1] || lat < box[2] || lat > box[3] {
			t.Errorf("%s at %.1f, %.1f (%v)", cc, lat, lon, ok)
		}
	}
	for _, cc := range []string{"", "ZZ", "EU", "de"} {
		if _, _, ok := Country(cc); ok {
			t.Errorf("%q has a position", cc)
		}
	}
}
