package generated_test

import (
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

// markdownLink is an inline link or image: [text](target) or ![alt](target).
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinksResolve (issue 30): every relative link of the project's
// markdown (README.md, docs/, the chart's README) names a file of the
// repository and, when it has one, a heading of that file; the design
// documents link nowhere outside the repository.
func TestDocsLinksResolve(t *testing.T) {
	root, err := envtest.RepoRoot()
	require.NoError(t, err)
	files := markdownFiles(t, root)
	require.Greater(t, len(files), 10)
	for _, file := range files {
		rel, _ := filepath.Rel(root, file)
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, m := range markdownLink.FindAllStringSubmatch(stripCode(string(raw)), -1) {
			target := m[1]
			if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") || strings.HasPrefix(target, "mailto:") {
				assert.False(t, strings.HasPrefix(rel, "docs/design/"), "%s links outside the repository: %s", rel, target)
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(dest); err != nil {
					assert.Fail(t, "broken link", "%s links to %s, which does not exist", rel, target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") {
				assert.Contains(t, headingAnchors(t, dest), anchor, "%s links to %s: no such heading", rel, target)
			}
		}
	}
}

// TestDesignDocsHaveAStatus (issue 30): every design document says on its
// third line whether it is Implemented, Proposed or Superseded, and the
// design index lists it.
func TestDesignDocsHaveAStatus(t *testing.T) {
	root, err := envtest.RepoRoot()
	require.NoError(t, err)
	index, err := os.ReadFile(filepath.Join(root, "docs", "design", "README.md"))
	require.NoError(t, err)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "design", "*.md"))
	require.NoError(t, err)
	status := regexp.MustCompile(`^Status: (Implemented|Proposed|Superseded by )`)
	for _, page := range pages {
		name := filepath.Base(page)
		if name == "README.md" {
			continue
		}
		raw, err := os.ReadFile(page)
		require.NoError(t, err)
		lines := strings.SplitN(string(raw), "\n", 4)
		require.Len(t, lines, 4, name)
		assert.Regexp(t, status, lines[2], "docs/design/%s: the third line says its status", name)
		assert.Contains(t, string(index), "]("+name+")", "docs/design/README.md does not list %s", name)
	}
}

// TestReadmeIsAFrontPage (issue 30): the README stays a front page of at
// most 200 lines whose first lines give the two commands; the manual lives
// in docs/.
func TestReadmeIsAFrontPage(t *testing.T) {
	root, err := envtest.RepoRoot()
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	assert.LessOrEqual(t, len(lines), 200, "README.md has %d lines", len(lines))
	head := strings.Join(lines[:min(len(lines), 25)], "\n")
	assert.Contains(t, head, "make demo")
	assert.Contains(t, head, "make test")
}

// markdownFiles are the project's own markdown files: the README, docs/
// and the chart's README (the generated API reference included).
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "config", "charts", "dbkeeper", "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	require.NoError(t, err)
	return files
}

// fence matches a fenced code block; inline code is `...`.
var (
	fence      = regexp.MustCompile("(?s)```.*?```")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
)

// stripCode removes code, whose brackets are not links.
func stripCode(doc string) string {
	return inlineCode.ReplaceAllString(fence.ReplaceAllString(doc, ""), "")
}

// headingAnchors are the anchors GitHub gives the headings of a markdown
// file: lower case, punctuation but hyphens and underscores dropped,
// spaces turned into hyphens, repeats numbered.
func headingAnchors(t *testing.T, file string) []string {
	t.Helper()
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	drop := regexp.MustCompile(`[^\p{L}\p{N}\- _]`)
	seen := map[string]int{}
	var anchors []string
	for _, line := range strings.Split(fence.ReplaceAllString(string(raw), ""), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		slug := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			anchors = append(anchors, slug+"-"+strconv.Itoa(n))
		} else {
			anchors = append(anchors, slug)
		}
		seen[slug]++
	}
	return anchors
}
