package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/distribution/reference"

	dbv1 "github.com/dbkeeper/dbkeeper/apis/database/v1"
)

// Flags the manager reads the catalog from; errors name them.
const (
	RegistryFlag = "--engine-registry"
	ImagesFlag   = "--engine-images"
)

// Catalog is the image catalog the manager runs engines from: each engine's
// built-in images (Engine.Image), moved to another registry by a prefix
// (--engine-registry) and overridden one version at a time
// (--engine-images), for clusters that pull from a mirror or have no way
// out. It is built once at start-up and only read afterwards; the zero
// Catalog is the built-in one.
type Catalog struct {
	// images are the images of every engine by version, resolved; nil in
	// the built-in catalog.
	images map[dbv1.Engine]map[string]string
}

// NewCatalog is the catalog of the --engine-registry and --engine-images
// flags. registry (empty: none) replaces the registry and repository path
// of every built-in image, keeping its last path element, tag and digest:
// docker.io/library/postgres:17.6 with mirror.example.com/dockerhub becomes
// mirror.example.com/dockerhub/postgres:17.6. images is a comma-separated
// list of <engine>:<version>=<image> entries, each naming a version that
// spec.version accepts; it wins over registry. A malformed reference, an
// unknown engine or version, a duplicate or an empty entry is an error
// naming the flag and the entry.
func NewCatalog(registry, images string) (Catalog, error) {
	overrides, err := parseImages(images)
	if err != nil {
		return Catalog{}, err
	}
	registry = strings.TrimSuffix(strings.TrimSpace(registry), "/")
	if registry == "" && len(overrides) == 0 {
		return Catalog{}, nil
	}
	if registry != "" {
		if err := checkRegistry(registry); err != nil {
			return Catalog{}, err
		}
	}
	c := Catalog{images: map[dbv1.Engine]map[string]string{}}
	for _, name := range Names() {
		e, _ := For(dbv1.Engine(name))
		versions := map[string]string{}
		for _, v := range e.Versions() {
			img, err := e.Image(v)
			if err != nil {
				continue // a version only an override can give an image
			}
			if registry != "" {
				if img, err = moveImage(img, registry); err != nil {
					return Catalog{}, fmt.Errorf("invalid %s %q: the %s %s image %w", RegistryFlag, registry, name, v, err)
				}
			}
			versions[v] = img
		}
		c.images[e.Name()] = versions
	}
	for key, img := range overrides {
		c.images[key.engine][key.version] = img
	}
	return c, nil
}

// For returns the named engine, whose Image answers from the catalog.
func (c Catalog) For(name dbv1.Engine) (Engine, error) {
	e, err := For(name)
	if err != nil || c.images == nil {
		return e, err
	}
	return cataloged{Engine: e, images: c.images[name]}, nil
}

// Images lists the catalog as <engine>:<version>=<image>, sorted, for the
// start-up log.
func (c Catalog) Images() []string {
	var out []string
	for _, name := range Names() {
		e, _ := c.For(dbv1.Engine(name))
		for _, v := range e.Versions() {
			if img, err := e.Image(v); err == nil {
				out = append(out, name+":"+v+"="+img)
			}
		}
	}
	return out
}

// cataloged is an engine whose images come from a catalog.
type cataloged struct {
	Engine
	// images are the engine's images by version.
	images map[string]string
}

// Image implements Engine: the catalog's image, else the engine's own
// answer (an error for a version without an image).
func (e cataloged) Image(version string) (string, error) {
	if img, ok := e.images[version]; ok {
		return img, nil
	}
	return e.Engine.Image(version)
}

// imageKey names one catalog entry, <engine>:<version>.
type imageKey struct {
	engine  dbv1.Engine
	version string
}

// parseImages reads the --engine-images value.
func parseImages(value string) (map[imageKey]string, error) {
	out := map[imageKey]string{}
	if strings.TrimSpace(value) == "" {
		return out, nil
	}
	seen := map[imageKey]string{}
	for _, raw := range strings.Split(value, ",") {
		entry := strings.TrimSpace(raw)
		invalid := func(format string, a ...any) error {
			return fmt.Errorf("invalid entry %q in %s: %s", entry, ImagesFlag, fmt.Sprintf(format, a...))
		}
		const syntax = "want <engine>:<version>=<image>, such as postgres:17=registry.example.com/postgres:17.6"
		if entry == "" {
			return nil, invalid("empty entry; %s", syntax)
		}
		key, img, ok := strings.Cut(entry, "=")
		if !ok {
			return nil, invalid("no =; %s", syntax)
		}
		key, img = strings.TrimSpace(key), strings.TrimSpace(img)
		name, version, ok := strings.Cut(key, ":")
		if !ok || name == "" || version == "" {
			return nil, invalid("%q is not <engine>:<version>; %s", key, syntax)
		}
		e, err := For(dbv1.Engine(name))
		if err != nil {
			return nil, invalid("%v", err)
		}
		if !slices.Contains(e.Versions(), version) {
			return nil, invalid("%s version %q is not one spec.version accepts: %s", name, version, strings.Join(e.Versions(), ", "))
		}
		if img == "" {
			return nil, invalid("no image after =")
		}
		if err := checkImage(img); err != nil {
			return nil, invalid("image %q %v", img, err)
		}
		k := imageKey{engine: e.Name(), version: version}
		if first, dup := seen[k]; dup {
			return nil, fmt.Errorf("duplicate entry for %s in %s: %q and %q", key, ImagesFlag, first, entry)
		}
		seen[k] = entry
		out[k] = img
	}
	return out, nil
}

// checkImage says what is wrong with an image reference of the catalog:
// malformed, or without a tag or digest (which would run whatever "latest"
// is, not the version).
func checkImage(img string) error {
	named, err := reference.ParseNormalizedNamed(img)
	if err != nil {
		return fmt.Errorf("is not a valid image reference: %w", err)
	}
	if reference.IsNameOnly(named) {
		return fmt.Errorf("has no tag or digest: pin the version, such as %s:17.6", img)
	}
	return nil
}

// checkRegistry says what is wrong with a --engine-registry prefix: it must
// be a repository name (a registry host, optionally a port and a path),
// without a scheme, tag or digest.
func checkRegistry(registry string) error {
	// Parsed with an image name under it, so that a port
	// (localhost:5000) is not taken for a tag.
	named, err := reference.ParseNormalizedNamed(registry + "/postgres")
	if err == nil && (!reference.IsNameOnly(named) || strings.Contains(registry, "@")) {
		err = fmt.Errorf("it has a tag or digest")
	}
	if err != nil {
		return fmt.Errorf("invalid %s %q: %w; want a registry host with an optional repository path, such as mirror.example.com/dockerhub",
			RegistryFlag, registry, err)
	}
	return nil
}

// moveImage puts the last path element, tag and digest of img under
// registry.
func moveImage(img, registry string) (string, error) {
	named, err := reference.ParseNormalizedNamed(img)
	if err != nil {
		return "", fmt.Errorf("%q is not a valid image reference: %w", img, err)
	}
	path := reference.Path(named)
	moved := registry + "/" + path[strings.LastIndex(path, "/")+1:]
	if tagged, ok := named.(reference.Tagged); ok {
		moved += ":" + tagged.Tag()
	}
	if digested, ok := named.(reference.Digested); ok {
		moved += "@" + digested.Digest().String()
	}
	if _, err := reference.ParseNormalizedNamed(moved); err != nil {
		return "", fmt.Errorf("moved to %q is not a valid image reference: %w", moved, err)
	}
	return moved, nil
}
