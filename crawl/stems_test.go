package crawl

import "testing"

// FuzzHasTerms checks HasTerms against Stems, which it stands in for.
func FuzzHasTerms(f *testing.F) {
	for _, s := range []string{"", "the", "if", "GET", "-v", `\d`, "HttpRequest.GET", "a b c", "2024", "python3.11",
		"running dogs", "DEFAULT_AUTO_FIELD", "x_y", "don't", "l'été", "ÉCOLE", "monday", "it's", "ab", "z9", "__all__"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := HasTerms(s), len(Stems(s, 1)) > 0; got != want {
			t.Fatalf("HasTerms(%q) = %v, Stems gives %q", s, got, Stems(s, 4))
		}
	})
}
