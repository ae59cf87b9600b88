package cluster

import (
	"sort"
	"strings"
)

// The keys of images/build.sh's manifest, and of Cluster.Images.
const (
	// ImagePause is the pod sandbox image.
	ImagePause = "pause"
	// ImageManager is the dbkeeper manager's image.
	ImageManager = "manager"
)

// EngineImageMap maps the engine keys of the manifest to their images
// ("postgres:15" -> ref): the entries of the chart's
// engineImages.overrides, empty on a fake node.
func (c *Cluster) EngineImageMap() map[string]string {
	engines := map[string]string{}
	for key, ref := range c.Images {
		if strings.HasPrefix(key, "postgres:") {
			engines[key] = ref
		}
	}
	return engines
}

// EngineImages returns the manager's --engine-images value for
// EngineImageMap ("postgres:15=<ref>,postgres:17=<ref>"), empty on a fake
// node.
func (c *Cluster) EngineImages() string {
	var pairs []string
	for key, ref := range c.EngineImageMap() {
		pairs = append(pairs, key+"="+ref)
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

// ManagerImage is the manager image imported into the real node (the
// manifest's ImageManager), the --agent-image of an operator whose engine
// pods run; empty on a fake node.
func (c *Cluster) ManagerImage() string { return c.Images[ImageManager] }
