package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
)

// Exit codes of the status command (README.md beside main.go documents them).
const (
	// ExitOK: the view was printed — including when the namespace has no shard Leases, and
	// whatever the Leases' states and the scrape's outcomes are (those are data, not failures).
	ExitOK = 0
	// ExitError: the Leases could not be read — no usable kubeconfig, API server unreachable,
	// or an API error other than a denial.
	ExitError = 1
	// ExitUsage: bad flags or arguments.
	ExitUsage = 2
	// ExitDenied: the API server refused the credentials (401) or the permission (403).
	ExitDenied = 3
)

// Options are the command's injected dependencies; the zero value is production.
type Options struct {
	// Clock gives the instant liveness is judged at (default: the real clock).
	Clock clock.PassiveClock
	// Name is how the user invoked the command, for usage and hints ("ehdb-election" or
	// "kubectl ehdb-election"; default "ehdb-election").
	Name string
}

type flags struct {
	namespace, kubeconfig, context, output string
	scrape                                 bool
	requestTimeout, scrapeTimeout          time.Duration
}

// Run is `status`: it parses args (the arguments after "status"), reads the namespace's shard
// Leases, and prints the view to stdout; problems go to stderr. It returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, opts Options) int {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Name == "" {
		opts.Name = "ehdb-election"
	}
	var f flags
	fs := pflag.NewFlagSet("status", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVarP(&f.namespace, "namespace", "n", "", "namespace of the Leases (default: the current context's namespace, like kubectl)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "path of the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	fs.StringVar(&f.context, "context", "", "kubeconfig context to use (default: the current context)")
	fs.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fs.BoolVar(&f.scrape, "scrape", false, "also read each holder pod's ehdb_election_token_valid and ehdb_election_epoch from :9090/metrics through the API server's pod proxy (needs get pods/proxy)")
	fs.DurationVar(&f.requestTimeout, "request-timeout", 15*time.Second, "timeout of each API request (0 = none)")
	fs.DurationVar(&f.scrapeTimeout, "scrape-timeout", 5*time.Second, "timeout of each pod's scrape")
	// Usage is printed here, not by pflag: asked for (--help) it goes to stdout, and a parse
	// error gets one line and a pointer, not the whole flag list.
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: %s status [-n NAMESPACE] [--kubeconfig PATH] [--context NAME] [-o table|json] [--scrape]\n\n", opts.Name)
			fmt.Fprint(stdout, "Shows every ehdb-shard-* Lease of a namespace: shard, holder, epoch, last renewal, expiry, and\n"+
				"whether it is live (now <= renewTime + leaseDurationSeconds), expired or released.\n\nFlags:\n")
			fmt.Fprint(stdout, fs.FlagUsages())
			return ExitOK
		}
		fmt.Fprintf(stderr, "error: %v\nSee '%s status --help'.\n", err, opts.Name)
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "error: unexpected argument %q\nSee '%s status --help'.\n", fs.Arg(0), opts.Name)
		return ExitUsage
	}
	if f.output != "table" && f.output != "json" {
		fmt.Fprintf(stderr, "error: --output %q: must be table or json\n", f.output)
		return ExitUsage
	}
	if f.namespace != "" {
		if errs := validation.IsDNS1123Label(f.namespace); len(errs) > 0 {
			fmt.Fprintf(stderr, "error: --namespace %q is not a namespace name: %s\n", f.namespace, strings.Join(errs, "; "))
			return ExitUsage
		}
	}

	cfg, ns, err := loadConfig(f)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return ExitError
	}
	cfg.Timeout = f.requestTimeout
	cfg.UserAgent = "ehdb-election-status"
	cfg.WarningHandler = rest.NewWarningWriter(stderr, rest.WarningWriterOptions{Deduplicate: true})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "error: building a client for %s: %v\n", cfg.Host, err)
		return ExitError
	}

	leases, err := listLeases(ctx, cs, ns)
	if err != nil {
		msg, code := describeListError(err, cfg.Host, ns, opts.Name)
		fmt.Fprintln(stderr, msg)
		return code
	}
	now := opts.Clock.Now()
	rows, ignored := Rows(leases, now)
	if f.scrape {
		ScrapeRows(ctx, PodProxy{Client: cs.CoreV1().RESTClient()}, ns, rows, ScrapeOptions{Timeout: f.scrapeTimeout})
	}
	report := Report{Namespace: ns, ObservedAt: now, Rows: rows, Ignored: ignored, Scraped: f.scrape}

	if f.output == "json" {
		if err := WriteJSON(stdout, report); err != nil {
			fmt.Fprintf(stderr, "error: writing output: %v\n", err)
			return ExitError
		}
		return ExitOK
	}
	for _, ig := range ignored {
		fmt.Fprintf(stderr, "warning: ignoring Lease %s: %s\n", ig.Name, ig.Reason)
	}
	if len(rows) == 0 {
		fmt.Fprintln(stderr, noLeasesMessage(ctx, cs, ns))
		return ExitOK
	}
	if err := WriteTable(stdout, report); err != nil {
		fmt.Fprintf(stderr, "error: writing output: %v\n", err)
		return ExitError
	}
	return ExitOK
}

