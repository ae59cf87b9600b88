package realnode

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/dbkeeper/dbkeeper/test/framework/envtest"
)

// image is one line of the manifest images/build.sh prints.
type image struct{ key, ref, tarball string }

// buildImages runs <root>/images/build.sh for keys (all when empty), which
// builds what its cache lacks, and parses its manifest: one line per image,
// "<key> <ref> <docker-archive tarball>".
func buildImages(root string, keys []string, say func(string)) ([]image, error) {
	script := filepath.Join(root, "images", "build.sh")
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("building the node's images: %w", err)
	}
	say("building images (cached): images/build.sh " + strings.Join(keys, " "))
	cmd := exec.Command(script, keys...)
	cmd.Dir = root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building the node's images (images/build.sh): %w:\n%s", err, tail(errb.String(), 20))
	}
	var images []image
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		images = append(images, image{key: f[0], ref: f[1], tarball: f[2]})
	}
	return images, nil
}

// BuildImage builds an image of images/build.sh the cluster did not start
// with (manager-next: another build of dbkeeper to upgrade to) and
// imports it into every node; it returns the image's reference.
func (n *Node) BuildImage(key string) (string, error) {
	root, err := envtest.RepoRoot()
	if err != nil {
		return "", err
	}
	images, err := buildImages(root, []string{key}, n.c.Say)
	if err != nil {
		return "", err
	}
	for _, img := range images {
		if img.key != key {
			continue
		}
		if _, err := n.ImportImage(img.ref, img.tarball); err != nil {
			return "", err
		}
		return img.ref, nil
	}
	return "", fmt.Errorf("images/build.sh %s printed no image of that key", key)
}

func hasKey(images []image, key string) bool {
	for _, img := range images {
		if img.key == key {
			return true
		}
	}
	return false
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
