package status

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
)

// The series the scrape reads (SPEC "Metrics"). token_valid is what a fence consults; the epoch is
// the token it would use.
const (
	MetricTokenValid = "ehdb_election_token_valid"
	MetricEpoch      = "ehdb_election_epoch"
)

// Where a writer serves its metrics (the reference deployment and cmd/ehdb-writer).
const (
	MetricsPort = "9090"
	MetricsPath = "metrics"
)

// Scrape is what a holder pod's /metrics said about its token, or why it could not be read. A
// failed scrape is a property of its row, never a failure of the view.
type Scrape struct {
	Pod string
	// TokenValid and Epoch are nil when the series could not be read.
	TokenValid *bool
	Epoch      *int64
	// Err says why the pod could not be scraped or its answer not understood; "" when both series
	// were read.
	Err string
}

// Fetcher fetches a pod's metrics exposition: the body and its Content-Type.
type Fetcher interface {
	Fetch(ctx context.Context, namespace, pod string) (body []byte, contentType string, err error)
}

// PodProxy fetches through the API server's pod proxy
// (/api/v1/namespaces/NS/pods/NAME:PORT/proxy/PATH), so the scrape needs nothing but the
// kubeconfig: no port-forward, no route to the pod network. It needs `get pods/proxy`.
type PodProxy struct {
	// Client is a core/v1 REST client (clientset.CoreV1().RESTClient()).
	Client rest.Interface
	Port   string // default MetricsPort
	Path   string // default MetricsPath
}

// Fetch implements Fetcher.
func (p PodProxy) Fetch(ctx context.Context, namespace, pod string) ([]byte, string, error) {
	port, path := p.Port, p.Path
	if port == "" {
		port = MetricsPort
	}
	if path == "" {
		path = MetricsPath
	}
	var contentType string
	res := p.Client.Get().
		Namespace(namespace).
		Resource("pods").
		Name(pod+":"+port).
		SubResource("proxy").
		Suffix(path).
		// Ask for the text format: it is what every Prometheus client serves and what we decode.
		SetHeader("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain))).
		Do(ctx).
		ContentType(&contentType)
	// Error, not Raw's error: only Error decodes the API server's Status body, which carries the
	// reason the proxy failed ("error trying to reach service: …").
	if err := res.Error(); err != nil {
		return nil, "", err
	}
	body, err := res.Raw()
	return body, contentType, err
}

// PodDescriber is implemented by a Fetcher that can say what state a pod is in, to explain a failed
// scrape.
type PodDescriber interface {
	DescribePod(ctx context.Context, namespace, pod string) (string, error)
}

// DescribePod implements PodDescriber: the pod's phase, IP and readiness in a few words.
func (p PodProxy) DescribePod(ctx context.Context, namespace, pod string) (string, error) {
	var obj corev1.Pod
	if err := p.Client.Get().Namespace(namespace).Resource("pods").Name(pod).Do(ctx).Into(&obj); err != nil {
		return "", err
	}
	return podState(&obj), nil
}

func podState(pod *corev1.Pod) string {
	if pod.DeletionTimestamp != nil {
		return "pod is terminating"
	}
	st := "pod is " + string(pod.Status.Phase)
	if pod.Status.Phase == "" {
		st = "pod has no phase yet"
	}
	if pod.Status.PodIP == "" {
		if pod.Spec.NodeName == "" {
			return st + ", not scheduled, no IP yet"
		}
		return st + ", no IP yet"
	}
	ready := "not Ready"
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			ready = "Ready"
		}
	}
	return st + ", IP " + pod.Status.PodIP + ", " + ready
}

// WriterMetrics are the election series read from one exposition; nil when absent.
type WriterMetrics struct {
	TokenValid *bool
	Epoch      *int64
}

// ParseExposition decodes a Prometheus exposition (the format named by contentType; text when it
// names none) and reads the election's token_valid and epoch. A missing series is nil, not an
// error: the caller says what is missing; an unreadable value is an error.
func ParseExposition(body []byte, contentType string) (WriterMetrics, error) {
	var m WriterMetrics
	format := expfmt.ResponseFormat(http.Header{"Content-Type": {contentType}})
	if format == expfmt.FmtUnknown {
		format = expfmt.NewFormat(expfmt.TypeTextPlain)
	}
	dec := expfmt.NewDecoder(bytes.NewReader(body), format)
	for {
		var mf dto.MetricFamily
		err := dec.Decode(&mf)
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return m, fmt.Errorf("cannot parse the metrics exposition: %w", err)
		}
		switch mf.GetName() {
		case MetricTokenValid:
			v, err := singleValue(&mf)
			if err != nil {
				return m, err
			}
			switch v {
			case 0, 1:
				b := v == 1
				m.TokenValid = &b
			default:
				return m, fmt.Errorf("%s is %v, expected 0 or 1", MetricTokenValid, v)
			}
		case MetricEpoch:
			v, err := singleValue(&mf)
			if err != nil {
				return m, err
			}
			if v < 0 || v != math.Trunc(v) || v > math.MaxInt64 {
				return m, fmt.Errorf("%s is %v, expected a whole number >= 0", MetricEpoch, v)
			}
			n := int64(v)
			m.Epoch = &n
		}
	}
}

