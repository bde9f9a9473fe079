// Package pgserver starts throwaway PostgreSQL servers for tests and
// benchmarks: each Start runs initdb into a new temporary directory and
// starts postgres on a free loopback port, tuned for speed over
// durability (fsync, synchronous_commit and full_page_writes off). Nothing
// survives Stop, and a server that outlives its test process by accident
// is killed with it (on Linux, through the parent-death signal).
//
// It uses the PostgreSQL binaries already on the machine, found in this
// order: the directory named by $PG_BIN, the newest
// /usr/lib/postgresql/<version>/bin holding initdb (Debian's layout), then
// initdb and postgres on $PATH. When none are found, Start returns an
// error wrapping ErrUnavailable, which tests turn into a skip.
//
// PostgreSQL refuses to run as root, so when the caller is root the
// cluster is made and run as the postgres system user that Debian's
// package creates; the server never runs as root.
//
// pgserver runs on unix systems only, and imports nothing of micra's.
package pgserver
