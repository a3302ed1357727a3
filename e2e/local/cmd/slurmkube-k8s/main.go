// Command slurmkube-k8s is the local Kubernetes control plane of the slurmkube
// e2e environment: one binary whose subcommands are the real upstream
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl
// (their cmd/*/app packages, unchanged) plus an embedded etcd and a PKI
// generator.
//
// One binary because the four components share almost all their code: linking
// them together builds in roughly the time of the largest one and keeps a
// single cached artifact (the kubelet shares most of its code with them too). Invoked through a symlink named after a subcommand
// (kubectl -> slurmkube-k8s) it behaves as that subcommand.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var subcommands = map[string]func(args []string) int{
	"etcd": runEtcd,
	"kube-apiserver": func(args []string) int {
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
	"kube-controller-manager": func(args []string) int {
		cmd := controllermanager.NewControllerManagerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
	"kube-scheduler": func(args []string) int {
		cmd := scheduler.NewSchedulerCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
	"kubelet": func(args []string) int {
		cmd := kubelet.NewKubeletCommand(context.Background())
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
	"kube-proxy": func(args []string) int {
		cmd := proxy.NewProxyCommand()
		cmd.SetArgs(args)
		return cli.Run(cmd)
	},
	"kubectl": func(args []string) int {
		cmd := kubectlcmd.NewDefaultKubectlCommand()
		cmd.SetArgs(args)
		if err := cli.RunNoErrOutput(cmd); err != nil {
			// Prints the error the way upstream kubectl does and exits non-zero.
			kubectlutil.CheckErr(err)
		}
		return 0
	},
	"fake-gpu-plugin": runGPUPlugin,
	"pki":             runPKI,
	"version":         runVersion,
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if _, ok := subcommands[name]; !ok {
		if len(args) == 0 {
			usage()
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	run, ok := subcommands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown subcommand %q\n", name)
		usage()
		os.Exit(2)
	}
	// The upstream commands read os.Args[0] for their usage text only.
	os.Args = append([]string{name}, args...)
	os.Exit(run(args))
}

func usage() {
	names := make([]string, 0, len(subcommands))
	for n := range subcommands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: slurmkube-k8s {%s} [flags]\n", strings.Join(names, "|"))
}
