// Package manifests renders the install manifests of the repository for
// the tests that check or apply them.
package manifests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// defaultImage is the images entry of config/default that Kustomize
// replaces.
const defaultImage = "newName: ghcr.io/dbkeeper/dbkeeper\n    newTag: dev"

// Kustomize renders the kustomize install (config/default) with the
// manager's image set to image (name:tag), as its comment tells a user to
// (kustomize edit set image; here the images entry is rewritten in a copy
// of config/), with the tools' kubectl, and returns its objects in order.
func Kustomize(image string) ([]*unstructured.Unstructured, error) {
	root, err := envtest.RepoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := envtest.AssetsDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dbkeeper-kustomize-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.CopyFS(filepath.Join(dir, "config"), os.DirFS(filepath.Join(root, "config"))); err != nil {
		return nil, fmt.Errorf("copying config/: %w", err)
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return nil, fmt.Errorf("image %q has no tag", image)
	}
	k := filepath.Join(dir, "config", "default", "kustomization.yaml")
	data, err := os.ReadFile(k)
	if err != nil {
		return nil, err
	}
	set := strings.Replace(string(data), defaultImage, "newName: "+image[:i]+"\n    newTag: "+image[i+1:], 1)
	if set == string(data) {
		return nil, fmt.Errorf("config/default/kustomization.yaml has no images entry %q", defaultImage)
	}
	if err := os.WriteFile(k, []byte(set), 0o644); err != nil {
		return nil, err
	}
	out, err := exec.Command(filepath.Join(assets, "kubectl"), "kustomize", filepath.Join(dir, "config", "default")).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("kubectl kustomize: %w: %s", err, out)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(out)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if u.GetKind() != "" {
			objs = append(objs, u)
		}
	}
	return objs, nil
}
