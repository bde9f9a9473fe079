package suggest

import "testing"

func TestClosest(t *testing.T) {
	keys := []string{"bandwidth", "daily_transfer", "capacity", "data_dir", "dns", "listen", "log_level"}
	for _, c := range []struct {
		word, want string
		ok         bool
	}{
		{"bandwdith", "bandwidth", true}, // swap
		{"capactiy", "capacity", true},
		{"CAPACITY", "", false}, // present, whatever the case
		{"capacit", "capacity", true},
		{"data-dir", "data_dir", true},
		{"dsn", "dns", true},
		{"xyz", "", false},
		{"listening", "listen", true}, // 3 edits in 9 letters: a third
		{"listings", "", false},       // 3 edits in 8 letters
		{"", "", false},
		{"threshold", "", false},
	} {
		got, ok := Closest(c.word, keys)
		if got != c.want || ok != c.ok {
			t.Errorf("Closest(%q) = %q, %v; want %q, %v", c.word, got, ok, c.want, c.ok)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"a", "", 1}, {"", "abc", 3}, {"kitten", "sitting", 3}, {"ab", "ba", 1}, {"abc", "acb", 1}, {"héllo", "hello", 1},
	} {
		if got := distance(c.a, c.b); got != c.d {
			t.Errorf("distance(%q, %q) = %d, want %d", c.a, c.b, got, c.d)
		}
		if got := distance(c.b, c.a); got != c.d {
			t.Errorf("distance(%q, %q) = %d, want %d", c.b, c.a, got, c.d)
		}
	}
}
