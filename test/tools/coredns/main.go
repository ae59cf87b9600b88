// Command coredns is CoreDNS with only the plugins the real node's Corefile
// uses (test/framework/realnode/dns.go): bind, errors, cache and kubernetes.
// CoreDNS's own main links every plugin, with the cloud SDKs of route53,
// azure and clouddns; on a fresh 2-core machine that build took 7.5 min of
// the CI run's tool build, this one a fraction of it.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

func init() {
	// The order in which the plugins handle a query: CoreDNS's own
	// (core/dnsserver/zdirectives.go), restricted to those linked.
	dnsserver.Directives = []string{"bind", "errors", "cache", "kubernetes"}
}

func main() {
	coremain.Run()
}
