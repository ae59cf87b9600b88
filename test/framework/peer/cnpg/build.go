// Package cnpg runs CloudNativePG, the operator users most often pick
// instead of dbkeeper, as a benchmark peer on the local cluster's real node
// (test/framework/realnode): Build makes its operator image
// from the Go module proxy, Install imports it and applies its release
// manifest, and a Cluster is created and watched as an unstructured object.
//
// Nothing of CloudNativePG is a dependency of dbkeeper's module: Build
// compiles a copy of the module's directory with the module's own go.mod,
// and the project knows its API only as the fields this package reads and
// writes.
package cnpg

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const (
	// Module is CloudNativePG's Go module.
	Module = "github.com/cloudnative-pg/cloudnative-pg"
	// Version is the release built and installed: the newest the module
	// proxy serves that builds as it is (v1.30.1 needs machinery and
	// barman-cloud v0.6.0, which it refuses).
	Version = "v1.30.0"

	// recipe names how Build makes the image; a change of it (ldflags,
	// layout, config) must change it, which gives the image a new cache
	// key and reference.
	recipe = "static manager, -s -w, buildVersion; /operator/manager_amd64, /manager symlink; user 10001, workdir /; v1"
)

// release is Version without its "v", as CloudNativePG spells it in its
// image tags and release manifests.
var release = strings.TrimPrefix(Version, "v")

// Image is the operator image Build made and the release manifest that
// installs it.
type Image struct {
	// Ref is the image's reference in the tarball, and in containerd
	// once imported. Its tag carries the cache key, so a reference found
	// in containerd is this very image.
	Ref string
	// Tarball is the image as a docker-archive tarball.
	Tarball string
	// Manifest is the release manifest (releases/cnpg-<version>.yaml of
	// the module) as released: CRDs, RBAC, webhooks, the operator's
	// Deployment naming the upstream image.
	Manifest string
}

// CacheDir is where Build keeps its output: dbkeeper/cnpg under the
// user's cache directory (XDG_CACHE_HOME, else ~/.cache).
func CacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("the cache directory of CloudNativePG's image: %w", err)
	}
	return filepath.Join(base, "dbkeeper", "cnpg"), nil
}

// cacheKey is what the image is made from, hashed: the module version and
// the recipe.
func cacheKey() string {
	sum := sha256.Sum256([]byte(Module + "@" + Version + "\n" + recipe))
	return hex.EncodeToString(sum[:])[:12]
}

// cached is the Image of the current key in dir, whether or not it is
// there yet.
func cached(dir string) Image {
	key := cacheKey()
	return Image{
		Ref:      "localhost/dbkeeper/cloudnative-pg:" + release + "-" + key,
		Tarball:  filepath.Join(dir, "operator-"+release+"-"+key+".tar"),
		Manifest: filepath.Join(dir, "cnpg-"+release+".yaml"),
	}
}

// Build returns CloudNativePG's operator image, building it the first
// time: the module downloaded from the module proxy, a copy of its
// directory compiled with its own go.mod (CGO off, static; the same binary
// is the operator and the instance manager its pods copy in), packed with
// umoci and skopeo into a one-layer image with CloudNativePG's layout
// (/operator/manager_amd64, /manager linking to it, workdir /: the
// operator lists operator/manager_* to learn which architectures it can
// hand to instance pods), and the release manifest copied beside it. All
// of it is cached under CacheDir; when the tarball and the manifest are
// there, Build runs nothing. say receives a line per step (nil: none).
//
// It needs the go command, umoci and skopeo, and the module proxy the
// first time.
func Build(ctx context.Context, say func(string)) (Image, error) {
	if say == nil {
		say = func(string) {}
	}
	dir, err := CacheDir()
	if err != nil {
		return Image{}, err
	}
	img := cached(dir)
	if nonEmpty(img.Tarball) && nonEmpty(img.Manifest) {
		return img, nil
	}
	start := time.Now()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Image{}, fmt.Errorf("creating %s: %w", dir, err)
	}
	for _, tool := range []string{"go", "umoci", "skopeo"} {
		if _, err := exec.LookPath(tool); err != nil {
			return Image{}, fmt.Errorf("building CloudNativePG's image needs %s: %w", tool, err)
		}
	}
	moduleDir, err := download(ctx, dir)
	if err != nil {
		return Image{}, err
	}
	manager := filepath.Join(dir, "manager-"+Version)
	if !nonEmpty(manager) {
		say("building CloudNativePG " + Version + "'s manager from the module proxy (a few minutes, once)")
		if err := compile(ctx, moduleDir, filepath.Join(dir, "build"), manager); err != nil {
			return Image{}, err
		}
	}
	if err := pack(ctx, manager, filepath.Join(dir, "build"), img); err != nil {
		return Image{}, err
	}
	if err := copyFile(filepath.Join(moduleDir, "releases", "cnpg-"+release+".yaml"), img.Manifest, 0o644); err != nil {
		return Image{}, fmt.Errorf("copying the release manifest: %w", err)
	}
	say(fmt.Sprintf("built %s in %s", img.Ref, time.Since(start).Round(time.Second)))
	return img, nil
}

