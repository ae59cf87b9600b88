// Package generated_test checks that the committed generated files — the
// deepcopy functions, the apply configurations, the CRDs, the RBAC role and
// the API and chart values references — are what controller-gen,
// crd-ref-docs and helm-docs produce from the current markers, by running the
// Makefile's own `generate` and `manifests` targets (`make generate
// manifests`) in a temporary copy of the sources and the Makefile, and
// comparing the outputs byte for byte. The commands live in the Makefile
// only, so the test and `make` cannot drift apart.
package generated_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// fixHint is what a failure tells the developer to do.
const fixHint = "generated files are out of date: run `make generate manifests` and commit"

// sources are copied into the temporary tree: the Makefile (and the script
// it asks for the tools directory), everything controller-gen reads for the
// generate and manifests targets, and the chart manifests writes into.
var sources = []string{"Makefile", "test/tools/install.sh", "go.mod", "go.sum", "apis", "internal", "hack", "config/charts"}

// generatedDirs are trees controller-gen owns entirely: a file present on one
// side only is drift too.
var generatedDirs = []string{
	"apis/applyconfiguration",
	"config/crd/bases",
}

// generatedFiles are single generated files in trees that may also hold
// hand-written files.
var generatedFiles = []string{
	"apis/database/v1/zz_generated.deepcopy.go",
	"config/rbac/role.yaml",
	"docs/reference/api.md",
	"config/charts/dbkeeper/README.md",
}

func TestGeneratedFilesUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs controller-gen; skipped under -short")
	}
	root, err := envtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	controllerGen := controllerGenPath(t)

	tmp := t.TempDir()
	for _, src := range sources {
		if err := copyTree(filepath.Join(root, src), filepath.Join(tmp, src), isGenerated); err != nil {
			t.Fatalf("copying %s: %v", src, err)
		}
	}

	// -o tools: the tools are there (controllerGenPath checked), and the
	// tools target would build the rest of the control plane if missing.
	args := []string{"--no-print-directory", "-o", "tools", "generate", "manifests", "CONTROLLER_GEN=" + controllerGen}
	cmd := exec.Command("make", args...)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("make %s:\n%s", strings.Join(args, " "), out)

	var drift []string
	for _, dir := range generatedDirs {
		drift = append(drift, compareDirs(t, filepath.Join(tmp, dir), filepath.Join(root, dir), dir)...)
	}
	for _, file := range generatedFiles {
		if d := compareFiles(filepath.Join(tmp, file), filepath.Join(root, file), file); d != "" {
			drift = append(drift, d)
		}
	}
	if len(drift) > 0 {
		t.Errorf("%s:\n  %s", fixHint, strings.Join(drift, "\n  "))
	}
}

// controllerGenPath is $CONTROLLER_GEN, or controller-gen in the test tools
// directory (the Makefile's $(TOOLS_BIN)); it is handed to make as its
// CONTROLLER_GEN.
func controllerGenPath(t *testing.T) string {
	t.Helper()
	path := os.Getenv("CONTROLLER_GEN")
	if path == "" {
		dir, err := envtest.AssetsDir()
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(dir, "controller-gen")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("controller-gen: %v (run `make tools`, or set CONTROLLER_GEN)", err)
	}
	return path
}

// isGenerated reports whether rel (a slash path relative to the repository
// root) is a generator's output. Outputs are not copied, so that the
// generators start from scratch and a committed file they no longer produce
// shows up as drift.
func isGenerated(rel string) bool {
	for _, dir := range generatedDirs {
		if rel == dir || strings.HasPrefix(rel, dir+"/") {
			return true
		}
	}
	for _, file := range generatedFiles {
		if rel == file {
			return true
		}
	}
	return false
}

// copyTree copies the file or directory src to dst, preserving the relative
// structure and skipping the paths for which skip (given the slash path
// relative to the repository root, derived from dst's position) is true.
func copyTree(src, dst string, skip func(rel string) bool) error {
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	base := filepath.Base(src)
	if !info.IsDir() {
		return copyFile(src, dst, info.Mode())
	}
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		sub, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(filepath.Join(base, sub))
		if skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, sub)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return copyFile(path, target, fi.Mode())
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, mode.Perm())
}

// compareDirs compares every regular file under the generated tree got with
// the committed tree want, in both directions.
func compareDirs(t *testing.T, got, want, name string) []string {
	t.Helper()
	gotFiles, err := listFiles(got)
	if err != nil {
		t.Fatalf("listing generated %s: %v", name, err)
	}
	wantFiles, err := listFiles(want)
	if err != nil {
		t.Fatalf("listing committed %s: %v", name, err)
	}
	all := map[string]bool{}
	for f := range gotFiles {
		all[f] = true
	}
	for f := range wantFiles {
		all[f] = true
	}
	names := make([]string, 0, len(all))
	for f := range all {
		names = append(names, f)
	}
	sort.Strings(names)

	var drift []string
	for _, f := range names {
		rel := name + "/" + f
		if d := compareFiles(filepath.Join(got, f), filepath.Join(want, f), rel); d != "" {
			drift = append(drift, d)
		}
	}
	return drift
}

// listFiles returns the slash paths, relative to dir, of the regular files
// under dir; none when dir does not exist.
func listFiles(dir string) (map[string]bool, error) {
	files := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir && os.IsNotExist(err) {
				return filepath.SkipDir
			}
			return err
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return err
			}
			files[filepath.ToSlash(rel)] = true
		}
		return nil
	})
	return files, err
}

// compareFiles returns "" when the generated file got and the committed file
// want are byte-identical, and else a one-line description of the drift.
func compareFiles(got, want, name string) string {
	gotData, gotErr := os.ReadFile(got)
	wantData, wantErr := os.ReadFile(want)
	switch {
	case os.IsNotExist(gotErr) && os.IsNotExist(wantErr):
		return fmt.Sprintf("%s: neither generated nor committed", name)
	case os.IsNotExist(wantErr):
		return fmt.Sprintf("%s: generated but not committed", name)
	case os.IsNotExist(gotErr):
		return fmt.Sprintf("%s: committed but no longer generated", name)
	case gotErr != nil:
		return fmt.Sprintf("%s: reading the generated file: %v", name, gotErr)
	case wantErr != nil:
		return fmt.Sprintf("%s: reading the committed file: %v", name, wantErr)
	case bytes.Equal(gotData, wantData):
		return ""
	}
	return fmt.Sprintf("%s: differs from the generated file: %s", name, firstDifference(gotData, wantData))
}

// firstDifference describes the first line where the committed want differs
// from the generated got.
func firstDifference(got, want []byte) string {
	gotLines := strings.Split(string(got), "\n")
	wantLines := strings.Split(string(want), "\n")
	for i := 0; i < len(gotLines) || i < len(wantLines); i++ {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if i >= len(gotLines) || i >= len(wantLines) || g != w {
			return fmt.Sprintf("line %d: committed %q, generated %q", i+1, w, g)
		}
	}
	return "same lines, different bytes"
}
