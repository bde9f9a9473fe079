package overlay

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Receipts of crawl requests. A node that takes a crawl request
// signs a receipt for it: its link and when it took it, with the node's
// own key. The sender keeps it; a withholding notice (Withheld) carries
// it, and the coordinator judges a notice only on a receipt the holder
// signed, at least the grace before: a notice is then evidence that the
// holder took the request, not any peer's word that it was sent.

// receiptPrefix is what a receipt's signature covers before the time and
// the link, so that it can never be taken for any other signature.
const receiptPrefix = "micra-receipt/1:"

// MaxReceiptSig bounds a receipt's signature (an ed25519 one is 64 bytes,
// an RSA-4096 one 512).
const MaxReceiptSig = 512

func receiptBytes(link string, atMs int64) []byte {
	b := make([]byte, 0, len(receiptPrefix)+8+len(link))
	b = append(b, receiptPrefix...)
	b = binary.BigEndian.AppendUint64(b, uint64(atMs))
	return append(b, link...)
}

// SignReceipt signs the receipt of a crawl request for link taken at at
// (to the millisecond) with key, the taking node's own.
func SignReceipt(key crypto.PrivKey, link string, at time.Time) ([]byte, error) {
	if key == nil {
		return nil, fmt.Errorf("receipt: %w: no key", ErrMalformed)
	}
	return key.Sign(receiptBytes(link, at.UnixMilli()))
}

// VerifyReceipt checks that holder signed sig, the receipt of a crawl
// request for link taken at at (to the millisecond). holder's key must be
// embedded in its ID (ed25519 and secp256k1 keys are).
func VerifyReceipt(holder peer.ID, link string, at time.Time, sig []byte) error {
	if len(sig) == 0 || len(sig) > MaxReceiptSig {
		return fmt.Errorf("receipt: %w: signature of %d bytes", ErrMalformed, len(sig))
	}
	pk, err := holder.ExtractPublicKey()
	if err != nil {
		return fmt.Errorf("receipt: %w: %s's key is not embedded in its ID: %v", ErrMalformed, holder, err)
	}
	if ok, err := pk.Verify(receiptBytes(link, at.UnixMilli()), sig); err != nil || !ok {
		return fmt.Errorf("receipt: %w: not %s's signature of %s at %s", ErrForbidden, holder, link, at.UTC().Format(time.RFC3339Nano))
	}
	return nil
}
