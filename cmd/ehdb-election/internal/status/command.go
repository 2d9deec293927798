package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
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
	// Clientset builds the client the Leases are read with (default: kubernetes.NewForConfig);
	// tests substitute client-go's fake clientset.
	Clientset func(*rest.Config) (kubernetes.Interface, error)
	// MinRedraw is the least time between two draws of a watch (default 1 s): a namespace of
	// many shards renews Leases several times a second, and a terminal cannot show more.
	MinRedraw time.Duration
}

type flags struct {
	output               string
	allNamespaces, watch bool
	scrape               bool
	scrapeTimeout        time.Duration
	kube                 *genericclioptions.ConfigFlags
	minRedraw            time.Duration
}

// newFlags defines the command's flags, the one list that parsing, --help and shell completion read.
func newFlags() (*flags, *pflag.FlagSet) {
	f := &flags{kube: genericclioptions.NewConfigFlags(true)}
	f.kube.Timeout = ptr.To(defaultRequestTimeout)
	fs := pflag.NewFlagSet("status", pflag.ContinueOnError)
	fs.StringVarP(&f.output, "output", "o", FormatTable, "output format: "+strings.Join(Formats, ", "))
	fs.BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "show the shard Leases of every namespace (overrides -n)")
	fs.BoolVarP(&f.watch, "watch", "w", false, "keep the view open: redraw on every Lease event, and when a live Lease expires")
	fs.BoolVar(&f.scrape, "scrape", false, "also read each holder pod's ehdb_election_token_valid and ehdb_election_epoch from :9090/metrics through the API server's pod proxy (needs get pods/proxy)")
	fs.DurationVar(&f.scrapeTimeout, "scrape-timeout", 5*time.Second, "timeout of each pod's scrape")
	// Every kubectl connection flag: --kubeconfig, --context, -n, --as, --as-group, --token, -s, ...
	f.kube.AddFlags(fs)
	return f, fs
}

// FlagSet is the status command's flags, for shell completion.
func FlagSet() *pflag.FlagSet {
	_, fs := newFlags()
	return fs
}

// defaultRequestTimeout bounds each API request unless --request-timeout says otherwise; a watch's
// long-running request is bounded by the server instead (see view.watch).
const defaultRequestTimeout = "15s"

// Run is `status`: it parses args (the arguments after "status"), reads the shard Leases, and
// prints the view to stdout; problems go to stderr. With --watch it keeps redrawing until ctx ends.
// It returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, opts Options) int {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Name == "" {
		opts.Name = "ehdb-election"
	}
	if opts.Clientset == nil {
		opts.Clientset = func(c *rest.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(c) }
	}
	f, fs := newFlags()
	f.minRedraw = opts.MinRedraw
	fs.SetOutput(stderr)
	// Usage is printed here, not by pflag: asked for (--help) it goes to stdout, and a parse
	// error gets one line and a pointer, not the whole flag list.
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: %s status [-n NAMESPACE | -A] [-o table|wide|json|yaml] [--watch] [--scrape] [kubectl flags]\n\n", opts.Name)
			fmt.Fprint(stdout, "Shows every ehdb-shard-* Lease of a namespace: shard, holder, epoch, last renewal, expiry, and\n"+
				"whether it is live (now <= renewTime + leaseDurationSeconds), expired or released, with now\n"+
				"taken on the API server's clock.\n\nFlags:\n")
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
	printer, err := NewPrinter(f.output)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return ExitUsage
	}
	if ns := *f.kube.Namespace; ns != "" && !f.allNamespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			fmt.Fprintf(stderr, "error: --namespace %q is not a namespace name: %s\n", ns, strings.Join(errs, "; "))
			return ExitUsage
		}
	}
	if _, err := clientcmd.ParseTimeout(*f.kube.Timeout); err != nil {
		fmt.Fprintf(stderr, "error: --request-timeout %q: %v\n", *f.kube.Timeout, err)
		return ExitUsage
	}
	if f.watch && f.scrape {
		fmt.Fprintf(stderr, "error: --scrape cannot be combined with --watch: a pod's token validity changes without a Lease event, so a redraw would not show it; run --scrape on its own\n")
		return ExitUsage
	}

	cfg, ns, err := loadConfig(f.kube)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return ExitError
	}
	if f.allNamespaces {
		ns = metav1.NamespaceAll
	}
	cfg.UserAgent = "ehdb-election-status"
	cfg.WarningHandler = rest.NewWarningWriter(stderr, rest.WarningWriterOptions{Deduplicate: true})
	// The Lease client records the API server's clock from its answers; the scrape's client must
	// not (a pod-proxy answer carries the pod's Date).
	sc := &ServerClock{Local: opts.Clock}
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.Wrap(sc.WrapTransport)
	if f.watch {
		// http.Client's timeout would cut the watch's stream; the reflector bounds each watch with
		// timeoutSeconds instead, and each list's context with the request timeout.
		leaseCfg.Timeout = 0
	}
	cs, err := opts.Clientset(leaseCfg)
	if err != nil {
		fmt.Fprintf(stderr, "error: building a client for %s: %v\n", cfg.Host, err)
		return ExitError
	}
	v := view{ns: ns, all: f.allNamespaces, clock: sc, host: cfg.Host, name: opts.Name, timeout: cfg.Timeout, cs: cs,
		printer: printer, stdout: stdout, stderr: stderr, warned: map[string]bool{}}

	if f.watch {
		timers, _ := opts.Clock.(clock.Clock)
		if timers == nil {
			timers = clock.RealClock{}
		}
		if f.minRedraw == 0 {
			f.minRedraw = time.Second
		}
		return v.watch(ctx, timers, f.minRedraw, cfg.Timeout)
	}

	leases, err := listLeases(ctx, cs, ns)
	if err != nil {
		msg, code := v.describeListError(err, false)
		fmt.Fprintln(stderr, msg)
		return code
	}
	report := v.report(leases)
	if f.scrape {
		scs, err := opts.Clientset(cfg)
		if err != nil {
			fmt.Fprintf(stderr, "error: building a client for %s: %v\n", cfg.Host, err)
			return ExitError
		}
		ScrapeRows(ctx, PodProxy{Client: scs.CoreV1().RESTClient()}, ns, report.Rows, ScrapeOptions{Timeout: f.scrapeTimeout})
		report.Scraped = true
	}
	return v.draw(ctx, report)
}

