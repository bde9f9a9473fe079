package subnet

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"
)

// releaseFixture returns a snapshot file, its tree and two release keys.
func releaseFixture(t testing.TB) (data []byte, tr *Tree, key, other ed25519.PrivateKey) {
	t.Helper()
	tr, _ = build(t, "inetnum: 10.0.0.0 - 10.255.255.255\nnetname: A\nsource: RIPE\n\ninetnum: 10.1.0.0 - 10.1.255.255\nnetname: B\nsource: RIPE\n")
	var buf bytes.Buffer
	if err := tr.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	keyFile, _, err := NewReleaseKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err = ParseReleaseKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	_, other, err = ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), tr, key, other
}

func TestRelease(t *testing.T) {
	data, tr, key, other := releaseFixture(t)
	parent := SnapshotID{1, 2, 3}
	pub := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	act := pub.Add(time.Hour)
	r, enc, err := NewRelease(key, data, parent, pub, act)
	if err != nil {
		t.Fatal(err)
	}
	if len(enc) != ReleaseSize {
		t.Fatalf("encoded %d bytes, want %d", len(enc), ReleaseSize)
	}
	pubKey := key.Public().(ed25519.PublicKey)
	otherKey := other.Public().(ed25519.PublicKey)
	keys := []ed25519.PublicKey{otherKey, pubKey}

	back, err := DecodeRelease(enc, keys)
	if err != nil {
		t.Fatal(err)
	}
	if back.Snapshot != tr.ID() || back.Parent != parent || !back.Published.Equal(pub) || !back.Activation.Equal(act) ||
		back.Size != uint64(len(data)) || back.FileHash != r.FileHash || !back.Key.Equal(pubKey) {
		t.Errorf("decoded %+v, want %+v", back, r)
	}
	if err := back.Check(parent, pub); err != nil {
		t.Errorf("a timely release: %v", err)
	}
	if err := back.Check(parent, act.Add(30*24*time.Hour)); err != nil {
		t.Errorf("a node catching up after the activation must take the release: %v", err)
	}
	if err := back.CheckFile(data); err != nil {
		t.Errorf("the released file: %v", err)
	}
	if key2, err := ParseReleaseKey(FormatReleaseKey(pubKey)); err != nil || !key2.Equal(pubKey) {
		t.Errorf("release key text round trip: %v", err)
	}

	// Refused releases, one case at a time.
	flip := func(i int) []byte {
		b := bytes.Clone(enc)
		b[i] ^= 1
		return b
	}
	unsigned := bytes.Clone(enc)
	clear(unsigned[releaseSigned:])
	// A release re-signed by a key that is not configured.
	_, foreign, err := NewRelease(other, data, parent, pub, act)
	if err != nil {
		t.Fatal(err)
	}
	// A key swapped in the bytes: the signature no longer verifies.
	swapped := bytes.Clone(enc)
	copy(swapped[releaseSigned-ed25519.PublicKeySize:], otherKey)
	for _, c := range []struct {
		name string
		data []byte
		keys []ed25519.PublicKey
		want error
	}{
		{"empty", nil, keys, ErrBadRelease},
		{"truncated", enc[:ReleaseSize-1], keys, ErrBadRelease},
		{"oversized", append(bytes.Clone(enc), 0), keys, ErrBadRelease},
		{"bad magic", flip(0), keys, ErrBadRelease},
		{"other version", flip(8), keys, ErrBadRelease},
		{"unsigned", unsigned, keys, ErrUntrustedRelease},
		{"no keys configured", enc, nil, ErrUntrustedRelease},
		{"signed by an unknown key", foreign, []ed25519.PublicKey{pubKey}, ErrUntrustedRelease},
		{"key swapped", swapped, keys, ErrUntrustedRelease},
		{"snapshot id changed", flip(9), keys, ErrUntrustedRelease},
		{"activation changed", flip(9 + 64 + 8 + 7), keys, ErrUntrustedRelease},
		{"signature changed", flip(ReleaseSize - 1), keys, ErrUntrustedRelease},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := DecodeRelease(c.data, c.keys); !errors.Is(err, c.want) {
				t.Errorf("got %v, want %v", err, c.want)
			}
		})
	}

	for _, c := range []struct {
		name     string
		pub, act time.Time
	}{
		{"activation before publication", pub, pub.Add(-time.Minute)},
		{"activation too soon", pub, pub.Add(MinReleaseLead - time.Second)},
		{"activation too far ahead", pub, pub.Add(MaxReleaseLead + time.Second)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := NewRelease(key, data, parent, c.pub, c.act); !errors.Is(err, ErrReleaseTime) {
				t.Errorf("publish: got %v, want ErrReleaseTime", err)
			}
			// The same release signed anyway is refused by the nodes.
			r := Release{Snapshot: tr.ID(), Parent: parent, Published: c.pub, Activation: c.act, Size: 1, Key: pubKey}
			b := r.appendSigned(nil)
			b = append(b, ed25519.Sign(key, b)...)
			got, err := DecodeRelease(b, keys)
			if err != nil {
				t.Fatal(err)
			}
			if err := got.Check(parent, pub); !errors.Is(err, ErrReleaseTime) {
				t.Errorf("check: got %v, want ErrReleaseTime", err)
			}
		})
	}
	if err := back.Check(parent, pub.Add(-ReleaseClockSkew-time.Second)); !errors.Is(err, ErrReleaseTime) {
		t.Errorf("published in the future: got %v, want ErrReleaseTime", err)
	}
	if err := back.Check(tr.ID(), pub); !errors.Is(err, ErrReleaseParent) {
		t.Errorf("another parent: got %v, want ErrReleaseParent", err)
	}
	if err := back.CheckFile(data[:len(data)-1]); !errors.Is(err, ErrReleaseFile) {
		t.Errorf("truncated file: got %v, want ErrReleaseFile", err)
	}
	corrupt := bytes.Clone(data)
	corrupt[len(corrupt)-1] ^= 1
	if err := back.CheckFile(corrupt); !errors.Is(err, ErrReleaseFile) {
		t.Errorf("changed file: got %v, want ErrReleaseFile", err)
	}
	if _, _, err := NewRelease(key, data[:20], parent, pub, act); !errors.Is(err, ErrCorruptSnapshot) {
		t.Errorf("publishing a broken snapshot: got %v, want ErrCorruptSnapshot", err)
	}
	if _, _, err := NewRelease(key, data, tr.ID(), pub, act); !errors.Is(err, ErrBadRelease) {
		t.Errorf("a snapshot replacing itself: got %v, want ErrBadRelease", err)
	}
	for _, s := range []string{"", "ed25519:", "ed25519:AAAA", "rsa:" + FormatReleaseKey(pubKey)[8:], "ed25519:%%%"} {
		if _, err := ParseReleaseKey(s); !errors.Is(err, ErrBadRelease) {
			t.Errorf("ParseReleaseKey(%q): got %v, want ErrBadRelease", s, err)
		}
	}
	if _, err := ParseReleaseKeyFile([]byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")); !errors.Is(err, ErrBadRelease) {
		t.Errorf("a public key file as the release key: got %v", err)
	}
}

func FuzzRelease(f *testing.F) {
	data, _, key, _ := releaseFixture(f)
	pub := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	_, enc, err := NewRelease(key, data, SnapshotID{1}, pub, pub.Add(time.Hour))
	if err != nil {
		f.Fatal(err)
	}
	keys := []ed25519.PublicKey{key.Public().(ed25519.PublicKey)}
	f.Add(enc)
	f.Add([]byte(releaseMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRelease(b, keys)
		if err != nil {
			return
		}
		// Only the signed bytes decode, and they re-encode to themselves.
		if got := append(r.appendSigned(nil), r.Signature...); !bytes.Equal(got, b) {
			t.Fatalf("release re-encodes to other bytes")
		}
		_ = r.Check(SnapshotID{1}, pub)
	})
}
