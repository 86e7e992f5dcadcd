// Command k8s-local is a Kubernetes control plane on loopback for fleet's tests, built from the
// components' own Go modules: one binary, one link, called by the name of the component it runs.
//
//	k8s-local etcd ARGS...                    etcd's own main (go.etcd.io/etcd/server/v3/etcdmain)
//	k8s-local kube-apiserver ARGS...          k8s.io/kubernetes/cmd/kube-apiserver/app
//	k8s-local kube-controller-manager ARGS... k8s.io/kubernetes/cmd/kube-controller-manager/app
//	k8s-local kube-scheduler ARGS...          k8s.io/kubernetes/cmd/kube-scheduler/app
//	k8s-local kwok ARGS...                    sigs.k8s.io/kwok's command: the kubelets
//	k8s-local kubectl ARGS...                 k8s.io/kubectl's command, of the same release
//	k8s-local stack --dir DIR                 all of them, wired together (stack.go)
//
// Called as `kubectl` (scripts/peers.sh links that name to it), it is kubectl: the client the
// tests and `make cluster` use is the control plane's own release, whatever the machine has.
//
// The version it reports (`/version`) is stamped at link time (scripts/peers.sh).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	// kubectl's client auth plugins, as its own binary has them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	"sigs.k8s.io/kwok/pkg/config"
	kwokcmd "sigs.k8s.io/kwok/pkg/kwok/cmd"
	"sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

const usage = "usage: k8s-local etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kwok|kubectl ARGS... | k8s-local stack --dir DIR"

func main() {
	if filepath.Base(os.Args[0]) == "kubectl" {
		os.Exit(kubectl(os.Args[1:]))
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	component, args := os.Args[1], os.Args[2:]
	switch component {
	case "etcd":
		etcdmain.Main(append([]string{"etcd"}, args...))
	case "kube-apiserver":
		command := apiserver.NewAPIServerCommand()
		command.SetArgs(args)
		os.Exit(cli.Run(command))
	case "kube-controller-manager":
		command := controllermanager.NewControllerManagerCommand()
		command.SetArgs(args)
		os.Exit(cli.Run(command))
	case "kube-scheduler":
		command := scheduler.NewSchedulerCommand()
		command.SetArgs(args)
		os.Exit(cli.Run(command))
	case "kwok":
		os.Exit(kwok(args))
	case "kubectl":
		os.Exit(kubectl(args))
	case "stack":
		os.Exit(stack(args))
	default:
		fmt.Fprintf(os.Stderr, "k8s-local: no component %q\n%s\n", component, usage)
		os.Exit(2)
	}
}

// kwok runs kwok's command as its own binary does: its logging and configuration flags read
// first, the rest given to the command.
func kwok(args []string) int {
	flags := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flags.ParseErrorsAllowlist.UnknownFlags = true
	flags.Usage = func() {}
	ctx := signals.SetupSignalContext()
	ctx, logger := log.InitFlags(ctx, flags)
	ctx, err := config.InitFlags(ctx, flags)
	if err != nil {
		logger.Error("kwok's configuration flags", "err", err)
		return 1
	}
	command := kwokcmd.NewCommand(ctx)
	// The Kubernetes packages linked beside kwok register a `--version` flag of their own type;
	// cobra's bool `--version` check would then refuse to run. kwok's version is not asked here.
	command.Version = ""
	command.PersistentFlags().AddFlagSet(flags)
	command.SetArgs(args)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("kwok ended", "err", err)
		return 1
	}
	return 0
}

// kubectl runs kubectl's own command as its binary's main does. Its plugin lookup reads os.Args,
// so they are made what kubectl's own binary would have been given.
func kubectl(args []string) int {
	os.Args = append([]string{"kubectl"}, args...)
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	command := kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		// Printed as kubectl prints it; CheckErr exits with kubectl's own status.
		kubectlutil.CheckErr(err)
	}
	return 0
}
