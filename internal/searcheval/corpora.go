package searcheval

import (
	"os"
	"path/filepath"
)

// Corpus is a real site whose Debian package ships its HTML with a
// human-made index.
type Corpus struct {
	Name    string // short name, for flags and tables
	Dir     string // the site's root once the package is installed
	Package string // the Debian package that installs it
	Index   string // the index the judgments come from
}

// Corpora are the sites the evaluation knows: two generators (Sphinx,
// Texinfo) and two kinds of index (an API-heavy general index, a manual's
// concept and function indexes). The PostgreSQL manual is deliberately
// not among them: it is held back as a check.
var Corpora = []Corpus{
	{Name: "django", Dir: "/usr/share/doc/python-django-doc/html", Package: "python-django-doc",
		Index: "Sphinx general index (genindex.html)"},
	{Name: "octave", Dir: "/usr/share/doc/octave/octave.html", Package: "octave-doc",
		Index: "Texinfo concept, function, operator and graphics-property indexes"},
	{Name: "zsh", Dir: "/usr/share/doc/zsh-doc/html", Package: "zsh-doc",
		Index: "Texinfo concept, option, variable, function and style indexes"},
	{Name: "python", Dir: "/usr/share/doc/python3.11/html", Package: "python3.11-doc",
		Index: "Sphinx general index (genindex-*.html)"},
}

// Installed reports whether the corpus's pages are on this machine.
func (c Corpus) Installed() bool {
	_, err := os.Stat(filepath.Join(c.Dir, "index.html"))
	return err == nil
}

// FindCorpus returns the known corpus of that name.
func FindCorpus(name string) (Corpus, bool) {
	for _, c := range Corpora {
		if c.Name == name {
			return c, true
		}
	}
	return Corpus{}, false
}
