package textproc

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func words(s string) []string {
	var out []string
	var buf []byte
	Tokens(s, &buf, func(w []byte) bool { out = append(out, string(w)); return true })
	return out
}

func TestTokens(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"Hello, World!", []string{"hello", "world"}},
		{"It's 2024-11-22 at 10:30", []string{"it's", "at"}},
		{"version2 x 42", []string{"version2"}},
		{"Ünïcödé ΑΘΗΝΑ straße", []string{"ünïcödé", "αθηνα", "straße"}},
		{"don’t 'quoted'", []string{"don't", "quoted"}},
		{strings.Repeat("a", 41) + " ok", []string{"ok"}},
		{"", nil},
		// Identifiers: their parts, then the parts joined.
		{"DEFAULT_AUTO_FIELD is set", []string{"default", "auto", "field", "defaultautofield", "is", "set"}},
		{"os.path.join() python3.11", []string{"os", "path", "join", "ospathjoin", "python3", "python311"}},
		{"über_größe", []string{"über", "größe", "übergröße"}},
		// Not identifiers: a sentence's end, a lone or doubled joiner,
		// numbers alone, one part.
		{"the end. Start", []string{"the", "end", "start"}},
		{"__len__ a__b", []string{"len"}},
		{"v1.2.3 10.0.0.1", []string{"v1", "v123"}},
		{"x." + strings.Repeat("b", 40) + ".c." + strings.Repeat("d", 30), []string{strings.Repeat("b", 40), strings.Repeat("d", 30)}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := words(tt.in); !slices.Equal(got, tt.want) {
				t.Fatalf("Tokens(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestTopWeights(t *testing.T) {
	b := NewBuilder()
	b.Add("Volcanoes of Cyprus", Title)
	b.Add("The island has many beaches. Beaches are sunny; the running runners run.", Body)
	top := b.Top(10)
	if len(top) == 0 || top[0].Weight != 65535 {
		t.Fatalf("top = %v", top)
	}
	terms := map[string]uint16{}
	for _, k := range top {
		terms[k.Term] = k.Weight
	}
	for _, stop := range []string{"the", "of", "are", "has"} {
		if _, ok := terms[stop]; ok {
			t.Errorf("stop word %q kept", stop)
		}
	}
	if _, ok := terms["run"]; !ok {
		t.Errorf("stemming: no 'run' in %v", top)
	}
	if terms["volcano"] <= terms["beach"] {
		t.Errorf("title word not heavier than a repeated body word: %v", top)
	}
	if len(b.Top(1)) != 1 {
		t.Error("Top(1) not bounded")
	}
}

func TestSimHashNearDuplicates(t *testing.T) {
	base := strings.Repeat("distributed crawler volunteers fetch pages near their servers and compress keyword records for indexers ", 5)
	fp := func(s string) uint64 {
		b := NewBuilder()
		b.Add(s, Body)
		return b.SimHash()
	}
	a := fp(base + "one small extra sentence")
	same := fp(base + "one small additional sentence")
	other := fp("recipes for bread cakes flour yeast oven baking sugar butter eggs milk chocolate cream dessert kitchen")
	if d := Hamming(a, same); d > 12 {
		t.Errorf("near duplicates differ by %d bits", d)
	}
	if d := Hamming(a, other); d < 16 {
		t.Errorf("unrelated pages differ by only %d bits", d)
	}
}

func TestDigestIgnoresTrivialChanges(t *testing.T) {
	page := func(counter int, day string) uint64 {
		b := NewBuilder()
		title := fmt.Sprintf("News %d", counter)
		b.Add(title, Title)
		b.Add(fmt.Sprintf("Updated %s 2024-11-%02d, visitors: %d. The harbour project continues.", day, counter%28+1, counter*7), Body)
		return Digest(title, b.Top(32), []string{"http://a/x"})
	}
	if page(1, "Monday") != page(2, "Tuesday") {
		t.Error("counter/date change not trivial")
	}
	b := NewBuilder()
	b.Add("News", Title)
	b.Add("Updated. The airport project stops.", Body)
	if Digest("News", b.Top(32), []string{"http://a/x"}) == page(1, "Monday") {
		t.Error("real change considered trivial")
	}
	if Digest("t", nil, []string{"a", "b"}) != Digest("t", nil, []string{"b", "a", "a"}) {
		t.Error("link order or duplicates matter")
	}
	if Digest("t", nil, []string{"a"}) == Digest("t", nil, []string{"b"}) {
		t.Error("link change ignored")
	}
}

func FuzzTokens(f *testing.F) {
	f.Add("Hello wörld it's 42")
	f.Fuzz(func(t *testing.T, s string) {
		b := NewBuilder()
		b.Add(s, Body)
		for _, k := range b.Top(64) {
			if k.Term == "" || len(k.Term) > maxWordLen {
				t.Fatalf("bad term %q", k.Term)
			}
		}
	})
}

var benchText = strings.Repeat("The quick brown fox jumps over the lazy dog while volunteers crawl their nearest web servers. ", 200)

func BenchmarkKeywords(b *testing.B) {
	bd := NewBuilder()
	b.ReportAllocs()
	b.SetBytes(int64(len(benchText)))
	for b.Loop() {
		bd.Reset()
		bd.Add("Quick brown fox", Title)
		bd.Add(benchText, Body)
		bd.Top(64)
		bd.SimHash()
	}
}
