package engine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
	"github.com/dbkeeper/dbkeeper/internal/engine"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// builtIn are the images of the built-in catalog.
var builtIn = map[string]string{
	"14": "docker.io/library/postgres:14.25",
	"15": "docker.io/library/postgres:15.20",
	"16": "docker.io/library/postgres:16.16",
	"17": "docker.io/library/postgres:17.12",
	"18": "docker.io/library/postgres:18.6",
}

func TestNewCatalog(t *testing.T) {
	with := func(changes map[string]string) map[string]string {
		out := map[string]string{}
		for v, img := range builtIn {
			out[v] = img
		}
		for v, img := range changes {
			out[v] = img
		}
		return out
	}
	mirror := map[string]string{
		"14": "mirror.example.com/dockerhub/postgres:14.25",
		"15": "mirror.example.com/dockerhub/postgres:15.20",
		"16": "mirror.example.com/dockerhub/postgres:16.16",
		"17": "mirror.example.com/dockerhub/postgres:17.12",
		"18": "mirror.example.com/dockerhub/postgres:18.6",
	}
	tests := []struct {
		name     string
		registry string
		images   string
		want     map[string]string // postgres version → image
	}{
		{name: "no flags", want: builtIn},
		{name: "blank flags", registry: " ", images: "  ", want: builtIn},
		{name: "one version", images: "postgres:15=localhost/dbkeeper/postgres:15",
			want: with(map[string]string{"15": "localhost/dbkeeper/postgres:15"})},
		{name: "two versions, spaces, tag and digest",
			images: " postgres:15=localhost/dbkeeper/postgres:15 , postgres:17=registry.example.com/pg:17.6@" + digest,
			want:   with(map[string]string{"15": "localhost/dbkeeper/postgres:15", "17": "registry.example.com/pg:17.6@" + digest})},
		{name: "digest only", images: "postgres:16=registry.example.com/pg@" + digest,
			want: with(map[string]string{"16": "registry.example.com/pg@" + digest})},
		{name: "registry with a port", images: "postgres:14=registry.local:5000/postgres:14.25",
			want: with(map[string]string{"14": "registry.local:5000/postgres:14.25"})},
		{name: "registry prefix", registry: "mirror.example.com/dockerhub", want: mirror},
		{name: "registry prefix with a trailing slash", registry: "mirror.example.com/dockerhub/", want: mirror},
		{name: "registry host and port only", registry: "localhost:5000", want: map[string]string{
			"14": "localhost:5000/postgres:14.25", "15": "localhost:5000/postgres:15.20",
			"16": "localhost:5000/postgres:16.16", "17": "localhost:5000/postgres:17.12",
			"18": "localhost:5000/postgres:18.6",
		}},
		{name: "a version wins over the prefix", registry: "mirror.example.com/dockerhub",
			images: "postgres:17=registry.example.com/pg:17.6-patched",
			want: map[string]string{
				"14": mirror["14"], "15": mirror["15"], "16": mirror["16"],
				"17": "registry.example.com/pg:17.6-patched", "18": mirror["18"],
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := engine.NewCatalog(tt.registry, tt.images)
			require.NoError(t, err)
			e, err := c.For(dbv1.EnginePostgres)
			require.NoError(t, err)
			assert.Equal(t, dbv1.EnginePostgres, e.Name())
			assert.Equal(t, int32(5432), e.Port(), "only the images change")
			got := map[string]string{}
			for _, v := range e.Versions() {
				img, err := e.Image(v)
				require.NoError(t, err, v)
				got[v] = img
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

// Every bad entry stops the manager with the flag and the entry named.
func TestNewCatalogRefuses(t *testing.T) {
	tests := []struct {
		name     string
		registry string
		images   string
		errs     []string
	}{
		{name: "unknown engine", images: "mysql:8=registry.example.com/mysql:8.4",
			errs: []string{`invalid entry "mysql:8=registry.example.com/mysql:8.4" in --engine-images`, `unknown engine "mysql"`, "postgres"}},
		{name: "unknown version", images: "postgres:19=registry.example.com/postgres:19.0",
			errs: []string{`invalid entry "postgres:19=registry.example.com/postgres:19.0" in --engine-images`, `postgres version "19" is not one spec.version accepts: 14, 15, 16, 17, 18`}},
		{name: "minor version", images: "postgres:17.6=registry.example.com/postgres:17.12",
			errs: []string{`invalid entry "postgres:17.6=registry.example.com/postgres:17.12"`, `version "17.6"`, "14, 15, 16, 17, 18"}},
		{name: "uppercase reference", images: "postgres:15=Registry.example.com/Postgres:15",
			errs: []string{`invalid entry "postgres:15=Registry.example.com/Postgres:15" in --engine-images`, `image "Registry.example.com/Postgres:15" is not a valid image reference`, "lowercase"}},
		{name: "malformed reference", images: "postgres:15=registry.example.com/postgres:15:1",
			errs: []string{`invalid entry "postgres:15=registry.example.com/postgres:15:1" in --engine-images`, "is not a valid image reference"}},
		{name: "bad digest", images: "postgres:15=registry.example.com/postgres@sha256:abc",
			errs: []string{`invalid entry "postgres:15=registry.example.com/postgres@sha256:abc"`, "is not a valid image reference"}},
		{name: "spaces inside", images: "postgres:15=registry.example.com/post gres:15",
			errs: []string{`invalid entry "postgres:15=registry.example.com/post gres:15"`, "is not a valid image reference"}},
		{name: "no tag", images: "postgres:15=registry.example.com/postgres",
			errs: []string{`invalid entry "postgres:15=registry.example.com/postgres"`, "has no tag or digest"}},
		{name: "empty image", images: "postgres:15=",
			errs: []string{`invalid entry "postgres:15=" in --engine-images: no image after =`}},
		{name: "no =", images: "postgres:15",
			errs: []string{`invalid entry "postgres:15" in --engine-images: no =`, "<engine>:<version>=<image>"}},
		{name: "no version", images: "postgres=registry.example.com/postgres:15",
			errs: []string{`invalid entry "postgres=registry.example.com/postgres:15"`, `"postgres" is not <engine>:<version>`}},
		{name: "empty version", images: "postgres:=registry.example.com/postgres:15",
			errs: []string{`invalid entry "postgres:=registry.example.com/postgres:15"`, "is not <engine>:<version>"}},
		{name: "empty entry", images: "postgres:15=registry.example.com/postgres:15,,",
			errs: []string{`invalid entry "" in --engine-images: empty entry`}},
		{name: "duplicate", images: "postgres:15=a.example.com/postgres:15,postgres:16=a.example.com/postgres:16,postgres:15=b.example.com/postgres:15",
			errs: []string{`duplicate entry for postgres:15 in --engine-images: "postgres:15=a.example.com/postgres:15" and "postgres:15=b.example.com/postgres:15"`}},
		{name: "same duplicate", images: "postgres:15=a.example.com/postgres:15,postgres:15=a.example.com/postgres:15",
			errs: []string{"duplicate entry for postgres:15 in --engine-images"}},
		{name: "registry with a scheme", registry: "https://mirror.example.com",
			errs: []string{`invalid --engine-registry "https://mirror.example.com"`, "want a registry host with an optional repository path"}},
		{name: "registry with a tag", registry: "mirror.example.com/dockerhub:17",
			errs: []string{`invalid --engine-registry "mirror.example.com/dockerhub:17"`, "invalid reference format"}},
		{name: "registry with a digest", registry: "mirror.example.com/dockerhub@" + digest,
			errs: []string{`invalid --engine-registry "mirror.example.com/dockerhub@`}},
		{name: "registry in capitals", registry: "mirror.example.com/DockerHub",
			errs: []string{`invalid --engine-registry "mirror.example.com/DockerHub"`, "lowercase"}},
		{name: "bad registry, good images", registry: "mirror example", images: "postgres:15=localhost/dbkeeper/postgres:15",
			errs: []string{`invalid --engine-registry "mirror example"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := engine.NewCatalog(tt.registry, tt.images)
			require.Error(t, err)
			for _, want := range tt.errs {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

// The zero Catalog is the built-in one, and a Database's spec.image still
// wins over any catalog.
func TestCatalogAndSpecImage(t *testing.T) {
	var zero engine.Catalog
	e, err := zero.For(dbv1.EnginePostgres)
	require.NoError(t, err)
	assert.Equal(t, engine.Postgres{}, e, "the zero catalog hands out the engine itself")
	assert.Len(t, zero.Images(), 5)
	assert.Contains(t, zero.Images(), "postgres:17=docker.io/library/postgres:17.12")

	c, err := engine.NewCatalog("mirror.example.com/dockerhub", "postgres:15=localhost/dbkeeper/postgres:15")
	require.NoError(t, err)
	assert.Equal(t, []string{
		"postgres:14=mirror.example.com/dockerhub/postgres:14.25",
		"postgres:15=localhost/dbkeeper/postgres:15",
		"postgres:16=mirror.example.com/dockerhub/postgres:16.16",
		"postgres:17=mirror.example.com/dockerhub/postgres:17.12",
		"postgres:18=mirror.example.com/dockerhub/postgres:18.6",
	}, c.Images())
	e, err = c.For(dbv1.EnginePostgres)
	require.NoError(t, err)

	db := &dbv1.Database{Spec: dbv1.DatabaseSpec{Engine: dbv1.EnginePostgres, Version: "15"}}
	img, err := engine.ImageFor(e, db)
	require.NoError(t, err)
	assert.Equal(t, "localhost/dbkeeper/postgres:15", img)
	db.Spec.Image = "registry.example.com/postgres:15.14-custom"
	img, err = engine.ImageFor(e, db)
	require.NoError(t, err)
	assert.Equal(t, "registry.example.com/postgres:15.14-custom", img, "spec.image wins over the catalog")

	// A version without an image (stored before the CRD refused it) is an
	// error that names the field to fix.
	db.Spec.Image, db.Spec.Version = "", "9"
	_, err = engine.ImageFor(e, db)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `postgres has no image for version "9"`)
	assert.Contains(t, err.Error(), "spec.version")

	_, err = c.For("mysql")
	assert.ErrorContains(t, err, `unknown engine "mysql"`)
}

// The versions a catalog entry may name are those the API accepts: the
// CRD's rule on spec.version lists each engine's Versions.
func TestVersionsMatchTheCRD(t *testing.T) {
	types, err := os.ReadFile(filepath.Join("..", "..", "apis", "database", "v1", "database_types.go"))
	require.NoError(t, err)
	for _, name := range engine.Names() {
		e, err := engine.For(dbv1.Engine(name))
		require.NoError(t, err)
		quoted := make([]string, 0, len(e.Versions()))
		for _, v := range e.Versions() {
			quoted = append(quoted, "'"+v+"'")
		}
		rule := "self.engine != '" + name + "' || self.version in [" + strings.Join(quoted, ", ") + "]"
		assert.True(t, strings.Contains(string(types), rule),
			"the CRD rule on spec.version for %s is not %q: engine.Versions and the API disagree", name, rule)
	}
}

// PostgreSQL 14 is past its end of life, every later major is not: the
// CRD's rule refusing 14 for new Databases and this answer agree.
func TestEndOfLife(t *testing.T) {
	e := engine.Postgres{}
	day, past := e.EndOfLife("14")
	assert.True(t, past)
	assert.Equal(t, "2026-11-12", day)
	for _, v := range []string{"15", "16", "17", "18"} {
		_, past := e.EndOfLife(v)
		assert.False(t, past, v)
	}
	types, err := os.ReadFile(filepath.Join("..", "..", "apis", "database", "v1", "database_types.go"))
	require.NoError(t, err)
	assert.Contains(t, string(types), "self.version != '14'", "the CRD refuses what EndOfLife says is past")
	assert.Contains(t, string(types), "end of life on "+day)
}
