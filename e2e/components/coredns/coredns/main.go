// CoreDNS with the plugins a cluster's DNS uses (the kube-dns Corefile of kubeadm and minikube), and no others:
// upstream's own main imports every plugin, the cloud ones with their SDKs. Plugins register themselves on import;
// the order they run in is CoreDNS's own (core/dnsserver/zdirectives.go).
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() {
	coremain.Run()
}
