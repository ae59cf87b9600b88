// Package images holds what the local cluster's real node runs, built here
// without Docker or a registry by build.sh: the pod sandbox (pause/), a
// PostgreSQL image per Debian major with an entrypoint honouring the
// official image's interface (postgres/), and the manager image as the
// repository's Dockerfile describes it. Its test checks the manager image
// against the Dockerfile.
package images