// singleValue is the value of an unlabelled gauge (or untyped: the text format without a TYPE line).
func singleValue(mf *dto.MetricFamily) (float64, error) {
	if len(mf.GetMetric()) != 1 {
		return 0, fmt.Errorf("%s has %d series, expected 1", mf.GetName(), len(mf.GetMetric()))
	}
	mt := mf.GetMetric()[0]
	switch {
	case mt.GetGauge() != nil:
		return mt.GetGauge().GetValue(), nil
	case mt.GetUntyped() != nil:
		return mt.GetUntyped().GetValue(), nil
	}
	return 0, fmt.Errorf("%s is a %s, expected a gauge", mf.GetName(), strings.ToLower(mf.GetType().String()))
}

// ScrapeOptions tune ScrapeRows.
type ScrapeOptions struct {
	// Timeout bounds each pod's scrape (default 5s): one hung pod must not hold up the view.
	Timeout time.Duration
	// Concurrency bounds the scrapes in flight (default 8).
	Concurrency int
}

// ScrapeRows fills in Scrape on every row: the holder pod's token_valid and epoch, or why they
// could not be read. It never fails; each row carries its own outcome. A row's pod is looked up in
// the row's namespace, or in namespace when the row has none.
func ScrapeRows(ctx context.Context, f Fetcher, namespace string, rows []Row, opts ScrapeOptions) {
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	sem := make(chan struct{}, opts.Concurrency)
	var wg sync.WaitGroup
	for i := range rows {
		r := &rows[i]
		if r.Holder == "" {
			r.Scrape = &Scrape{Err: "released: no holder to scrape"}
			continue
		}
		if len(validation.IsDNS1123Subdomain(r.Pod)) > 0 {
			// Not a name the API could have; it is not put into a request path either.
			r.Scrape = &Scrape{Pod: r.Pod, Err: fmt.Sprintf("holder identity %q does not name a pod (%q is not a pod name)", r.Holder, r.Pod)}
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ns := namespace
			if r.Namespace != "" {
				ns = r.Namespace
			}
			r.Scrape = scrapeOne(ctx, f, ns, r.Pod, opts.Timeout)
		}()
	}
	wg.Wait()
}

func scrapeOne(ctx context.Context, f Fetcher, namespace, pod string, timeout time.Duration) *Scrape {
	s := &Scrape{Pod: pod}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, contentType, err := f.Fetch(ctx, namespace, pod)
	if err != nil {
		s.Err = describeFetchError(err, namespace, pod, timeout)
		if d, ok := f.(PodDescriber); ok && worthDescribing(err, pod) {
			// The proxy's own words ("address not allowed") rarely say what is wrong with the pod;
			// its phase, IP and readiness usually do. Best effort, on a fresh short deadline.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if state, derr := d.DescribePod(dctx, namespace, pod); derr == nil {
				s.Err += " (" + state + ")"
			}
		}
		return s
	}
	m, err := ParseExposition(body, contentType)
	s.TokenValid, s.Epoch = m.TokenValid, m.Epoch
	var missing []string
	if s.TokenValid == nil {
		missing = append(missing, MetricTokenValid)
	}
	if s.Epoch == nil {
		missing = append(missing, MetricEpoch)
	}
	switch {
	case err != nil:
		s.Err = err.Error()
	case len(missing) > 0:
		s.Err = fmt.Sprintf("no %s on :%s/%s (is this pod an ehdb writer with the election built in?)", strings.Join(missing, " or "), MetricsPort, MetricsPath)
	}
	return s
}

// worthDescribing says whether the pod's state may explain a failed fetch: not when the pod is
// gone or the caller lacks permission, which the message already says.
func worthDescribing(err error, pod string) bool {
	var status apierrors.APIStatus
	switch {
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err), isPodNotFound(err, pod):
		return false
	}
	return errors.As(err, &status) || errors.Is(err, context.DeadlineExceeded)
}

// describeFetchError says, in an operator's words, why the pod proxy gave no metrics.
func describeFetchError(err error, namespace, pod string, timeout time.Duration) string {
	var status apierrors.APIStatus
	switch {
	case errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err):
		return fmt.Sprintf("no answer from pod %s within %s", pod, timeout)
	case apierrors.IsForbidden(err):
		// The API server's message would repeat this at length on every row.
		return fmt.Sprintf("forbidden: the scrape needs get on pods/proxy in namespace %s", namespace)
	case apierrors.IsUnauthorized(err):
		return fmt.Sprintf("unauthorized: the API server rejected the credentials (%s)", apiMessage(err))
	case apierrors.IsNotFound(err) && isPodNotFound(err, pod):
		return fmt.Sprintf("pod %s not found in namespace %s (the holder may be gone)", pod, namespace)
	case errors.As(err, &status):
		return fmt.Sprintf("pod proxy to %s:%s/%s answered %d: %s", pod, MetricsPort, MetricsPath, status.Status().Code, apiMessage(err))
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Sprintf("cannot reach the API server: %v", err)
}

// isPodNotFound tells the API server's "pods NAME not found" (details name the pod) from a 404 the
// pod itself answered through the proxy (client-go names the proxied "NAME:PORT" then).
func isPodNotFound(err error, pod string) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Kind == "pods" && d.Name == pod
}

func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return strings.TrimSpace(status.Status().Message)
	}
	return err.Error()
}
