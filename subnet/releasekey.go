package subnet

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
)

// pemPrivateKey is the PEM block type of a release key file.
const pemPrivateKey = "PRIVATE KEY"

// NewReleaseKey makes a release key and returns it as a PEM file (PKCS #8,
// as openssl writes ed25519 keys) with its public key.
func NewReleaseKey() (file []byte, public ed25519.PublicKey, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der}), pub, nil
}

// ParseReleaseKeyFile reads a release key from a PEM file (PKCS #8 ed25519,
// as NewReleaseKey or `openssl genpkey -algorithm ed25519` writes it).
func ParseReleaseKeyFile(data []byte) (ed25519.PrivateKey, error) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != pemPrivateKey {
		return nil, fmt.Errorf("%w: not a PEM %q block", ErrBadRelease, pemPrivateKey)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRelease, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: a %T key, not ed25519", ErrBadRelease, k)
	}
	return priv, nil
}
