package subnet

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// A release says that a snapshot is a network's next hierarchy: which
// snapshot, which one it replaces, and when every node switches to it. It is
// signed by one of the network's release keys, and nodes accept only
// releases signed by a key they are configured with.
//
// Release file layout (integers big-endian), exactly ReleaseSize bytes:
//
//	magic       8 bytes "MICRARL\n"
//	version     1 byte, 1
//	snapshot    32 bytes: the snapshot's id (SHA-256 of its body)
//	parent      32 bytes: the id of the snapshot it replaces
//	published   8 bytes: Unix seconds
//	activation  8 bytes: Unix seconds
//	size        8 bytes: length of the snapshot file
//	file hash   32 bytes: SHA-256 of the snapshot file, to check fetched
//	            bytes before decoding them
//	key         32 bytes: the ed25519 public key that signs
//	signature   64 bytes: ed25519 over every byte before it
//
// The encoding is fixed so that the signed bytes are canonical; a release is
// small enough to travel in one pubsub message.
const (
	releaseMagic   = "MICRARL\n"
	releaseVersion = 1
	releaseSigned  = 8 + 1 + 32 + 32 + 8 + 8 + 8 + 32 + 32

	// ReleaseSize is the length of an encoded release.
	ReleaseSize = releaseSigned + ed25519.SignatureSize
)

// Bounds on a release's times, checked by Release.Check.
const (
	// MinReleaseLead is the least time between a release's publication and
	// its activation: enough for the release and the snapshot to reach
	// every node of a network that checks in every few minutes.
	MinReleaseLead = 10 * time.Minute
	// MaxReleaseLead is the most: a release further ahead is more likely a
	// mistake than a plan.
	MaxReleaseLead = 30 * 24 * time.Hour
	// ReleaseClockSkew is how far in the future a release's publication
	// time may lie by the checking node's clock.
	ReleaseClockSkew = 10 * time.Minute
)

// Release is a decoded, signed release.
type Release struct {
	Snapshot   SnapshotID
	Parent     SnapshotID
	Published  time.Time // UTC, whole seconds
	Activation time.Time // UTC, whole seconds
	Size       uint64    // bytes of the snapshot file
	FileHash   [32]byte  // SHA-256 of the snapshot file
	Key        ed25519.PublicKey
	Signature  []byte
}

// NewRelease signs a release of the snapshot file data, which replaces the
// snapshot parent and activates at activation. It checks that data is a
// valid snapshot and that the times are within bounds as of published.
func NewRelease(key ed25519.PrivateKey, data []byte, parent SnapshotID, published, activation time.Time) (Release, []byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return Release{}, nil, fmt.Errorf("%w: release key of %d bytes, want %d", ErrBadRelease, len(key), ed25519.PrivateKeySize)
	}
	t, err := DecodeSnapshot(data)
	if err != nil {
		return Release{}, nil, err
	}
	if t.ID() == parent {
		return Release{}, nil, fmt.Errorf("%w: the snapshot is its own parent %s", ErrBadRelease, parent.Short())
	}
	r := Release{
		Snapshot:   t.ID(),
		Parent:     parent,
		Published:  published.UTC().Truncate(time.Second),
		Activation: activation.UTC().Truncate(time.Second),
		Size:       uint64(len(data)),
		FileHash:   sha256.Sum256(data),
		Key:        key.Public().(ed25519.PublicKey),
	}
	if err := r.checkLead(); err != nil {
		return Release{}, nil, err
	}
	signed := r.appendSigned(make([]byte, 0, ReleaseSize))
	r.Signature = ed25519.Sign(key, signed)
	return r, append(signed, r.Signature...), nil
}

func (r Release) appendSigned(b []byte) []byte {
	b = append(b, releaseMagic...)
	b = append(b, releaseVersion)
	b = append(b, r.Snapshot[:]...)
	b = append(b, r.Parent[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Published.Unix()))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Activation.Unix()))
	b = binary.BigEndian.AppendUint64(b, r.Size)
	b = append(b, r.FileHash[:]...)
	return append(b, r.Key...)
}