// loadConfig loads the client configuration exactly as kubectl does: clientcmd's default loading
// rules ($KUBECONFIG's list, else ~/.kube/config, else in-cluster), --kubeconfig and --context
// overriding, and the namespace from -n, else the context's, else "default".
func loadConfig(f flags) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: f.context}
	overrides.Context.Namespace = f.namespace
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, "", errors.New("no kubeconfig found: set KUBECONFIG, pass --kubeconfig, or create ~/.kube/config")
		}
		return nil, "", fmt.Errorf("loading the kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	return cfg, ns, nil
}

// listLeases lists the namespace's Leases in pages. A name prefix cannot be selected server-side,
// so the filter is Rows'; a page bound keeps a namespace full of other Leases cheap to read.
func listLeases(ctx context.Context, cs kubernetes.Interface, ns string) ([]coordinationv1.Lease, error) {
	var leases []coordinationv1.Lease
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := cs.CoordinationV1().Leases(ns).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		leases = append(leases, list.Items...)
		if list.Continue == "" {
			return leases, nil
		}
		opts.Continue = list.Continue
	}
}

// describeListError turns a failed List into what the operator should do about it, and the exit
// code.
func describeListError(err error, host, ns, name string) (string, int) {
	var status apierrors.APIStatus
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Sprintf(`error: forbidden: %s
The view needs verb "list" on resource "leases" (API group "coordination.k8s.io") in namespace %s,
and your kubeconfig's identity lacks it. Grant it with a Role that can list leases, e.g.:
  kubectl create role ehdb-election-status -n %s --verb=list --resource=leases.coordination.k8s.io
  kubectl create rolebinding ehdb-election-status -n %s --role=ehdb-election-status %s
(--scrape also needs verb "get" on "pods/proxy".)`, apiMessage(err), ns, ns, ns, subjectFlag(apiMessage(err))), ExitDenied
	case apierrors.IsUnauthorized(err):
		return fmt.Sprintf("error: the API server at %s rejected the kubeconfig's credentials (401 Unauthorized): %s\nRenew them (log in again) or choose another --context.", host, apiMessage(err)), ExitDenied
	case errors.As(err, &status):
		return fmt.Sprintf("error: listing leases in namespace %s at %s: %s", ns, host, apiMessage(err)), ExitError
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Sprintf("error: cannot reach the API server at %s: %v\nIs the cluster up, and are the kubeconfig and context the ones you meant? (%s status --kubeconfig PATH --context NAME)", host, err, name), ExitError
}

// forbiddenUserRE finds the user in the API server's denial ("User \"bob\" cannot list …").
var forbiddenUserRE = regexp.MustCompile(`User "([^"]+)" cannot`)

// subjectFlag is the `kubectl create rolebinding` flag naming the denied identity, read from the
// denial so the hint can be pasted as is; a placeholder when the message does not say.
func subjectFlag(msg string) string {
	m := forbiddenUserRE.FindStringSubmatch(msg)
	if m == nil {
		return "--user=<you>"
	}
	if sa, ok := strings.CutPrefix(m[1], "system:serviceaccount:"); ok {
		return "--serviceaccount=" + sa
	}
	return "--user=" + m[1]
}

// noLeasesMessage says that the namespace has no shard Leases and what that usually means. A
// missing namespace is told apart when the caller may read namespaces; otherwise the generic hint.
func noLeasesMessage(ctx context.Context, cs kubernetes.Interface, ns string) string {
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return fmt.Sprintf("No %s* Leases: namespace %q does not exist (check -n / the context's namespace).", LeasePrefix, ns)
	}
	return fmt.Sprintf("No %s* Leases found in namespace %s: no writer has run an election here yet.\n"+
		"Check the writers run with NOETL_EHDB_ELECTION=true and that this is their namespace (-n).", LeasePrefix, ns)
}
