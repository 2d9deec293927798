package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"

	"github.com/go-logr/logr"
	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/noetl/ehdb-election/webhook"
	"github.com/noetl/ehdb-election/webhook/kubeapi"
	guardmetrics "github.com/noetl/ehdb-election/webhook/metrics"
)

const webhookPath = webhook.Path

// run serves the guard until ctx is done, then stops gracefully: the webhook server drains
// in-flight reviews before the process exits.
func run(ctx context.Context, o options, cfg *rest.Config, log logr.Logger) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}

	certs := newCertLoader(filepath.Join(o.certDir, "tls.crt"), filepath.Join(o.certDir, "tls.key"), log.WithName("certs"))

	// The manager's cache holds only this webhook's own Secret and webhook configuration, each
	// selected by metadata.name, so the chart's RBAC can name them with resourceNames (a list or
	// watch with resourceNames is authorized only with that field selector).
	byName := func(name string) fields.Selector { return fields.OneTermEqualSelector("metadata.name", name) }
	cacheOpts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&admissionregistrationv1.ValidatingWebhookConfiguration{}: {Field: byName(o.webhookConfigName)},
	}}
	if o.namespace != "" {
		cacheOpts.ByObject[&corev1.Secret{}] = cache.ByObject{
			Namespaces: map[string]cache.Config{o.namespace: {FieldSelector: byName(o.certSecretName)}},
		}
	}
	timeout := o.shutdownTimeout
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                  scheme,
		Logger:                  log,
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.probeAddr,
		GracefulShutdownTimeout: &timeout,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.Add(certs); err != nil {
		return err
	}

	decisions, err := guardmetrics.New(ctrlmetrics.Registry)
	if err != nil {
		return err
	}
	lookups := rest.CopyConfig(cfg)
	// No client-side rate limit on the lookups: each answers a review the API server is waiting
	// on, so a token bucket here only queues the API server behind itself (at 50 QPS, eight armed
	// reviews in flight waited ~1 s each). The API server's priority and fairness bounds the load,
	// and the number of reviews in flight is bounded by the API server's own admission calls.
	lookups.QPS, lookups.Burst = -1, 0
	// Uncompressed: gzip of a ConfigMap of 1 MB costs the API server (and this process) more CPU
	// than sending it, and the API server is the one every review waits on.
	lookups.DisableCompression = true
	cs, err := kubernetes.NewForConfig(lookups)
	if err != nil {
		return fmt.Errorf("creating the API client: %w", err)
	}
	mc, err := metadata.NewForConfig(lookups)
	if err != nil {
		return fmt.Errorf("creating the metadata client: %w", err)
	}
	// Watches scoped to the guarded namespaces: the Leases the order check reads (--watch-leases),
	// the workloads that may read a ConfigMap or run as an account under review, and (metadata
	// only) the RBAC objects and ServiceAccounts whose every change drops the positive cache.
	// /readyz follows their health.
	w, err := newWatches(cs, mc, o.guardedNamespaces, o.watchLeases, log.WithName("watches"))
	if err != nil {
		return err
	}
	resolverOpts := []webhook.ResolverOption{webhook.CacheAllowedFor(o.cacheAllowedTTL, clock.RealClock{}), webhook.ForgetOnChange(w)}
	w.checkScope(o.webhookConfigName, o.guardedNamespaces)
	if err := mgr.Add(manager.RunnableFunc(w.run)); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("watches", w.ready); err != nil {
		return err
	}
	if o.watchLeases {
		resolverOpts = append(resolverOpts, webhook.ReadLeasesFrom(leaseLister{w}), webhook.JudgeRenewalsBy(w))
	}
	resolver := webhook.NewAPIResolver(kubeapi.New(cs), 0, resolverOpts...)
	clusterRoleScopes := guardedScopes(o.guardedNamespaces)
	if len(clusterRoleScopes) == 1 && clusterRoleScopes[0] == "" {
		clusterRoleScopes = []string{"*"}
	}
	handler := &webhook.Handler{
		Resolver: resolver,
		Accounts: healthyReaders{w},
		// RoleBindings of the guarded namespaces may grant a ClusterRole to a guarded account.
		ClusterRoleScopes: clusterRoleScopes,
		Invalidate:        resolver.Forget,
		Self:              types.NamespacedName{Namespace: o.namespace, Name: o.serviceAccount},
		// Its RBAC and watches cover the guarded namespaces only: a Lease elsewhere is refused
		// for what it is, never "could not verify" (which a Pod would pass).
		Policy:      webhook.Policy{RequireLiveLease: o.requireLiveLease, MaxShards: o.maxShards, LeaseNamespaces: leaseNamespaces(o.guardedNamespaces)},
		Metrics:     decisions,
		Log:         log.WithName("guard"),
		Readers:     healthyReaders{w},
		Owners:      w,
		Workloads:   w,
		MaxInFlight: o.maxInFlight,
		// The body reserve is sized for the connections the server keeps open.
		MaxConnections: o.maxConnections,
		// Writes of kube-root-ca.crt's CA by anyone else are refused while writers may be armed.
		RootCAPublishers: o.rootCAPublishers,
	}
	mux := http.NewServeMux()
	mux.Handle(webhookPath, webhook.NewHTTPHandler(handler))
	server := &admissionServer{
		host: o.webhookHost, port: o.webhookPort, handler: mux, shutdownTimeout: timeout, maxConnections: o.maxConnections, log: log.WithName("server"),
		tlsConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: certs.GetCertificate,
			// HTTP/1.1 only: the API server needs nothing more, and it keeps the HTTP/2
			// stream-reset class of attacks off this port.
			NextProtos: []string{"http/1.1"},
		},
	}
	if o.clientCAFile != "" {
		if err := requireClientCerts(server.tlsConfig, o.clientCAFile, o.clientNames); err != nil {
			return err
		}
	}
	if err := mgr.Add(server); err != nil {
		return err
	}

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	// Ready only when a TLS handshake with the served certificate succeeds.
	if err := mgr.AddReadyzCheck("tls", server.checkTLS); err != nil {
		return err
	}

	if o.certRotation {
		caInjected := make(chan struct{})
		cr := &rotator.CertRotator{
			SecretKey:      types.NamespacedName{Namespace: o.namespace, Name: o.certSecretName},
			CertDir:        o.certDir,
			CAName:         "ehdb-election-webhook-ca",
			CAOrganization: "ehdb-election",
			DNSName:        fmt.Sprintf("%s.%s.svc", o.serviceName, o.namespace),
			ExtraDNSNames: append([]string{o.serviceName, o.serviceName + "." + o.namespace,
				fmt.Sprintf("%s.%s.svc.cluster.local", o.serviceName, o.namespace)}, o.extraDNSNames...),
			IsReady:              caInjected,
			Webhooks:             []rotator.WebhookInfo{{Name: o.webhookConfigName, Type: rotator.Validating}},
			FieldOwner:           "ehdb-election-webhook",
			EnableReadinessCheck: true,
		}
		// The rotator builds a cache of its own from the manager's config and offers no way to
		// select by name (open-policy-agent/cert-controller#228), so it gets a config whose
		// transport adds the metadata.name selector to its list and watch requests.
		restricted := restrictToNames(cfg, map[string]string{
			"/api/v1/namespaces/" + o.namespace + "/secrets":                        o.certSecretName,
			"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations": o.webhookConfigName,
		})
		if err := rotator.AddRotator(&configOverride{Manager: mgr, cfg: restricted}, cr); err != nil {
			return fmt.Errorf("adding the certificate rotator: %w", err)
		}
		if err := mgr.AddReadyzCheck("ca-injected", func(*http.Request) error {
			select {
			case <-caInjected:
				return nil
			default:
				return errors.New("the CA is not yet in the webhook configuration")
			}
		}); err != nil {
			return err
		}
	}

	log.Info("starting", "webhookPort", o.webhookPort, "certDir", o.certDir, "certRotation", o.certRotation,
		"namespace", o.namespace, "guardedNamespaces", o.guardedNamespaces, "maxInFlight", o.maxInFlight, "clientCertificates", o.clientCAFile != "", "maxShards", o.maxShards, "requireLiveLease", o.requireLiveLease, "cacheAllowedTTL", o.cacheAllowedTTL, "watchLeases", o.watchLeases, "metrics", o.metricsAddr, "probes", o.probeAddr)
	if err := mgr.Start(ctx); err != nil {
		return err
	}
	log.Info("stopped")
	return nil
}

// configOverride is the manager as the rotator sees it: the same but for GetConfig.
type configOverride struct {
	manager.Manager
	cfg *rest.Config
}

func (m *configOverride) GetConfig() *rest.Config { return m.cfg }

// leaseNamespaces is Policy.LeaseNamespaces for the guarded namespaces: none (every namespace)
// for ["*"].
func leaseNamespaces(guarded []string) []string {
	if slices.Contains(guarded, "*") {
		return nil
	}
	return guarded
}