// DecodeRelease decodes a release and checks that it is signed by one of
// keys. The input is untrusted: a release of the wrong size or version is
// an error wrapping ErrBadRelease, one signed by another key or with a bad
// signature wraps ErrUntrustedRelease. It does not check the times or the
// parent; see Check.
func DecodeRelease(data []byte, keys []ed25519.PublicKey) (Release, error) {
	if len(data) != ReleaseSize {
		return Release{}, fmt.Errorf("%w: %d bytes, want %d", ErrBadRelease, len(data), ReleaseSize)
	}
	if string(data[:8]) != releaseMagic {
		return Release{}, fmt.Errorf("%w: not a micra release (bad magic)", ErrBadRelease)
	}
	if v := data[8]; v != releaseVersion {
		return Release{}, fmt.Errorf("%w: unsupported release version %d (this build reads version %d)", ErrBadRelease, v, releaseVersion)
	}
	var r Release
	b := data[9:]
	b = b[copy(r.Snapshot[:], b):]
	b = b[copy(r.Parent[:], b):]
	pub, act := int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[8:]))
	r.Published, r.Activation = time.Unix(pub, 0).UTC(), time.Unix(act, 0).UTC()
	r.Size = binary.BigEndian.Uint64(b[16:])
	b = b[24:]
	b = b[copy(r.FileHash[:], b):]
	r.Key = bytes.Clone(b[:ed25519.PublicKeySize])
	r.Signature = bytes.Clone(b[ed25519.PublicKeySize:])
	trusted := false
	for _, k := range keys {
		if k.Equal(r.Key) {
			trusted = true
			break
		}
	}
	if !trusted {
		return Release{}, fmt.Errorf("%w: signed by %s, not a configured release key", ErrUntrustedRelease, FormatReleaseKey(r.Key))
	}
	if !ed25519.Verify(r.Key, data[:releaseSigned], r.Signature) {
		return Release{}, fmt.Errorf("%w: bad signature by %s", ErrUntrustedRelease, FormatReleaseKey(r.Key))
	}
	if r.Snapshot == r.Parent {
		return Release{}, fmt.Errorf("%w: the snapshot is its own parent %s", ErrBadRelease, r.Parent.Short())
	}
	if r.Size == 0 || r.Size > MaxSnapshotSize {
		return Release{}, fmt.Errorf("%w: snapshot of %d bytes (at most %d)", ErrBadRelease, r.Size, MaxSnapshotSize)
	}
	return r, nil
}

// checkLead checks the activation against the publication time.
func (r Release) checkLead() error {
	lead := r.Activation.Sub(r.Published)
	switch {
	case lead < MinReleaseLead:
		return fmt.Errorf("%w: activation %s is %s after publication %s, at least %s needed",
			ErrReleaseTime, r.Activation.Format(time.RFC3339), lead, r.Published.Format(time.RFC3339), MinReleaseLead)
	case lead > MaxReleaseLead:
		return fmt.Errorf("%w: activation %s is %s after publication, at most %s allowed",
			ErrReleaseTime, r.Activation.Format(time.RFC3339), lead, MaxReleaseLead)
	}
	return nil
}

// Check decides whether a node running the snapshot running may take the
// release at now: the release must replace running (ErrReleaseParent), and
// its times must be sane (ErrReleaseTime): published no later than now plus
// ReleaseClockSkew, activating between MinReleaseLead and MaxReleaseLead
// after its publication. An activation time already past is accepted when
// the publication was timely: a node that was offline catches up and
// switches at once.
func (r Release) Check(running SnapshotID, now time.Time) error {
	if r.Parent != running {
		return fmt.Errorf("%w: it replaces %s, this node runs %s", ErrReleaseParent, r.Parent.Short(), running.Short())
	}
	if r.Published.After(now.Add(ReleaseClockSkew)) {
		return fmt.Errorf("%w: published %s, in the future", ErrReleaseTime, r.Published.Format(time.RFC3339))
	}
	return r.checkLead()
}

// CheckFile checks that data is the snapshot file the release names, by its
// size and hash, before it is decoded.
func (r Release) CheckFile(data []byte) error {
	if uint64(len(data)) != r.Size {
		return fmt.Errorf("%w: %d bytes, the release says %d", ErrReleaseFile, len(data), r.Size)
	}
	if sha256.Sum256(data) != r.FileHash {
		return fmt.Errorf("%w: its hash differs from the release's", ErrReleaseFile)
	}
	return nil
}

// releaseKeyPrefix starts the text form of a release key.
const releaseKeyPrefix = "ed25519:"

// FormatReleaseKey writes a public release key as "ed25519:" followed by
// its standard base64, the form of the snapshot_keys setting.
func FormatReleaseKey(k ed25519.PublicKey) string {
	return releaseKeyPrefix + base64.StdEncoding.EncodeToString(k)
}

// ParseReleaseKey parses a key written by FormatReleaseKey.
func ParseReleaseKey(s string) (ed25519.PublicKey, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), releaseKeyPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: release key %q does not start with %q", ErrBadRelease, s, releaseKeyPrefix)
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: release key %q is not %d bytes of base64", ErrBadRelease, s, ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}
