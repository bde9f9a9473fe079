package egress

import "testing"

func TestHostOf(t *testing.T) {
	for raw, want := range map[string]string{
		"http://Example.ORG:8080/a": "example.org",
		"https://[2001:DB8::1]/":    "2001:db8::1",
		"http://127.0.0.1/x":        "127.0.0.1",
		"::not a url":               "",
		"/relative":                 "",
	} {
		if got := HostOf(raw); got != want {
			t.Errorf("HostOf(%q) = %q, want %q", raw, got, want)
		}
	}
}