// goEnv is the environment of the go commands Build runs: no workspace,
// no flags of the caller's (GOFLAGS may hold -mod=vendor or the like), no
// toolchain download, no cgo.
func goEnv(extra ...string) []string {
	env := []string{"GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local", "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64"}
	return append(append(os.Environ(), env...), extra...)
}

// download fetches the module from the module proxy (or finds it in the
// module cache) and returns its directory. It runs in dir, outside any
// module, so that no go.mod is read or changed.
func download(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", Module+"@"+Version)
	cmd.Dir = dir
	cmd.Env = goEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	runErr := cmd.Run()
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out.Bytes(), &mod); err != nil || mod.Error != "" || mod.Dir == "" || runErr != nil {
		return "", fmt.Errorf("downloading %s@%s: %v %s %s", Module, Version, runErr, mod.Error, strings.TrimSpace(errb.String()))
	}
	return mod.Dir, nil
}

// compile builds the module's cmd/manager from a copy of moduleDir (the
// module cache is read-only, and go build -mod=mod may complete go.sum)
// under work into binary.
func compile(ctx context.Context, moduleDir, work, binary string) error {
	src := filepath.Join(work, "src-"+Version)
	if err := os.RemoveAll(src); err != nil {
		return fmt.Errorf("clearing %s: %w", src, err)
	}
	// os.CopyFS writes files its owner may write (the module cache's are
	// read-only)
	if err := os.CopyFS(src, os.DirFS(moduleDir)); err != nil {
		return fmt.Errorf("copying the module to %s: %w", src, err)
	}
	defer os.RemoveAll(src)
	cmd := exec.CommandContext(ctx, "go", "build", "-mod=mod", "-trimpath", "-buildvcs=false", "-o", binary+".tmp",
		"-ldflags", "-s -w -X "+Module+"/pkg/versions.buildVersion="+release, "./cmd/manager")
	cmd.Dir = src
	cmd.Env = goEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building CloudNativePG's manager: %w:\n%s", err, lastLines(string(out), 20))
	}
	if err := os.Rename(binary+".tmp", binary); err != nil {
		return fmt.Errorf("installing the manager: %w", err)
	}
	return nil
}

// pack writes the image of manager as img.Tarball (atomically), through an
// OCI layout under work that it removes.
func pack(ctx context.Context, manager, work string, img Image) error {
	oci := filepath.Join(work, "oci")
	layer := filepath.Join(work, "layer.tar")
	if err := os.RemoveAll(oci); err != nil {
		return fmt.Errorf("clearing %s: %w", oci, err)
	}
	defer os.RemoveAll(oci)
	defer os.Remove(layer)
	if err := writeLayer(manager, layer); err != nil {
		return err
	}
	steps := [][]string{
		{"umoci", "init", "--layout", oci},
		{"umoci", "new", "--image", oci + ":img"},
		{"umoci", "raw", "add-layer", "--image", oci + ":img", layer},
		{"umoci", "config", "--image", oci + ":img", "--config.entrypoint", "/manager",
			"--config.user", "10001:10001", "--config.workingdir", "/", "--architecture", "amd64", "--os", "linux",
			"--config.label", "org.opencontainers.image.description=CloudNativePG " + Version + " built from " + Module},
		{"skopeo", "copy", "--quiet", "oci:" + oci + ":img", "docker-archive:" + img.Tarball + ".tmp:" + img.Ref},
	}
	_ = os.Remove(img.Tarball + ".tmp")
	for _, s := range steps {
		if out, err := exec.CommandContext(ctx, s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("packing CloudNativePG's image (%s %s): %w: %s", s[0], s[1], err, strings.TrimSpace(string(out)))
		}
	}
	if err := os.Rename(img.Tarball+".tmp", img.Tarball); err != nil {
		return fmt.Errorf("installing the image tarball: %w", err)
	}
	return nil
}

// writeLayer writes the image's only layer, as CloudNativePG's Dockerfile
// lays it out: ./operator/manager_amd64 (the binary) and ./manager, a
// symlink to it; owned by root, dated the epoch, so that the same binary
// makes the same layer.
func writeLayer(manager, path string) (err error) {
	bin, err := os.Open(manager)
	if err != nil {
		return fmt.Errorf("opening the manager: %w", err)
	}
	defer bin.Close()
	st, err := bin.Stat()
	if err != nil {
		return fmt.Errorf("reading the manager: %w", err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating the layer: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("writing the layer: %w", cerr)
		}
	}()
	tw := tar.NewWriter(f)
	epoch := time.Unix(0, 0)
	headers := []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "./operator/", Mode: 0o755, ModTime: epoch},
		{Typeflag: tar.TypeReg, Name: "./operator/manager_amd64", Mode: 0o755, Size: st.Size(), ModTime: epoch},
		{Typeflag: tar.TypeSymlink, Name: "./manager", Linkname: "operator/manager_amd64", Mode: 0o777, ModTime: epoch},
	}
	for _, h := range headers {
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("writing the layer: %w", err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, bin); err != nil {
				return fmt.Errorf("writing the layer: %w", err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("writing the layer: %w", err)
	}
	return nil
}

// copyFile copies from to to with mode, replacing to atomically.
func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(to+".tmp", to)
}

// nonEmpty reports whether path is a file with content.
func nonEmpty(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Size() > 0
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
