package images_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestManagerImageIsWhatTheDockerfileDescribes builds the manager image the
// way the local cluster gets it (images/build.sh, no Docker) and checks it
// against the Dockerfile a release is built from: the same user, entrypoint
// and labels, a static binary at the entrypoint's path and at every path
// the final stage copies from a build stage (versitygw), and no shell.
func TestManagerImageIsWhatTheDockerfileDescribes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the manager image")
	}
	for _, tool := range []string{"umoci", "skopeo"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("images/build.sh needs %s (apt-get install umoci skopeo; .ci/run installs them): %v", tool, err)
		}
	}
	want := readDockerfile(t, "../Dockerfile")

	out, err := exec.Command("./build.sh", "manager").Output()
	require.NoError(t, err, "images/build.sh manager: %s", stderrOf(err))
	fields := strings.Fields(string(out))
	require.Len(t, fields, 3, "build.sh prints `key ref tarball`: %q", out)
	assert.Equal(t, "manager", fields[0])
	assert.True(t, strings.HasPrefix(fields[1], "localhost/dbkeeper/manager:"), "ref %s", fields[1])

	img := readArchive(t, fields[2])
	assert.Equal(t, want.user, img.config.Config.User, "USER")
	assert.Equal(t, want.entrypoint, img.config.Config.Entrypoint, "ENTRYPOINT")
	for k, v := range want.labels {
		assert.Equal(t, v, img.config.Config.Labels[k], "LABEL %s", k)
	}
	assert.Equal(t, []string{img.ref}, []string{fields[1]}, "the tarball's tag")

	require.Contains(t, want.copies, want.entrypoint[0], "the entrypoint is a binary the final stage copies")
	for _, path := range want.copies {
		bin, ok := img.files[strings.TrimPrefix(path, "/")]
		require.True(t, ok, "the image has no %s; files: %v", path, slices.Sorted(maps.Keys(img.files)))
		f, err := elf.NewFile(bytes.NewReader(bin))
		require.NoError(t, err, "%s is not an ELF binary", path)
		for _, p := range f.Progs {
			assert.NotEqual(t, elf.PT_INTERP, p.Type, "%s is dynamically linked; the distroless static base has no libc", path)
		}
	}
	for _, shell := range []string{"bin/sh", "bin/bash", "usr/bin/sh"} {
		assert.NotContains(t, img.files, shell, "the image has a shell")
	}
	uid := strings.SplitN(want.user, ":", 2)[0]
	assert.Regexp(t, regexp.MustCompile(`(?m)^[a-z]+:x:`+uid+`:`), string(img.files["etc/passwd"]),
		"the user %s has a passwd entry, as in the distroless nonroot image", uid)
}

type dockerfile struct {
	user       string
	entrypoint []string
	labels     map[string]string
	// copies are the destinations of the final stage's COPY --from lines:
	// the static binaries (the manager, versitygw).
	copies []string
}

// readDockerfile reads the final stage's USER, ENTRYPOINT (exec form),
// LABELs and COPY --from destinations.
func readDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	// join continuation lines
	text := regexp.MustCompile(`\\\n\s*`).ReplaceAllString(string(data), " ")
	d := dockerfile{labels: map[string]string{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		instr, rest, _ := strings.Cut(line, " ")
		switch strings.ToUpper(instr) {
		case "FROM":
			d.copies = nil
		case "COPY":
			if f := strings.Fields(rest); len(f) == 3 && strings.HasPrefix(f[0], "--from=") {
				d.copies = append(d.copies, f[2])
			}
		case "USER":
			d.user = strings.TrimSpace(rest)
		case "ENTRYPOINT":
			require.NoError(t, json.Unmarshal([]byte(rest), &d.entrypoint), "ENTRYPOINT in exec form")
		case "LABEL":
			for _, m := range regexp.MustCompile(`(\S+)="([^"]*)"`).FindAllStringSubmatch(rest, -1) {
				d.labels[m[1]] = m[2]
			}
		}
	}
	require.NotEmpty(t, d.user, "the Dockerfile has a USER")
	require.NotEmpty(t, d.entrypoint, "the Dockerfile has an ENTRYPOINT")
	require.NotEmpty(t, d.labels, "the Dockerfile has LABELs")
	return d
}

type image struct {
	ref    string
	config struct {
		Config struct {
			User       string
			Entrypoint []string
			Labels     map[string]string
		} `json:"config"`
	}
	files map[string][]byte
}

// readArchive reads a docker-archive tarball: its manifest, its config and
// the files of all its layers.
func readArchive(t *testing.T, path string) image {
	t.Helper()
	entries := map[string][]byte{}
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		entries[filepath.Clean(h.Name)] = data
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	require.NoError(t, json.Unmarshal(entries["manifest.json"], &manifest))
	require.Len(t, manifest, 1)
	img := image{files: map[string][]byte{}}
	require.Len(t, manifest[0].RepoTags, 1)
	img.ref = manifest[0].RepoTags[0]
	require.NoError(t, json.Unmarshal(entries[manifest[0].Config], &img.config))
	for _, l := range manifest[0].Layers {
		lr := tar.NewReader(bytes.NewReader(entries[l]))
		for {
			h, err := lr.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			data, err := io.ReadAll(lr)
			require.NoError(t, err)
			name := strings.TrimPrefix(filepath.Clean(h.Name), "./")
			if h.Typeflag == tar.TypeDir {
				continue
			}
			img.files[name] = data
		}
	}
	return img
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
