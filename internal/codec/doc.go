// Package codec reads and writes micra's compact binary encodings: the
// values the crawler and the index store, the records of a batch and the
// subnet snapshot. Its parts are unsigned varints, zig-zag varints,
// big-endian fixed-width integers, length-prefixed strings and bytes, and
// times and durations built on them; the layout of each value is its
// owner's.
//
// Decoder reads untrusted input: it never panics, it never allocates more
// than its input justifies (every length and count is checked against a
// caller's limit and against the input left), and its first failure sticks,
// so that a caller reads a whole value and checks once. A failure is an
// *Error saying what is wrong and at which offset, wrapping the caller's
// sentinel.
//
// codec is a leaf: it imports nothing of micra's and nothing outside the
// standard library, so that any package may use it, the leaf packages
// subnet and crawl included.
package codec
