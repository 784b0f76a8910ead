package explain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Usage is the command's one-line synopsis.
const Usage = "explain POD [-n NAMESPACE] [-o text|json] [--guard-namespace NS] [kubeconfig flags]"

// deadline bounds the whole explanation; --request-timeout bounds each request.
const deadline = 2 * time.Minute

// Main runs `runner-guard explain` (and `kubectl runner-guard explain`)
// with args after "explain". It returns the process's exit code: 0 when the
// report was printed, 1 when the pod could not be read, 2 for bad usage.
func Main(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet(name+" explain", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	output := fs.StringP("output", "o", "text", `Output format: "text" (one line per fact) or "json" (one object, a field per line).`)
	guardNS := fs.String("guard-namespace", "runner-guard-system", "Namespace runner-guard is installed in (its Deployment is found by the label "+installLabel+").")
	configMap := fs.String("config-map", "", `ConfigMap holding runner-guard's config.yaml (default: the one its Deployment mounts, else "`+DefaultConfigMap+`").`)
	configFile := fs.String("config", "", "A local copy of runner-guard's --config file, read instead of its ConfigMap.")
	loading := clientcmd.NewDefaultClientConfigLoadingRules()
	fs.StringVar(&loading.ExplicitPath, "kubeconfig", "", "Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).")
	overrides := &clientcmd.ConfigOverrides{}
	clientcmd.BindOverrideFlags(overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s %s\n\nFor one pod: the runner runner-guard takes it for and the source of each fact, the scope binding and credentials that apply (names, never values), the hints and the budget, the last decision, and what a delete and an eviction would get now (server-side dry runs). It reads with your own credentials; what you may not read is shown as unknown with the permission that would show it.\n\nFlags:\n%s", name, Usage, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "%s explain: %v\n", name, err)
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "%s explain: name one pod: %s %s\n", name, name, Usage)
		return 2
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "%s explain: --output %q: want text or json\n", name, *output)
		return 2
	}
	req := Request{Pod: fs.Arg(0), GuardNamespace: *guardNS, ConfigMap: *configMap}
	if *configFile != "" {
		data, err := os.ReadFile(*configFile)
		if err != nil {
			fmt.Fprintf(stderr, "%s explain: --config: %v\n", name, err)
			return 2
		}
		req.ConfigFile = data
	}
	kc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(loading, overrides)
	ns, _, err := kc.Namespace()
	if err != nil {
		fmt.Fprintf(stderr, "%s explain: kubeconfig: %v\n", name, err)
		return 2
	}
	req.Namespace = ns
	cfg, err := kc.ClientConfig()
	if err != nil {
		fmt.Fprintf(stderr, "%s explain: kubeconfig: %v\n", name, err)
		return 2
	}
	cfg.UserAgent = name + "-explain"
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s explain: %v\n", name, err)
		return 1
	}
	cl, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		fmt.Fprintf(stderr, "%s explain: %v\n", name, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	report, err := Explain(ctx, Cluster{Kube: kube, Client: cl}, req)
	if err != nil {
		fmt.Fprintf(stderr, "%s explain: %v\n", name, err)
		return 1
	}
	if *output == "json" {
		err = report.WriteJSON(stdout)
	} else {
		err = report.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s explain: %v\n", name, err)
		return 1
	}
	return 0
}
