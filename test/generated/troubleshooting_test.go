package generated_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// reasonEntry is one reason constant and the section of the troubleshooting
// page that must explain it.
type reasonEntry struct {
	section, value, constant string
}

// TestEveryReasonIsTroubleshot (issue 30): docs/operations/troubleshooting.md
// has an entry, under the condition that carries it, for every condition
// reason of the API (apis/database/v1: the const blocks "Reasons of X"), and
// under Events for every Event reason a controller declares
// (internal/controller), each with a paragraph saying what it means. A
// reason added without its entry fails here.
func TestEveryReasonIsTroubleshot(t *testing.T) {
	root, err := envtest.RepoRoot()
	require.NoError(t, err)
	var want []reasonEntry
	want = append(want, reasonConstants(t, filepath.Join(root, "apis", "database", "v1", "conditions.go"), sectionOfAPIBlock)...)
	err = filepath.WalkDir(filepath.Join(root, "internal", "controller"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		want = append(want, reasonConstants(t, path, func(string) string { return "Events" })...)
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, len(want), 80, "the reason constants were not found where this test looks")

	raw, err := os.ReadFile(filepath.Join(root, "docs", "operations", "troubleshooting.md"))
	require.NoError(t, err)
	entries := troubleshootingEntries(string(raw))
	for _, r := range want {
		body, ok := entries[r.section+"|"+r.value]
		if assert.True(t, ok, "docs/operations/troubleshooting.md has no entry \"### `%s`\" under \"## %s\" (%s)", r.value, r.section, r.constant) {
			assert.NotEmpty(t, strings.TrimSpace(body), "the entry of %s under %s says nothing", r.value, r.section)
		}
	}
}

// sectionOfAPIBlock maps the doc comment of a const block of conditions.go
// to the page's section: "Reasons of BackupReady." is BackupReady, the
// reasons shared by every facet are "Every condition".
func sectionOfAPIBlock(doc string) string {
	if m := regexp.MustCompile(`Reasons of (\w+)\.`).FindStringSubmatch(doc); m != nil {
		return m[1]
	}
	if strings.Contains(doc, "shared by every facet condition") {
		return "Every condition"
	}
	return ""
}

// reasonConstants are the string constants named Reason* declared in file,
// with the section section(doc comment of their const block) gives them;
// constants defined as another constant (aliases) are left to the original.
func reasonConstants(t *testing.T, file string, section func(doc string) string) []reasonEntry {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	require.NoError(t, err)
	var out []reasonEntry
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Reason") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				value, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				sec := section(gen.Doc.Text())
				require.NotEmpty(t, sec, "%s: the const block of %s has no \"Reasons of <Condition>.\" comment", file, name.Name)
				out = append(out, reasonEntry{section: sec, value: value, constant: name.Name})
			}
		}
	}
	return out
}

// troubleshootingEntries maps "section|reason" to the text of its entry:
// "## Section" headings hold "### `Reason`" entries.
func troubleshootingEntries(doc string) map[string]string {
	entries := map[string]string{}
	section, key := "", ""
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			section, key = strings.TrimSpace(strings.TrimPrefix(line, "## ")), ""
		case strings.HasPrefix(line, "### "):
			key = section + "|" + strings.Trim(strings.TrimSpace(strings.TrimPrefix(line, "### ")), "`")
			entries[key] = ""
		case key != "":
			entries[key] += line + "\n"
		}
	}
	return entries
}
