package crawl

import "github.com/micra-net/micra/internal/codec"

// Stored values and records are written with codec.Encoder and read with
// a codec.Decoder; every stored value starts with a version byte.

// newDecoder returns a decoder of a stored value or a record, whose
// failures wrap ErrCorruptValue.
func newDecoder(b []byte) codec.Decoder { return codec.NewDecoder(b, ErrCorruptValue) }
