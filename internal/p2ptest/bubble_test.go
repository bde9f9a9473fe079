package p2ptest

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every bubble goes through Bubble: a direct synctest.Test aborts the race
// runtime now and then (see Bubble), far from the test that caused it.
func TestBubblesGoThroughBubble(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	self, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		if abs, _ := filepath.Abs(filepath.Dir(path)); abs == self {
			return nil // Bubble itself, and this test
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if strings.Contains(string(b), "synctest.Test(") || strings.Contains(string(b), "synctest.Run(") {
			t.Errorf("%s: calls synctest directly; use p2ptest.Bubble", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked %d Go files from %s: not the module", files, root)
	}
}
