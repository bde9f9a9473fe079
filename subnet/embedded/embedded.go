// Package embedded holds micra's default subnet snapshot, built from the
// real registry data in ../shared/data and compiled into the binary, so that
// a node and the subnet commands work with no files at hand.
//
// The snapshot is derived data; see NOTICE for its sources and licences
// (the ip2asn layer is CC BY 4.0 and requires attribution). Regenerate it
// with "go generate ./subnet/embedded" from a checkout with ../shared beside
// it; TestEmbeddedIsCurrent fails when it is stale.
//
// embedded imports only subnet.
package embedded

import (
	_ "embed"
	"sync"

	"github.com/micra-net/micra/subnet"
)

//go:generate sh -c "cd ../.. && go run ./cmd/micra subnet import --progress never --out subnet/embedded/default.snap $(cat subnet/embedded/inputs.txt)"

//go:embed default.snap
var snapshot []byte

// Inputs lists the files the default snapshot is built from, relative to the
// repository root, in the order they are added.
//
//go:embed inputs.txt
var Inputs string

var load = sync.OnceValues(func() (*subnet.Tree, error) { return subnet.DecodeSnapshot(snapshot) })

// Tree returns the default hierarchy. It decodes the snapshot on the first
// call and returns the same immutable tree afterwards; it is safe for
// concurrent use.
func Tree() (*subnet.Tree, error) { return load() }

// Bytes returns the encoded default snapshot. Callers must not modify it.
func Bytes() []byte { return snapshot }
