// The entrypoint of the KubeRay operator image the e2e's real node runs (/manager): it runs the operator built from
// its module (/kuberay-operator) with the Deployment's arguments, minus the feature gates that the built version
// does not know and that are set to false (false is the behaviour without the gate). The module proxy serves
// ray-operator v1.6.2, while the v1.7.0 chart passes gates 1.6.2 refuses at start ("unrecognized feature gate");
// a gate set to true that the operator does not know still stops it, visibly.
package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
)

const operator = "/kuberay-operator"

var unknownGate = regexp.MustCompile(`unrecognized feature gate: (\w+)`)

func main() {
	args := os.Args[1:]
	for attempt := 0; attempt < 16; attempt++ {
		var stderr bytes.Buffer
		cmd := exec.Command(operator, args...)
		cmd.Stdout = os.Stdout
		cmd.Stderr = io.MultiWriter(os.Stderr, &stderr)
		err := cmd.Run()
		if err == nil {
			os.Exit(0)
		}
		gates := unknownGate.FindAllStringSubmatch(stderr.String(), -1)
		dropped := false
		for _, gate := range gates {
			if next, ok := drop(args, gate[1]); ok {
				fmt.Fprintf(os.Stderr, "launcher: %s does not know feature gate %s=false; dropped (false is the behaviour without it)\n", operator, gate[1])
				args, dropped = next, true
			}
		}
		if !dropped {
			if exit, ok := err.(*exec.ExitError); ok {
				if status, ok := exit.Sys().(syscall.WaitStatus); ok && status.Signaled() {
					os.Exit(128 + int(status.Signal()))
				}
				os.Exit(exit.ExitCode())
			}
			fmt.Fprintln(os.Stderr, "launcher:", err)
			os.Exit(1)
		}
	}
	os.Exit(1)
}

// drop removes gate=false from every --feature-gates argument; ok is false when the gate is not set to false.
func drop(args []string, gate string) ([]string, bool) {
	out := make([]string, 0, len(args))
	found := false
	for _, arg := range args {
		if value, ok := strings.CutPrefix(arg, "--feature-gates="); ok {
			kept := []string{}
			for _, g := range strings.Split(value, ",") {
				if g == gate+"=false" {
					found = true
					continue
				}
				if g != "" {
					kept = append(kept, g)
				}
			}
			arg = "--feature-gates=" + strings.Join(kept, ",")
		}
		out = append(out, arg)
	}
	return out, found
}
