module github.com/micra-net/micra

go 1.26.0

require (
	github.com/klauspost/compress v1.19.1
	github.com/schollz/progressbar/v3 v3.18.0
	golang.org/x/term v0.45.0
)

require (
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