// view draws reports of the Leases of one namespace (or all) to stdout, warnings to stderr.
type view struct {
	ns      string
	all     bool
	clock   *ServerClock
	host    string
	name    string
	timeout time.Duration // each request's bound (--request-timeout), for the message when it ran out
	cs      kubernetes.Interface
	printer *Printer
	stdout  io.Writer
	stderr  io.Writer
	// warned holds the warnings already printed: a watch says each once.
	warned map[string]bool
	empty  bool // the last draw had no rows
	draws  int
}

// report computes the rows at the API server's current time, as best known.
func (v *view) report(leases []coordinationv1.Lease) Report {
	now := v.clock.Now()
	skew, fromServer := v.clock.Skew()
	rows, ignored := Rows(leases, now)
	return Report{Namespace: v.ns, AllNamespaces: v.all, ObservedAt: now, Skew: skew, ServerClock: fromServer, Rows: rows, Ignored: ignored}
}

// warn prints a warning to stderr, once per view.
func (v *view) warn(msg string) {
	if !v.warned[msg] {
		v.warned[msg] = true
		fmt.Fprintln(v.stderr, "warning: "+msg)
	}
}

// draw prints one report, with its warnings; it returns the exit code of a view that ends here.
func (v *view) draw(ctx context.Context, r Report) int {
	switch {
	case !r.ServerClock:
		v.warn("the API server's answers had no Date header: liveness is judged on this machine's clock, which may not be the cluster's")
	case r.Skew != 0:
		dir := "ahead of"
		if r.Skew < 0 {
			dir = "behind"
		}
		v.warn(fmt.Sprintf("this machine's clock is %v %s the API server's (by its Date header); liveness and ages are judged on the API server's clock",
			durationAbs(r.Skew).Round(time.Second), dir))
	}
	structured := v.printer.Format() == FormatJSON || v.printer.Format() == FormatYAML
	if !structured {
		for _, ig := range r.Ignored {
			where := ""
			if v.all {
				where = " in namespace " + ig.Namespace
			}
			v.warn(fmt.Sprintf("ignoring Lease %s%s: %s", ig.Name, where, ig.Reason))
		}
		// Said once per time the view turns empty (a watch may see every Lease deleted).
		if len(r.Rows) == 0 {
			if !v.empty {
				v.empty = true
				fmt.Fprintln(v.stderr, noLeasesMessage(ctx, v.cs, v.ns))
			}
			return ExitOK
		}
		v.empty = false
		if v.draws > 0 {
			fmt.Fprintln(v.stdout) // draws of a watch are whole tables, one blank line apart
		}
	}
	v.draws++
	if err := v.printer.Print(v.stdout, r); err != nil {
		fmt.Fprintf(v.stderr, "error: writing output: %v\n", err)
		return ExitError
	}
	return ExitOK
}

