package overlay

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
)

// maxKeyFile bounds an identity file; a marshalled Ed25519 key is 68 bytes.
const maxKeyFile = 16 << 10

// LoadIdentity returns the node's private key stored at path, creating an
// Ed25519 key there (mode 0600, written atomically) when the file does not
// exist. The key is the node's peer id for its whole life: back it up with
// the rest of the node's state. A key file readable by group or others is
// refused, as ssh refuses such keys.
//
// The key lives in its own file rather than in badger so that operators can
// back it up, move it between machines and keep it when they wipe the
// database.
func LoadIdentity(path string) (crypto.PrivKey, error) {
	b, err := readKeyFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return createIdentity(path)
	}
	if err != nil {
		return nil, err
	}
	sk, err := crypto.UnmarshalPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("identity %s: %w", path, err)
	}
	return sk, nil
}

func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("identity %s: not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("identity %s: permissions %#o are too open; the key must be readable by its owner only (chmod 600)", path, st.Mode().Perm())
	}
	if st.Size() > maxKeyFile {
		return nil, fmt.Errorf("identity %s: %d bytes is not a key", path, st.Size())
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("identity %s: %w", path, err)
	}
	return b, nil
}

func createIdentity(path string) (crypto.PrivKey, error) {
	sk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		return nil, fmt.Errorf("generating identity: %w", err)
	}
	b, err := crypto.MarshalPrivateKey(sk)
	if err != nil {
		return nil, fmt.Errorf("marshalling identity: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("identity directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".identity-*")
	if err != nil {
		return nil, fmt.Errorf("writing identity: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		return nil, errors.Join(fmt.Errorf("writing identity: %w", err), tmp.Close())
	}
	if _, err := tmp.Write(b); err != nil {
		return nil, errors.Join(fmt.Errorf("writing identity: %w", err), tmp.Close())
	}
	if err := tmp.Sync(); err != nil {
		return nil, errors.Join(fmt.Errorf("writing identity: %w", err), tmp.Close())
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("writing identity: %w", err)
	}
	// Link, not rename: if another process created the key meanwhile, keep
	// theirs rather than replacing a key that may already be in use.
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return LoadIdentity(path)
		}
		return nil, fmt.Errorf("writing identity: %w", err)
	}
	return sk, nil
}
