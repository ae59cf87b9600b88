package controller

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoFacetImportsAnother: a controller package depends on shared
// packages (facet and its test helpers, internal/...) and never on another
// controller; what two controllers need lives in a shared package.
func TestNoFacetImportsAnother(t *testing.T) {
	const prefix = "github.com/dbkeeper/dbkeeper/internal/controller/"
	shared := map[string]bool{"facet": true, "facet/facettest": true}
	dirs, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() || shared[d.Name()] {
			continue
		}
		files, err := filepath.Glob(filepath.Join(d.Name(), "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range parsed.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if other, ok := strings.CutPrefix(path, prefix); ok && !shared[other] {
					t.Errorf("%s imports the controller %s: move what both need into a shared package", f, other)
				}
			}
		}
	}
}