func durationAbs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// loadConfig loads the client configuration exactly as kubectl does, from kubectl's own flags:
// clientcmd's default loading rules ($KUBECONFIG's list, else ~/.kube/config, else in-cluster)
// with every override flag applied, and the namespace from -n, else the context's, else "default".
func loadConfig(kube *genericclioptions.ConfigFlags) (*rest.Config, string, error) {
	loader := kube.ToRawKubeConfigLoader()
	// cli-runtime falls back to a default server (localhost:8080) when nothing is configured;
	// say so instead of failing to reach it.
	if raw, err := loader.RawConfig(); err == nil && len(raw.Clusters) == 0 && *kube.APIServer == "" {
		if _, err := rest.InClusterConfig(); err != nil {
			return nil, "", errors.New("no kubeconfig found: set KUBECONFIG, pass --kubeconfig (or --server), or create ~/.kube/config")
		}
	}
	cfg, err := kube.ToRESTConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, "", errors.New("no kubeconfig found: set KUBECONFIG, pass --kubeconfig (or --server), or create ~/.kube/config")
		}
		return nil, "", fmt.Errorf("loading the kubeconfig: %w", err)
	}
	ns, _, err := loader.Namespace()
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

// describeListError turns a failed List (or, with watch, a failed watch) into what the operator
// should do about it, and the exit code.
func (v *view) describeListError(err error, watch bool) (string, int) {
	host, ns, name := v.host, v.ns, v.name
	var status apierrors.APIStatus
	verbs, needs := "list", `verb "list"`
	if watch {
		verbs, needs = "list,watch", `verbs "list" and "watch"`
	}
	switch {
	case apierrors.IsForbidden(err) && ns == metav1.NamespaceAll:
		return fmt.Sprintf(`error: forbidden: %s
-A needs %s on resource "leases" (API group "coordination.k8s.io") at the cluster scope,
and your identity lacks it. Grant it with a ClusterRole, e.g.:
  kubectl create clusterrole ehdb-election-status --verb=%s --resource=leases.coordination.k8s.io
  kubectl create clusterrolebinding ehdb-election-status --clusterrole=ehdb-election-status %s
or drop -A and name a namespace (-n) where you may list them.`, apiMessage(err), needs, verbs, subjectFlag(apiMessage(err))), ExitDenied
	case apierrors.IsForbidden(err):
		return fmt.Sprintf(`error: forbidden: %s
The view needs %s on resource "leases" (API group "coordination.k8s.io") in namespace %s,
and your identity lacks it. Grant it with a Role, e.g.:
  kubectl create role ehdb-election-status -n %s --verb=%s --resource=leases.coordination.k8s.io
  kubectl create rolebinding ehdb-election-status -n %s --role=ehdb-election-status %s
or, where the ehdb-election chart is installed (it adds lease reading to the built-in view role):
  kubectl create rolebinding ehdb-election-view -n %s --clusterrole=view %s
(--scrape also needs verb "get" on "pods/proxy".)`, apiMessage(err), needs, ns, ns, verbs, ns, subjectFlag(apiMessage(err)), ns, subjectFlag(apiMessage(err))), ExitDenied
	case apierrors.IsUnauthorized(err):
		return fmt.Sprintf("error: the API server at %s rejected the kubeconfig's credentials (401 Unauthorized): %s\nRenew them (log in again) or choose another --context.", host, apiMessage(err)), ExitDenied
	case errors.As(err, &status):
		where := "in namespace " + ns
		if ns == metav1.NamespaceAll {
			where = "in all namespaces"
		}
		doing := "listing"
		if watch {
			doing = "listing/watching"
		}
		return fmt.Sprintf("error: %s leases %s at %s: %s", doing, where, host, apiMessage(err)), ExitError
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if v.timeout > 0 && (errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Sprintf("error: the API server at %s did not answer within %v (--request-timeout): %v\nA slow or overloaded API server may need more: %s status --request-timeout 1m", host, v.timeout, err, name), ExitError
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
	if ns == metav1.NamespaceAll {
		return fmt.Sprintf("No %s* Leases found in any namespace: no writer has run an election in this cluster yet.\n"+
			"Check the writers run with NOETL_EHDB_ELECTION=true.", LeasePrefix)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return fmt.Sprintf("No %s* Leases: namespace %q does not exist (check -n / the context's namespace).", LeasePrefix, ns)
	}
	return fmt.Sprintf("No %s* Leases found in namespace %s: no writer has run an election here yet.\n"+
		"Check the writers run with NOETL_EHDB_ELECTION=true and that this is their namespace (-n).", LeasePrefix, ns)
}
